"""Which rows a module's output gives, and which of them are data: one rule for every callback.

:class:`~learnscope.lightning_glue.EmbeddingProjector` and
:class:`~learnscope.lightning_glue.TrainingHelper` both turn the output of an encoder into
embedding rows with :func:`embedding_layout`, and leave out the rows that are not data with
:func:`row_mask`, so the Projector shows the vectors the collapse metrics are computed on.

The shape of the output says what a row is:

* ``[B, D]``: one row per sample (or per node, for the node embeddings of a graph batch).
* ``[B, T, D]``: one row per token, ``T`` rows per sample, numbered by a ``position`` column.
  Which 3-D outputs are tokens is said once, at the sanity check (the first capture), at info
  level (:func:`tokens_note`): the axes assumed, the rows per sample, and how to change them.
* ``[B, C, L]`` from a module known to be channel-first (``nn.Conv1d``, 1-d pooling and
  padding, ``nn.BatchNorm1d``, ``nn.GroupNorm``..., or an ``nn.Sequential`` whose last layer,
  element-wise ones skipped, is one: :func:`learnscope.embeddings.batch_axis.channels_first_layer`;
  known only for the output as the module gave it, without ``select``): a 1-d feature map, read as
  those of 4 or more dimensions below, its ``L`` positions along the length (``"pixels"``: one
  row per position, ``position`` is the position along ``L``). Any other 3-D output is tokens;
  a ``[B, C, L]`` output that ``select`` picked is put in ``[B, L, C]`` order by ``select``
  (``lambda out: out[0].transpose(1, 2)``, one row per position) or pooled by it
  (``lambda out: out[0].mean(-1)``).
* ``[B, C, *spatial]`` (4 or more dimensions): PyTorch's feature-map layout, channels second,
  whatever the memory format (``channels_last`` changes the strides, not the shape). A layout
  with channels last, ``[B, H, W, C]``, must be permuted by ``select``
  (``lambda out: out.permute(0, 3, 1, 2)``). With every spatial size 1 (after
  ``AdaptiveAvgPool2d(1)``) it gives one ``C``-dimensional row per sample. With larger spatial
  sizes ``spatial`` must say what a row is: ``"mean"`` or ``"max"`` over the positions (one row
  per sample), or ``"pixels"`` (one row per position, in row-major order: ``position`` is
  ``h * W + w``); without it a ``ValueError`` names the shape and the options.

Which axis is the batch's, for an output of 3 or more dimensions, is settled first by
:mod:`learnscope.embeddings.batch_axis` (PyTorch's ``batch_first=False`` sequence modules give
``[T, B, D]``). :func:`output_layout` applies both rules to a module's output: both callbacks
read their rows with it.

A mask (``mask_fn``) keeps the rows whose value is true (or a nonzero integer): one value per
row, shaped as the output without its feature dimension (``[B]`` for ``[B, D]``, ``[B, T]`` for
``[B, T, D]``, ``[B, H, W]`` for pixels; a flat ``[R]`` over the ``R`` rows is accepted too).
A mask the batch holds under a name that ends in ``padding_mask`` is PyTorch's key padding mask
(``src_key_padding_mask``, ``key_padding_mask``: true = padding), read the other way: its
true rows are left out. A function gives true for the rows to keep (for a padding mask, its
negation: ``lambda batch: ~batch["pad"]``). The default, ``"attention_mask"``, reads Hugging
Face's mask (1 = real token) when the batch has one, else PyTorch's ``src_key_padding_mask``,
``key_padding_mask`` or ``padding_mask`` (true = padding), when the output gives one row per
token; otherwise every row is kept.

Example:
    >>> layout = embedding_layout(torch.zeros(2, 512, 1, 1))
    >>> tuple(layout.rows.shape), layout.grid
    ((2, 512), (2,))
    >>> tuple(embedding_layout(torch.zeros(2, 8, 4, 4), "pixels").rows.shape)
    (2, 16, 8)
    >>> conv = torch.nn.Conv1d(3, 8, 5)
    >>> layout = output_layout(conv(torch.zeros(2, 3, 20)), None, "pixels", "Demo", conv)
    >>> tuple(layout.rows.shape), layout.axes
    ((2, 16, 8), '[batch, channels, length]')
    >>> batch = {"attention_mask": torch.tensor([[1, 1, 0], [1, 0, 0]])}
    >>> row_mask("attention_mask", batch, embedding_layout(torch.zeros(2, 3, 4))).tolist()
    [True, True, False, True, False, False]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch

from learnscope.embeddings.batch_axis import batch_first, channels_first_kind
from learnscope.import_path import resolve_function
from learnscope.user_functions import calling

SPATIAL_MODES = ("mean", "max", "pixels")
TOKENS = "[batch, tokens, dim]"
CHANNELS_LENGTH = "[batch, channels, length]"
FEATURE_MAP = "[batch, channels, *spatial]"
DEFAULT_MASK = "attention_mask"  # Hugging Face's padding mask, 1 = real token
# What the default looks for in the batch, in order: Hugging Face's mask, then PyTorch's.
DEFAULT_MASKS = (DEFAULT_MASK, "src_key_padding_mask", "key_padding_mask", "padding_mask")
PADDING_SUFFIX = "padding_mask"  # PyTorch's key padding masks: true marks padding


class EmbeddingLayout(NamedTuple):
    """A module's output as embedding rows, and how its rows are laid out.

    Attributes:
        rows: ``[B, D]`` (one row per sample) or ``[B, T, D]`` (``T`` rows per sample, such as
            tokens or pixels); what the callbacks read their rows from.
        grid: The shape of one value per row, as the output lays them out: ``(B,)``,
            ``(B, T)``, or ``(B, H, W)`` for the pixels of a ``[B, C, H, W]`` feature map.
        shape: The shape of the output itself, for messages.
        axes: How the output's axes were read, for messages: ``"[batch, dim]"``,
            ``"[batch, tokens, dim]"``, ``"[batch, channels, length]"`` or
            ``"[batch, channels, *spatial]"``.
    """

    rows: torch.Tensor
    grid: tuple[int, ...]
    shape: tuple[int, ...]
    axes: str = "[batch, dim]"

    @property
    def tokens(self) -> bool:
        """Whether a 3-D output was read as ``[batch, tokens, dim]``."""
        return self.axes == TOKENS

    @property
    def per_token(self) -> bool:
        """Whether each sample gives several rows (tokens, pixels): ``rows`` is 3-D."""
        return self.rows.ndim == 3

    @property
    def num_rows(self) -> int:
        """The number of rows."""
        return math.prod(self.rows.shape[:-1])


def check_spatial(spatial: Any) -> str | None:
    """``spatial`` itself, when it is ``None`` or one of :data:`SPATIAL_MODES`.

    Raises:
        ValueError: Any other value, with the options.

    Example:
        >>> check_spatial("pixels")
        'pixels'
    """
    if spatial is not None and spatial not in SPATIAL_MODES:
        raise ValueError(f"spatial must be None, 'mean', 'max' or 'pixels', got {spatial!r}")
    return spatial


def check_mask_fn(mask_fn: Any) -> str | Callable[..., Any] | None:
    """``mask_fn`` itself, when it is ``None``, a function or a non-empty string.

    A string with a dot is the import path of a function (see :mod:`learnscope.import_path`),
    which is imported; a string without one is the key or attribute of the batch.

    Raises:
        ValueError: Any other value.

    Example:
        >>> check_mask_fn("attention_mask")
        'attention_mask'
    """
    mask_fn = resolve_function(mask_fn, "mask_fn")
    if mask_fn is None or callable(mask_fn) or (isinstance(mask_fn, str) and mask_fn):
        return mask_fn
    raise ValueError(
        "mask_fn must be a function, a key of the batch (such as 'attention_mask') or None, "
        f"got {mask_fn!r}"
    )


def embedding_layout(
    value: torch.Tensor,
    spatial: str | None = None,
    owner: str = "the embedding",
    channels_first: str | None = None,
) -> EmbeddingLayout:
    """The rows of a module's output, by the rule of this module's docstring.

    Args:
        value: The embedding tensor, at least 2-D, its batch axis first.
        spatial: ``"mean"``, ``"max"`` or ``"pixels"`` for feature maps ``[B, C, *spatial]``
            whose spatial sizes are not all 1; ``None`` otherwise.
        owner: Who reads the output, for messages (``"EmbeddingProjector: module 'x'"``).
        channels_first: For a 3-D ``value``, why it is ``[batch, channels, length]`` (the
            module that says so, in words, such as ``"Conv1d"``); ``None``: it is read as
            ``[batch, tokens, dim]``.

    Returns:
        The rows (``[B, D]`` or ``[B, T, D]``), the shape of one value per row, the shape of
        ``value`` and how its axes were read.

    Raises:
        ValueError: ``value`` has fewer than 2 dimensions; a feature map (or a channel-first
            3-D output) has spatial sizes above 1 and ``spatial`` is not set; ``spatial`` is
            set for an output of 2 dimensions or one read as tokens; ``spatial`` is not one of
            the options.

    Example:
        >>> maps = torch.arange(16.0).reshape(1, 1, 4, 4)
        >>> embedding_layout(maps, "max").rows.tolist()
        [[15.0]]
        >>> embedding_layout(maps, "pixels").grid
        (1, 4, 4)
        >>> embedding_layout(torch.zeros(2, 8, 5), "pixels", channels_first="Conv1d").grid
        (2, 5)
    """
    check_spatial(spatial)
    shape = tuple(value.shape)
    if value.ndim < 2:
        raise ValueError(
            f"{owner} gave shape {shape}; it needs [batch, dim], [batch, tokens, dim] or a "
            "feature map [batch, channels, *spatial]"
        )
    maps = value.ndim > 3 or (value.ndim == 3 and channels_first is not None)
    if not maps:
        if spatial is not None:
            raise ValueError(_spatial_refused(owner, shape, spatial))
        axes = "[batch, dim]" if value.ndim == 2 else TOKENS
        return EmbeddingLayout(value, shape[:-1], shape, axes)
    axes = FEATURE_MAP if value.ndim > 3 else CHANNELS_LENGTH
    batch, channels, sizes = shape[0], shape[1], shape[2:]
    dims = tuple(range(2, value.ndim))
    if spatial is None:
        if math.prod(sizes) == 1:
            return EmbeddingLayout(value.reshape(batch, channels), (batch,), shape, axes)
        raise ValueError(_spatial_needed(owner, shape, channels_first))
    if spatial == "mean":
        return EmbeddingLayout(value.mean(dim=dims), (batch,), shape, axes)
    if spatial == "max":
        return EmbeddingLayout(value.amax(dim=dims), (batch,), shape, axes)
    pixels = value.flatten(2).transpose(1, 2)  # [B, positions, C], positions row-major
    return EmbeddingLayout(pixels, (batch, *sizes), shape, axes)


def output_layout(
    value: torch.Tensor,
    batch: Any,
    spatial: str | None,
    owner: str,
    module: torch.nn.Module | None = None,
) -> EmbeddingLayout:
    """The rows of a module's output: its batch axis put first, then read by the shared rule.

    What both callbacks read an output with: :func:`learnscope.embeddings.batch_axis.batch_first`,
    then :func:`embedding_layout`, a 3-D output being ``[batch, channels, length]`` when ``module``
    is known to give that (:func:`learnscope.embeddings.batch_axis.channels_first_layer`).

    Args:
        value: The embedding tensor of one batch (detached here).
        batch: The batch it was computed from.
        spatial: As for :func:`embedding_layout`.
        owner: Who reads it, for messages (``"EmbeddingProjector: module 'encoder'"``).
        module: The module that gave ``value`` as it is; ``None`` when ``select`` picked it
            (then its layout is not known: a 3-D tensor is read as tokens).

    Raises:
        ValueError: As :func:`~learnscope.embeddings.batch_axis.batch_first` and
            :func:`embedding_layout`.

    Example:
        >>> pool = torch.nn.AdaptiveAvgPool1d(4)
        >>> output_layout(pool(torch.zeros(2, 8, 16)), None, None, "Demo", pool)
        Traceback (most recent call last):
        ...
        ValueError: Demo gave shape (2, 8, 4), read as [batch, channels, length] \
