"""Which axes of a module's output are the batch's and the features': known, not assumed.

learnscope reads an output of 3 or more dimensions with the batch first (``[batch, tokens, dim]``,
``[batch, channels, *spatial]``: :mod:`learnscope.embeddings.output_layout`). PyTorch's sequence
modules (``nn.RNN``, ``nn.LSTM``, ``nn.GRU``, ``nn.Transformer``, ``nn.TransformerEncoder`` and
``nn.TransformerDecoder`` and their layers) default to ``batch_first=False``: their outputs are
``[tokens, batch, dim]``, which read batch first would give one "sample" per token position, each
with the batch's sequences as its "tokens". So :func:`batch_first` puts the batch first by this
rule:

1. **The module says it.** An output read as the module gave it (no ``select``) from one of
   PyTorch's sequence modules created with ``batch_first=False`` is ``[tokens, batch, dim]``:
   it is read transposed. One of the channel-first modules below gives ``[batch, channels,
   length]``: its first axis is the batch's.
2. **The batch says it.** The batch's sizes are the first sizes of its tensors (found in
   tuples, lists and mappings, such as a Hugging Face ``BatchEncoding``). A 3-D output whose
   first size is not one of them but whose second is, is sequence-first: it is read transposed.
3. **Otherwise it is refused.** An output whose batch axis, as read, has a size that none of the
   batch's tensors has first is not the batch's rows: a ``ValueError`` names the shape, the
   batch's sizes and the ``select`` that puts the batch first.

A batch without tensors settles nothing (the batch axis is the first), and an output of 2
dimensions is rows (samples, or the nodes of a graph batch), which this rule leaves alone. With a
``select`` that already puts the batch first (``lambda out: out.transpose(0, 1)``) the rule reads
the result as it is.

**Channel-first modules.** A 3-D output is ``[batch, tokens, dim]`` unless the module that gave it
(read without ``select``) is known to give ``[batch, channels, length]``:
:func:`channels_first_layer` names it. Known are PyTorch's 1-d convolutions (``nn.Conv1d``,
``nn.ConvTranspose1d`` and their lazy forms), 1-d pooling (``nn.MaxPool1d``, ``nn.AvgPool1d``,
``nn.LPPool1d``, ``nn.AdaptiveAvgPool1d``, ``nn.AdaptiveMaxPool1d``, ``nn.MaxUnpool1d``),
normalisation over channels (``nn.BatchNorm1d``, ``nn.InstanceNorm1d`` and their lazy forms,
``nn.SyncBatchNorm``, ``nn.GroupNorm``, ``nn.LocalResponseNorm``), 1-d padding
(``nn.ConstantPad1d``, ``nn.ZeroPad1d``, ``nn.ReflectionPad1d``, ``nn.ReplicationPad1d``,
``nn.CircularPad1d``), ``nn.Dropout1d`` and ``nn.Upsample``: each takes and gives
``[batch, channels, *spatial]``.
An ``nn.Sequential`` is read through its last layer, skipping the element-wise ones (the
activations that act on each value alone, such as ``nn.ReLU``, ``nn.GELU``, ``nn.PReLU``;
dropout; ``nn.Identity``): ``Sequential(Conv1d, BatchNorm1d, ReLU)`` is channel-first,
``Sequential(Conv1d, ReLU, AdaptiveAvgPool1d(1), Flatten, Linear)`` is not (its last layer is a
``Linear``). An element-wise layer inside an ``nn.Sequential`` gives the layout of the nearest
layer before it that is not element-wise (:func:`layout_module`): the ``ReLU`` after a
``Conv1d`` is channel-first, the ``Dropout`` after a ``batch_first=False`` transformer
sequence-first. Any other module (your own blocks, ``nn.Softmax``, ``nn.GLU``) is not known, and
its 3-D output is read as tokens.

Example:
    >>> batch = {"tokens": torch.zeros(12, 16, dtype=torch.long), "label": torch.zeros(12)}
    >>> tuple(batch_first(torch.zeros(16, 12, 32), batch, "Demo").shape)
    (12, 16, 32)
    >>> tuple(batch_first(torch.zeros(12, 16, 32), batch, "Demo").shape)
    (12, 16, 32)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

_SEQUENCE_MODULES = (nn.RNNBase, nn.Transformer, nn.MultiheadAttention)
_LAYERS = (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)
_STACKS = (nn.TransformerEncoder, nn.TransformerDecoder)

# Modules that take and give [batch, channels, *spatial]: on a 3-D input, [batch, channels, length].
_CHANNELS_FIRST = (
    nn.Conv1d,  # and LazyConv1d, a subclass
    nn.ConvTranspose1d,  # and LazyConvTranspose1d
    nn.MaxPool1d,
    nn.AvgPool1d,
    nn.LPPool1d,
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveMaxPool1d,
    nn.MaxUnpool1d,
    nn.BatchNorm1d,
    nn.LazyBatchNorm1d,
    nn.InstanceNorm1d,
    nn.LazyInstanceNorm1d,
    nn.SyncBatchNorm,
    nn.GroupNorm,
    nn.LocalResponseNorm,
    nn.ConstantPad1d,  # and ZeroPad1d, a subclass
    nn.ReflectionPad1d,
    nn.ReplicationPad1d,
    nn.CircularPad1d,
    nn.Dropout1d,
    nn.Upsample,
)
# Layers that act on each value alone, whatever the axes: skipped when a Sequential is read.
_ELEMENTWISE = (
    nn.Identity,
    nn.Threshold,
    nn.ReLU,
    nn.RReLU,
    nn.Hardtanh,  # and ReLU6
    nn.Sigmoid,
    nn.Hardsigmoid,
    nn.Tanh,
    nn.SiLU,
    nn.Mish,
    nn.Hardswish,
    nn.ELU,
    nn.CELU,
    nn.SELU,
    nn.GELU,
    nn.Hardshrink,
    nn.LeakyReLU,
    nn.LogSigmoid,
    nn.Softplus,
    nn.Softshrink,
    nn.PReLU,  # one weight per channel at most: each value scaled alone
    nn.Softsign,
    nn.Tanhshrink,
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)


def declares_sequence_first(module: nn.Module | None) -> bool:
    """Whether ``module`` is one of PyTorch's sequence modules made with ``batch_first=False``.

    Example:
        >>> declares_sequence_first(nn.LSTM(4, 8)), declares_sequence_first(nn.Linear(4, 8))
        (True, False)
        >>> layer = nn.TransformerEncoderLayer(8, 2, batch_first=True)
        >>> declares_sequence_first(nn.TransformerEncoder(layer, 1, enable_nested_tensor=False))
        False
    """
    if isinstance(module, _STACKS) and len(module.layers) > 0:
        module = module.layers[0]
    if isinstance(module, _LAYERS):
        module = module.self_attn
    return isinstance(module, _SEQUENCE_MODULES) and not module.batch_first


def layout_module(model: nn.Module, name: str) -> nn.Module:
    """The module whose declared layout the output of sub-module ``name`` of ``model`` has.

    The sub-module itself; for an element-wise layer (activation, dropout, ``nn.Identity``)
    inside an ``nn.Sequential``, the nearest layer before it in that ``Sequential`` that is not
    element-wise (the sub-module itself when there is none).

    Example:
        >>> model = nn.Sequential(nn.Conv1d(4, 8, 3), nn.ReLU(), nn.Dropout(), nn.Flatten())
        >>> type(layout_module(model, "2")).__name__, type(layout_module(model, "3")).__name__
        ('Conv1d', 'Flatten')
    """
    module = model.get_submodule(name)
    parent_name, _, own = name.rpartition(".")
    parent = model.get_submodule(parent_name)
    if not (isinstance(module, _ELEMENTWISE) and isinstance(parent, nn.Sequential)):
        return module
    names = list(parent._modules)  # every layer, a shared one at each place it is used
    before = list(parent)[: names.index(own)]
    earlier = [layer for layer in before if not isinstance(layer, _ELEMENTWISE)]
    return earlier[-1] if earlier else module


def channels_first_layer(module: nn.Module | None) -> nn.Module | None:
    """The layer that makes ``module``'s 3-D output ``[batch, channels, length]``, or ``None``.

    ``module`` itself when it is one of the channel-first modules of this module's docstring;
    for an ``nn.Sequential``, what its last layer gives, element-wise layers skipped; ``None``
    when the module is not known to be channel-first (its 3-D output is read as tokens).

    Example:
        >>> channels_first_layer(nn.Conv1d(4, 8, 3))
        Conv1d(4, 8, kernel_size=(3,), stride=(1,))
        >>> features = nn.Sequential(nn.Conv1d(4, 8, 3), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout())
        >>> type(channels_first_layer(features)).__name__
        'BatchNorm1d'
        >>> channels_first_layer(nn.Sequential(nn.Conv1d(4, 8, 3), nn.Flatten(), nn.Linear(8, 2)))
        >>> channels_first_layer(nn.TransformerEncoderLayer(8, 2)) is None
        True
    """
    while isinstance(module, nn.Sequential):
        layers = [layer for layer in module if not isinstance(layer, _ELEMENTWISE)]
        module = layers[-1] if layers else None
    return module if isinstance(module, _CHANNELS_FIRST) else None


def batch_sizes(batch: Any) -> set[int]:
    """The first sizes of the tensors in ``batch`` (through tuples, lists and mappings).

    Example:
        >>> batch_sizes((torch.zeros(4, 3), {"y": torch.zeros(4), "n": torch.tensor(2)}))
        {4}
        >>> batch_sizes(["not", "tensors"])
        set()
    """
    if isinstance(batch, torch.Tensor):
        return {batch.shape[0]} if batch.ndim > 0 else set()
    if isinstance(batch, Mapping):
        items: Any = batch.values()
    elif isinstance(batch, (tuple, list)):
        items = batch
    else:
        return set()
    return {size for item in items for size in batch_sizes(item)}


def batch_first(
    value: torch.Tensor, batch: Any, owner: str, module: nn.Module | None = None
) -> torch.Tensor:
    """``value`` with its batch axis first, by the rule of this module's docstring.

    Args:
        value: The embedding tensor of one batch.
        batch: The batch it was computed from.
        owner: Who reads it, for messages (``"EmbeddingProjector: module 'encoder'"``).
        module: The module whose output ``value`` is as it gave it (``None`` when ``select``
            picked ``value``): its declared layout is rule 1 (sequence-first, or channel-first
            with the batch first).

    Returns:
        ``value``, or ``value.transpose(0, 1)`` when it is sequence-first.

    Raises:
        ValueError: The batch's tensors say that the axis read as the batch's is not.

    Example:
        >>> batch_first(torch.zeros(16, 12, 32), {"label": torch.zeros(5)}, "Demo")
        Traceback (most recent call last):
        ...
        ValueError: Demo gave shape (16, 12, 32), whose first axis (16) is not the batch's: \
the batch's tensors have 5 rows first. Give select= a function that puts the batch axis \
first, such as select=lambda out: out.transpose(0, 1) for a sequence-first [tokens, batch, dim] \
output, or pool the output to [batch, dim]
    """
    if value.ndim < 3:
        return value
    sizes, shape, read, axis = batch_sizes(batch), tuple(value.shape), "", "first"
    if value.ndim == 3 and declares_sequence_first(module):
        value, axis = value.transpose(0, 1), "second"
        read = f" (read as [tokens, batch, dim]: {type(module).__name__} has batch_first=False)"
    elif value.ndim == 3 and (kind := channels_first_kind(module)) is not None:
        read = f" (read as [batch, channels, length]: {kind})"
    elif value.ndim == 3 and sizes and shape[0] not in sizes and shape[1] in sizes:
        return value.transpose(0, 1)
    if sizes and value.shape[0] not in sizes:
        rows = " or ".join(str(size) for size in sorted(sizes))
        raise ValueError(
            f"{owner} gave shape {shape}{read}, whose {axis} axis ({value.shape[0]}) is not "
            f"the batch's: the batch's tensors have {rows} rows first. Give select= a "
            "function that puts the batch axis first, such as select=lambda out: "
            "out.transpose(0, 1) for a sequence-first [tokens, batch, dim] output, or pool the "
            "output to [batch, dim]"
        )
    return value


def channels_first_kind(module: nn.Module | None) -> str | None:
    """Why ``module``'s 3-D output is ``[batch, channels, length]``, in words (``None``: unknown).

    Example:
        >>> channels_first_kind(nn.AdaptiveAvgPool1d(8)), channels_first_kind(nn.Linear(2, 2))
        ('AdaptiveAvgPool1d', None)
        >>> channels_first_kind(nn.Sequential(nn.Conv1d(1, 2, 3), nn.ReLU()))
        'a Sequential whose last layer (element-wise ones skipped) is Conv1d'
    """
    layer = channels_first_layer(module)
    if layer is None or layer is module:
        return None if layer is None else type(layer).__name__
    return (
        f"a {type(module).__name__} whose last layer (element-wise ones skipped) is "
        f"{type(layer).__name__}"
    )
