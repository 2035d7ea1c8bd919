"""Which axis of a module's output is the batch's: known from the module or the batch, not assumed.

learnscope reads an output of 3 or more dimensions with the batch first (``[batch, tokens, dim]``,
``[batch, channels, *spatial]``: :mod:`learnscope.embedding_layout`). PyTorch's sequence modules
(``nn.RNN``, ``nn.LSTM``, ``nn.GRU``, ``nn.Transformer``, ``nn.TransformerEncoder`` and
``nn.TransformerDecoder`` and their layers) default to ``batch_first=False``: their outputs are
``[tokens, batch, dim]``, which read batch first would give one "sample" per token position, each
with the batch's sequences as its "tokens". So :func:`batch_first` puts the batch first by this
rule:

1. **The module says it.** An output read as the module gave it (no ``select``) from one of
   PyTorch's sequence modules created with ``batch_first=False`` is ``[tokens, batch, dim]``:
   it is read transposed.
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
            picked ``value``): its declared layout is rule 1.

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
    sizes, shape, read = batch_sizes(batch), tuple(value.shape), ""
    if value.ndim == 3 and declares_sequence_first(module):
        value = value.transpose(0, 1)
        read = f" (read as [tokens, batch, dim]: {type(module).__name__} has batch_first=False)"
    elif value.ndim == 3 and sizes and shape[0] not in sizes and shape[1] in sizes:
        return value.transpose(0, 1)
    if sizes and value.shape[0] not in sizes:
        axis = "second" if read else "first"
        rows = " or ".join(str(size) for size in sorted(sizes))
        raise ValueError(
            f"{owner} gave shape {shape}{read}, whose {axis} axis ({value.shape[0]}) is not "
            f"the batch's: the batch's tensors have {rows} rows first. Give select= a "
            "function that puts the batch axis first, such as select=lambda out: "
            "out.transpose(0, 1) for a sequence-first [tokens, batch, dim] output, or pool the "
            "output to [batch, dim]"
        )
    return value