(AdaptiveAvgPool1d's layout): its 4 positions need a rule: spatial='mean' (one 8-dim row per \
sample, averaged over the positions), 'max' (the maximum over them) or 'pixels' (one row per \
position along the length, with a position column)
    """
    value = batch_first(value.detach(), batch, owner, module)
    channels_first = channels_first_kind(module) if value.ndim == 3 else None
    return embedding_layout(value, spatial, owner, channels_first)


def tokens_note(layout: EmbeddingLayout, owner: str) -> str | None:
    """What a 3-D output read as tokens was taken to be, and how to change it; ``None`` otherwise.

    Said once per fit, at the sanity check (the first capture), so that an output whose axes
    are not ``[batch, tokens, dim]`` (a channel-first block of your own) is not read silently.

    Example:
        >>> print(tokens_note(embedding_layout(torch.zeros(4, 6, 16)), "Demo"))
        learnscope: Demo gave shape (4, 6, 16), read as [batch, tokens, dim]: 6 rows per sample, \
one per token (24 in this batch), with a position column. If its axes are [batch, channels, \
length], pass select=lambda out: out.transpose(1, 2) (a row per position) or select=lambda \
out: out.mean(-1) (a row per sample), or snapshot the Conv1d, pooling or normalisation layer \
itself with spatial=; mask_fn= leaves out padding rows
    """
    if not layout.tokens:
        return None
    batch, tokens, _ = layout.shape
    return (
        f"learnscope: {owner} gave shape {layout.shape}, read as {TOKENS}: {tokens} rows per "
        f"sample, one per token ({batch * tokens} in this batch), with a position column. If "
        f"its axes are {CHANNELS_LENGTH}, pass select=lambda out: out.transpose(1, 2) (a row "
        "per position) or select=lambda out: out.mean(-1) (a row per sample), or snapshot the "
        "Conv1d, pooling or normalisation layer itself with spatial=; mask_fn= leaves out "
        "padding rows"
    )


def _spatial_needed(owner: str, shape: tuple[int, ...], channels_first: str | None) -> str:
    """The error for a feature map (or a channel-first 3-D output) without ``spatial``."""
    channels, positions = shape[1], math.prod(shape[2:])
    if channels_first is not None:
        read = f"read as {CHANNELS_LENGTH} ({channels_first}'s layout)"
        along = " along the length"
    else:
        read = (
            f"read as {FEATURE_MAP} (PyTorch's layout; permute a [batch, H, W, channels] output "
            "with select=, such as select=lambda out: out.permute(0, 3, 1, 2))"
        )
        along = ""
    return (
        f"{owner} gave shape {shape}, {read}: its {positions} positions need a rule: "
        f"spatial='mean' (one {channels}-dim row per sample, averaged over the positions), "
        f"'max' (the maximum over them) or 'pixels' (one row per position{along}, with a "
        "position column)"
    )


def _spatial_refused(owner: str, shape: tuple[int, ...], spatial: str) -> str:
    """The error for ``spatial`` set on an output of 2 dimensions or one read as tokens."""
    if len(shape) == 2:
        return (
            f"{owner}: spatial={spatial!r} applies to feature maps, but the output has shape "
            f"{shape}, read as [batch, dim]; leave spatial unset"
        )
    return (
        f"{owner}: spatial={spatial!r} applies to feature maps [batch, channels, *spatial] of 4 "
        f"or more dimensions and to the {CHANNELS_LENGTH} output of a channel-first module "
        "(Conv1d, 1-d pooling, BatchNorm1d...) snapshotted without select=, but the output has "
        f"shape {shape}, read as {TOKENS} (one row per token); leave spatial unset, or reshape "
        "the output with select= (such as select=lambda out: out.transpose(1, 2) for one row "
        "per position of a [batch, channels, length] output)"
    )


def row_mask(
    mask_fn: str | Callable[..., Any] | None,
    batch: Any,
    layout: EmbeddingLayout,
    owner: str = "mask_fn",
) -> torch.Tensor | None:
    """Which rows of ``layout`` to keep: a bool tensor ``[R]`` on the rows' device, or ``None``.

    Args:
        mask_fn: ``batch -> mask`` (true keeps the row); or the key (for a mapping) or
            attribute of the batch that holds the mask (true keeps the row, unless the name
            ends in ``padding_mask``: then true marks padding); or ``None`` (every row is
            kept). The default name, :data:`DEFAULT_MASK`, is used only when the output gives
            several rows per sample, and looks for the names of :data:`DEFAULT_MASKS` in turn;
            another name must be in the batch.
        batch: The batch the output was computed from.
        layout: The rows, from :func:`embedding_layout`.
        owner: Who asks, for messages.

    Returns:
        ``None`` when every row is kept (no mask), else one bool per row, in row order.

    Raises:
        ValueError: A named mask that the batch lacks, or a mask that is not a bool or
            integer tensor of shape ``layout.grid`` (or ``[R]``, or the rows' own shape);
            the message names both shapes.

    Example:
        >>> layout = embedding_layout(torch.zeros(2, 4))
        >>> row_mask(lambda batch: batch > 0, torch.tensor([1, 0]), layout).tolist()
        [True, False]
        >>> row_mask("attention_mask", {}, layout) is None
        True
        >>> tokens = embedding_layout(torch.zeros(1, 3, 4))
        >>> padding = {"src_key_padding_mask": torch.tensor([[False, False, True]])}
        >>> row_mask("attention_mask", padding, tokens).tolist()
        [True, True, False]
    """
    if mask_fn is None:
        return None
    if callable(mask_fn):
        with calling("mask_fn", owner.split(":")[0], batch):
            mask = mask_fn(batch)
        return _check_mask(mask, layout, f"{owner}: mask_fn")
    name = mask_fn
    if mask_fn == DEFAULT_MASK:
        found = next((n for n in DEFAULT_MASKS if _named(batch, n) is not None), None)
        if found is None or not layout.per_token:
            return None
        name = found
    mask = _named(batch, name)
    if mask is None:
        raise ValueError(
            f"{owner}: mask_fn={mask_fn!r}, but the batch has no {mask_fn!r} "
            f"({_describe_batch(batch)}); pass the key that holds the mask, a function "
            "batch -> mask, or mask_fn=None to keep every row"
        )
    source = f"mask_fn={mask_fn!r}" if name == mask_fn else f"the batch's {name!r}"
    keep = _check_mask(mask, layout, f"{owner}: {source}")
    return ~keep if name.endswith(PADDING_SUFFIX) else keep


def keep_edges(edge_index: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """The edges between kept rows, renumbered to count the kept rows only.

    Args:
        edge_index: ``[2, E]`` integer row indices (source first).
        keep: Bool ``[R]``, the rows kept.

    Returns:
        ``[2, E']``: the edges whose two ends are kept, in their order, each end's index being
        its number among the kept rows.

    Example:
        >>> edges = torch.tensor([[0, 1, 2], [1, 2, 3]])
        >>> keep_edges(edges, torch.tensor([True, False, True, True])).tolist()
        [[1], [2]]
    """
    edges = edge_index.to(keep.device, torch.long)
    number = keep.to(torch.long).cumsum(0) - 1
    both = keep[edges[0]] & keep[edges[1]]
    return number[edges[:, both]]


def _named(batch: Any, name: str) -> Any:
    """``batch[name]`` for a mapping, else ``batch.name``; ``None`` when it has neither."""
    if isinstance(batch, Mapping):
        return batch.get(name)
    return getattr(batch, name, None)


def _describe_batch(batch: Any) -> str:
    if isinstance(batch, Mapping):
        return f"a {type(batch).__name__} with keys {', '.join(sorted(map(str, batch)))}"
    return f"a {type(batch).__name__}"


def _check_mask(mask: Any, layout: EmbeddingLayout, who: str) -> torch.Tensor:
    """``mask`` as bool ``[R]``, checked against the rows of ``layout``."""
    expected = f"{list(layout.grid)}, one value per row (or [{layout.num_rows}])"
    if not isinstance(mask, torch.Tensor):
        raise ValueError(
            f"{who} gave a {type(mask).__name__}; it must give a bool tensor of shape {expected}"
        )
    if mask.is_floating_point() or mask.is_complex():
        raise ValueError(
            f"{who} gave a mask of dtype {mask.dtype}; it must be bool (or integer, nonzero "
            "keeps the row), since a float mask may be additive (0 keeps the row)"
        )
    shapes = {layout.grid, tuple(layout.rows.shape[:-1]), (layout.num_rows,)}
    if tuple(mask.shape) not in shapes:
        raise ValueError(
            f"{who} gave a mask of shape {tuple(mask.shape)} but the embedding of shape "
            f"{layout.shape} has rows {list(layout.grid)}: give one value per row, shape "
            f"{expected}"
        )
    return mask.detach().reshape(-1).to(layout.rows.device) != 0
