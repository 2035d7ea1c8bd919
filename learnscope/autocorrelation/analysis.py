"""Autocorrelation of sampled parameters and gradients over training steps.

Pure functions on a history tensor ``[T, K]``: row ``t`` holds the values of ``K`` sampled
elements at step ``t`` (see
:class:`learnscope.autocorrelation.sampled_history.SampledParameterHistory`), so each column is one
element's series over ``T`` steps.

* :func:`autocorrelation`: the normalised autocorrelation function (ACF) of every column.
* :func:`integrated_time`: the integrated autocorrelation time tau with Sokal's window.
* :func:`is_reliable`: whether a history is long enough for tau to mean something.
* :func:`summarize`: per module group, the mean ACF, the quartiles of the lag-1
  autocorrelation and tau, as an :class:`~learnscope.records.AutocorrelationSummary`.
* :func:`summarize_several`: the same for several sets of histories at once (one per
  optimizer), in one summary.
* :func:`prepare_summary`: the part of :func:`summarize_several` that must run where the
  histories are kept (the checks, and the reduction over the ranks); the
  :class:`PendingSummary` it gives runs the rest, on any thread.

Everything runs on the history's device and never synchronises with the host, except
:func:`summarize`, :func:`summarize_several` and :meth:`PendingSummary.finish`, which move their
finished summary to the host in one transfer.

With sharded parameters (FSDP) each rank records the sampled elements it holds; given
``sharded=`` (a :class:`ShardedLayout`, such as
:attr:`~learnscope.autocorrelation.sampled_history.SampledParameterHistory.sharded_columns`),
:func:`summarize` sums each group's power spectra and non-finite counts over the ranks and places
every element's lag-1 autocorrelation at its column of the whole history (one reduction per kind and
history: ``G * (L + 1) + K`` numbers, never the histories), so every rank gets the summary an
unsharded model sampling the same elements would give. The reduction is the layout's own ``reduce``
(a history's is :func:`learnscope.model.ranks.sum_over_ranks`, an all-reduce): this module holds no
state and runs no collective of its own.

Example:
    >>> import torch
    >>> history = torch.randn(200, 3, generator=torch.Generator().manual_seed(0)).cumsum(0)
    >>> acf = autocorrelation(history, max_lag=10)
    >>> acf.shape, bool((acf[0] == 1).all()), bool((acf[1] > 0.8).all())
    (torch.Size([11, 3]), True, True)
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal, NamedTuple, Protocol, TypeAlias, TypedDict, Unpack

import torch
from torch import Tensor

from learnscope.records.autocorrelation import AutocorrelationSummary, GroupAutocorrelation

__all__ = [
    "DEFAULT_LAGS",
    "AnalysisOptions",
    "Detrend",
    "PendingSummary",
    "ShardedLayout",
    "autocorrelation",
    "integrated_time",
    "is_reliable",
    "prepare_summary",
    "summarize",
    "summarize_several",
]

Detrend = Literal["mean", "linear"]
# One set of histories with its columns' groups: (kind -> [T, K] history, [K] group index,
# group names), as :func:`summarize` takes them.
HistorySource: TypeAlias = tuple[Mapping[str, Tensor], Tensor, Sequence[str]]
DEFAULT_LAGS: tuple[int, ...] = (1, 2, 5, 10)


class ShardedLayout(Protocol):
    """Where one rank's columns sit in the whole history, and how to add up the ranks.

    :class:`learnscope.autocorrelation.sampled_columns.ShardedColumns` is one (a history's
    :attr:`~learnscope.autocorrelation.sampled_history.SampledParameterHistory.sharded_columns`);
    its ``reduce`` is :func:`learnscope.model.ranks.sum_over_ranks`. Any object with these members
    will do, such as one that adds up simulated ranks in a test.

    Example:
        >>> import torch
        >>> from types import SimpleNamespace
        >>> history = torch.randn(50, 4, generator=torch.Generator().manual_seed(0))
        >>> groups = torch.tensor([0, 0, 1, 1])
        >>> alone = SimpleNamespace(  # one rank holding every column: nothing to add
        ...     positions=torch.arange(4), group_index=groups, total_elements=4,
        ...     reduce=lambda tensor: tensor,
        ... )
        >>> whole = summarize({"params": history}, groups, ["a", "b"], step=49, lags=(1,))
        >>> mine = summarize(
        ...     {"params": history}, groups, ["a", "b"], step=49, lags=(1,), sharded=alone
        ... )
        >>> [g.rho1_median for g in mine.groups] == [g.rho1_median for g in whole.groups]
        True
    """

    @property
    def positions(self) -> Tensor:
        """``[K]`` long tensor: the whole-history column of each of this rank's columns."""
        ...

    @property
    def group_index(self) -> Tensor:
        """``[K_total]`` long tensor: the group of every column of the whole history."""
        ...

    @property
    def total_elements(self) -> int:
        """``K_total``: the columns of the whole history, over all ranks."""
        ...

    def reduce(self, tensor: Tensor) -> Tensor:
        """The elementwise sum of ``tensor`` over the ranks (every rank calls it alike)."""
        ...


class AnalysisOptions(TypedDict, total=False):
    """How histories are analysed: the keywords of :func:`summarize_several` (and defaults)."""

    lags: Sequence[int]
    detrend: Detrend
    c: float
    factor: float


_DETREND_METHODS: tuple[str, ...] = ("mean", "linear")
# A column counts as constant when the RMS of its centred values is below this many float
# epsilons times its magnitude: centring a constant leaves about one epsilon of rounding
# residue, whose "autocorrelation" would be a spurious trend.
_CONSTANT_TOLERANCE_EPS = 16.0
# On the CPU, columns are processed in chunks of about this many values (2 MiB of
# float32), so the FFT's temporaries stay in cache and are reused by the allocator: this
# measured about twice as fast as one big batch. On a GPU one batch is fastest.
_CPU_CHUNK_VALUES = 1 << 19
_QUARTILES: tuple[float, float, float] = (0.25, 0.5, 0.75)


def autocorrelation(
    history: Tensor, max_lag: int | None = None, detrend: Detrend = "mean"
) -> Tensor:
    """Normalised autocorrelation function of every column of a history.

    Each column is centred (``detrend="mean"``) or has its least-squares straight line
    removed (``detrend="linear"``; use it for parameters that drift steadily, which
    otherwise show an autocorrelation near one at every lag). The biased autocovariance
    ``c_k = sum_t x_t x_{t+k} / T`` comes from an FFT zero-padded to at least ``T + max_lag``
    points, so lags never wrap around, and ``rho_k = c_k / c_0``. Columns are independent
    of each other.

    Args:
        history: ``[T, K]``, one column per series (a 1-D ``[T]`` tensor is one column).
            Any real dtype; computed in float64 for float64 input, else in float32, on the
            input's device.
        max_lag: The largest lag to return, from 0 to ``T - 1``. Default ``T - 1``.
        detrend: ``"mean"`` or ``"linear"``.

    Each column is scaled by its largest absolute value before the FFT (the ACF does not
    depend on scale), so any finite input gives a finite ACF, from ``1e-30`` to ``1e30``.

    Returns:
        ``[max_lag + 1, K]`` (``[max_lag + 1]`` for 1-D input). Row 0 is all ones, except
        that a constant column (a frozen or unused element, or one whose variation is
        within rounding of its magnitude) and a column holding NaN or Inf at any step are
        NaN at every lag; other columns are not affected by them.

    Raises:
        ValueError: On a history that is not 1-D or 2-D, has fewer than two steps or no
            column, or is complex, on a ``max_lag`` outside ``0..T-1``, or on an unknown
            ``detrend``.

    Example:
        >>> import torch
        >>> history = torch.tensor([[1.0, 5.0], [-1.0, 5.0], [1.0, 5.0], [-1.0, 5.0]])
        >>> autocorrelation(history, max_lag=2)
        tensor([[ 1.0000,     nan],
                [-0.7500,     nan],
                [ 0.5000,     nan]])
    """
    columns = _as_columns(history)
    num_steps, num_columns = columns.shape
    max_lag = _check_max_lag(max_lag, num_steps)
    _check_detrend(detrend)
    fft_length = _fast_fft_length(num_steps + max_lag)
    acf = columns.new_empty(max_lag + 1, num_columns)
    padded = _padded_rows(columns, fft_length)
    for chunk in _column_chunks(columns):
        power, floor, _ = _power_spectra(columns[:, chunk], detrend, padded)
        products = torch.fft.irfft(power, n=fft_length, dim=1)[:, : max_lag + 1].T
        energy = products[0]
        acf[:, chunk] = torch.where(energy <= floor, torch.nan, products / energy)
    return acf if history.ndim == 2 else acf.squeeze(1)


def integrated_time(acf: Tensor, c: float = 5.0) -> Tensor:
    """Integrated autocorrelation time of each column of an ACF, with Sokal's window.

    ``tau(M) = 1 + 2 * sum_{k=1..M} rho_k``, taken at the smallest window ``M`` with
    ``M >= c * tau(M)``. When no lag of ``acf`` reaches that, the last lag is used and the
    value is an underestimate; :func:`is_reliable` tells those apart. This is the estimate
    of ``emcee.autocorr.integrated_time``, vectorised over columns.

    Args:
        acf: ``[L]`` or ``[L, K]`` normalised ACF at lags ``0..L-1``, e.g. from
            :func:`autocorrelation`.
        c: Sokal's window factor (5 is the usual choice).

    Returns:
        tau as a 0-d tensor for ``[L]`` input, else ``[K]``; NaN where the column is NaN.

    Raises:
        ValueError: On an ``acf`` that is not 1-D or 2-D or has no lags, or ``c <= 0``.

    Example:
        >>> import torch
        >>> rho = 0.5 ** torch.arange(40.0)  # AR(1) with coefficient 0.5: tau = 3
        >>> round(integrated_time(rho).item(), 3)
        3.0
    """
    if acf.ndim not in (1, 2) or acf.shape[0] == 0:
        raise ValueError(f"acf must be [L] or [L, K] with L >= 1, got shape {tuple(acf.shape)}")
    if not c > 0:
        raise ValueError(f"c must be positive, got {c}")
    rho = _as_float(acf if acf.ndim == 2 else acf.unsqueeze(1))
    taus = 1.0 + 2.0 * (rho.cumsum(0) - rho[:1])
    lags = torch.arange(rho.shape[0], dtype=rho.dtype, device=rho.device).unsqueeze(1)
    reached = _window_reached(lags, taus, c)
    first = reached.to(torch.uint8).argmax(0)
    window = torch.where(reached.any(0), first, rho.shape[0] - 1)
    tau = taus.gather(0, window.unsqueeze(0)).squeeze(0)
    return tau if acf.ndim == 2 else tau.squeeze(0)


def is_reliable(
    tau: Tensor,
    num_steps: int,
    factor: float = 50.0,
    *,
    max_lag: int | None = None,
    c: float = 5.0,
) -> Tensor:
    """Whether tau can be trusted: finite, positive, and the history long enough.

    The usual rule (emcee's ``tol``): ``num_steps >= factor * tau``. Also, Sokal's window
    must have been found among the lags of the ACF tau came from, which is exactly
    ``c * tau <= max_lag``; with the full ACF (``max_lag = num_steps - 1``, the default)
    the length rule already implies it, so pass ``max_lag`` (and ``c``) only for an ACF
    truncated to fewer lags.

    Args:
        tau: tau values, any shape, e.g. from :func:`integrated_time`.
        num_steps: T, the length of the history the ACF was computed from.
        factor: How many autocorrelation times the history must span.
        max_lag: The largest lag of the ACF tau came from. Default ``num_steps - 1``.
        c: The window factor tau was computed with.

    Returns:
        A bool tensor shaped like ``tau``.

    Example:
        >>> import torch
        >>> is_reliable(torch.tensor([3.0, 30.0, float("nan")]), num_steps=1000)
        tensor([ True, False, False])
    """
    max_lag = num_steps - 1 if max_lag is None else max_lag
    enough_steps = factor * tau <= num_steps
    return torch.isfinite(tau) & (tau > 0) & enough_steps & _window_reached(max_lag, tau, c)


def summarize(
    histories: Mapping[str, Tensor],
    group_index: Tensor,
    group_names: Sequence[str],
    *,
    step: int,
    sharded: ShardedLayout | None = None,
    **options: Unpack[AnalysisOptions],
) -> AutocorrelationSummary:
    """Summarise the autocorrelation of histories per module group.

    For each kind (e.g. ``"params"``, ``"grads"``) and each group (a set of columns):

    * the mean ACF over the group's columns at lags ``0..max(lags)``, constant columns
      left out (emcee averages ACFs over walkers the same way);
    * the number of the group's columns left out because they hold NaN or Inf at some step
      (``non_finite_elements``); the other columns are summarised as usual;
    * the median and 25%/75% quantiles of the columns' lag-1 autocorrelation;
    * tau of the group's mean ACF (:func:`integrated_time`), or ``None`` when the history
      is shorter than ``factor * tau``, no window was found, or the group's mean lag-1
      autocorrelation is negative (anti-correlated series, typical of gradients, where tau
      means nothing).

    Everything is computed on the histories' device in a few batched operations, and the
    finished numbers come to the host in a single transfer. tau only needs lags up to
    ``c * T / factor`` (a longer window is unreliable anyway), so no more are computed.

    Args:
        histories: Kind to history ``[T, K]`` (``T`` may differ between kinds; ``K`` and
            the column order must match ``group_index``).
        group_index: ``[K]`` integer group of each column, in ``0..len(group_names) - 1``
            (not checked on the device; an index out of range is an indexing error).
        group_names: The name of each group.
        step: The training step the histories end at.
        sharded: For a history of sharded parameters, where its columns sit in the whole
            history and how to sum over the ranks (a :class:`ShardedLayout`, such as
            :attr:`~learnscope.autocorrelation.sampled_history.SampledParameterHistory.sharded_columns`):
            the figures are then summed over the ranks by its ``reduce`` (for a history's, every
            rank of the default process group, which must all call this with the same kinds,
            steps and groups; a rank may hold no column). ``group_index`` is then this rank's.
        **options: ``lags``, ``detrend``, ``c`` and ``factor``, as for
            :func:`summarize_several` (:class:`AnalysisOptions`).

    Returns:
        The summary, with one :class:`GroupAutocorrelation` per kind and group, in the
        order of ``histories`` then ``group_names``.

    Raises:
        ValueError: On empty ``histories`` or ``lags``, a history with no column
            (``K = 0``) or fewer than two steps, a lag outside ``0..T-1``, a
            ``group_index`` whose length is not ``K``, a non-positive ``c`` or ``factor``,
            or a bad history or ``detrend``.

    Example:
        >>> import torch
        >>> history = torch.randn(100, 6, generator=torch.Generator().manual_seed(0))
        >>> summary = summarize(
        ...     {"grads": history}, torch.tensor([0, 0, 0, 1, 1, 1]), ["encoder", "head"],
        ...     step=100, lags=(1, 2),
        ... )
        >>> [(g.group, g.mean_acf.shape, abs(g.rho1_median) < 0.3) for g in summary.groups]
        [('encoder', (3,), True), ('head', (3,), True)]
    """
    if not histories:
        raise ValueError("histories is empty: pass at least one kind, e.g. {'params': ...}")
    return summarize_several(
        [(histories, group_index, group_names)], step=step, sharded=[sharded], **options
    )


def summarize_several(
    sources: Sequence[HistorySource],
    *,
    step: int,
    lags: Sequence[int] = DEFAULT_LAGS,
    detrend: Detrend = "mean",
    c: float = 5.0,
    factor: float = 50.0,
    sharded: Sequence[ShardedLayout | None] | None = None,
) -> AutocorrelationSummary:
    """Summarise several sets of histories, such as one per optimizer, in one summary.

    Each source is what :func:`summarize` takes: ``(histories, group_index, group_names)``.
    Its histories may have their own length and number of columns. The groups are those of
    :func:`summarize` for each source, in the order of the kinds (as first met), then of the
    sources, then of their ``group_names``; the numbers of all of them come to the host in a
    single transfer. It is :func:`prepare_summary` and :meth:`PendingSummary.finish` in one
    call.

    Args:
        sources: ``(histories, group_index, group_names)`` per set; group names must not
            repeat between sources that share a kind.
        step: The training step the histories end at.
        lags: The lags to chart, each from 0 to ``T - 1`` of every history.
        detrend: ``"mean"`` or ``"linear"``, see :func:`autocorrelation`.
        c: Sokal's window factor.
        factor: How many autocorrelation times a history must span for tau to be reported.
        sharded: Per source, its sharded columns or None (see :func:`summarize`).

    Returns:
        The summary of every source.

    Raises:
        ValueError: As :func:`summarize`, on no source, on a source without histories, or on
            a group name that two sources share for one kind.

    Example:
        >>> import torch
        >>> noise = torch.randn(100, 4, generator=torch.Generator().manual_seed(0))
        >>> generator = ({"params": noise[:, :2]}, torch.tensor([0, 0]), ["generator"])
        >>> critic = ({"params": noise[:60, 2:]}, torch.tensor([0, 0]), ["critic"])
        >>> summary = summarize_several([generator, critic], step=99, lags=(1,))
        >>> [(g.kind, g.group) for g in summary.groups]
        [('params', 'generator'), ('params', 'critic')]
    """
    pending = prepare_summary(
        sources, step=step, lags=lags, detrend=detrend, c=c, factor=factor, sharded=sharded
    )
    return pending.finish()


def prepare_summary(
    sources: Sequence[HistorySource],
    *,
    step: int,
    lags: Sequence[int] = DEFAULT_LAGS,
    detrend: Detrend = "mean",
    c: float = 5.0,
    factor: float = 50.0,
    sharded: Sequence[ShardedLayout | None] | None = None,
) -> PendingSummary:
    """What :func:`summarize_several` does before its arithmetic may run on another thread.

    Checks the arguments (raising as :func:`summarize_several`) and, for a source with
    ``sharded`` columns, runs the part of the arithmetic that the reduction over the ranks
    needs and that reduction (each group's power spectra, non-finite counts and lag-1 values,
    one call of its ``reduce`` per kind and source, in the order of :func:`summarize_several`),
    so every rank calls it alike and the collectives stay on the calling thread. Everything
    else (a source's power spectra without ``sharded``, the mean ACF, tau, the quartiles and
    the one transfer to the host) is left to :meth:`PendingSummary.finish`, whose summary is
    the one :func:`summarize_several` gives. Nothing here synchronises with the host.

    The histories are read when the summary is finished: hand over tensors that nothing
    changes until then
    (:meth:`~learnscope.autocorrelation.sampled_history.SampledParameterHistory.history` gives a new
    one).

    Args:
        sources: As for :func:`summarize_several`.
        step: The training step the histories end at.
        lags: The lags to chart.
        detrend: ``"mean"`` or ``"linear"``.
        c: Sokal's window factor.
        factor: How many autocorrelation times a history must span for tau to be reported.
        sharded: Per source, its sharded columns or None.

    Returns:
        The summary still to finish, holding the histories without ``sharded`` (and the
        reduced figures of the others).

    Raises:
        ValueError: As :func:`summarize_several`.

    Example:
        >>> import torch
        >>> noise = torch.randn(100, 2, generator=torch.Generator().manual_seed(0))
        >>> pending = prepare_summary(
        ...     [({"params": noise}, torch.tensor([0, 0]), ["encoder"])], step=99, lags=(1,)
        ... )
        >>> pending.nbytes, pending.finish().groups[0].group  # 800 bytes of history, 16 of index
        (816, 'encoder')
    """
    if not sources:
        raise ValueError("sources is empty: pass at least one (histories, index, names)")
    lags = _check_lags(lags)
    _check_detrend(detrend)
    if not (c > 0 and factor > 0):
        raise ValueError(f"c and factor must be positive, got c={c}, factor={factor}")
    layouts = list(sharded) if sharded is not None else [None] * len(sources)
    if len(layouts) != len(sources):
        raise ValueError(f"sharded needs one entry per source ({len(sources)}), got {len(layouts)}")
    sets = []
    for (histories, group_index, group_names), layout in zip(sources, layouts, strict=True):
        if not histories:
            raise ValueError("a source has no histories: pass at least one kind")
        sets.append((histories, group_index, [str(name) for name in group_names], layout))
    kinds = list(dict.fromkeys(kind for histories, _, _, _ in sets for kind in histories))
    labels: set[tuple[str, str]] = set()
    options = _Options(max(lags), detrend, c, factor)
    parts = []
    for kind in kinds:
        for histories, group_index, names, layout in sets:
            if kind not in histories:
                continue
            repeated = sorted({name for name in names if (kind, name) in labels})
            if repeated:
                raise ValueError(f"group names {repeated} of {kind!r} are in two sources")
            columns = _as_columns(histories[kind], allow_empty=layout is not None)
            if max(lags) >= columns.shape[0]:
                raise ValueError(
                    f"lags must be below the history length {columns.shape[0]} of {kind!r}, "
                    f"got max(lags) = {max(lags)}"
                )
            index = _check_group_index(group_index, columns)
            num_steps, stream = columns.shape[0], _current_stream(columns)
            if layout is None:  # all of its arithmetic is left to finish()
                parts.append(_Part(kind, tuple(names), num_steps, columns, index, None, stream))
            else:  # summed over the ranks now, on every rank, in this order
                spectra = _group_spectra(columns, index, len(names), options, layout)
                part = _Part(
                    kind, tuple(names), num_steps, None, spectra.group_index, spectra, stream
                )
                parts.append(part)
            labels.update((kind, name) for name in names)
    return PendingSummary(int(step), lags, options, parts)


class _Options(NamedTuple):
    """How a summary's histories are analysed: the largest lag charted, and its keywords."""

    report_lag: int
    detrend: Detrend
    c: float
    factor: float


class _GroupSpectra(NamedTuple):
    """One kind of one source, reduced to what its groups' figures are computed from.

    ``group_power`` ``[G, F]`` sums each group's power spectra (each column's weighted by the
    inverse of its energy), ``non_finite`` ``[G]`` counts the columns left out for NaN or Inf,
    ``rho1`` holds every column's lag-1 autocorrelation and ``group_index`` its group (with
    sharded columns: every column of the whole history, over the ranks).
    """

    group_power: Tensor
    non_finite: Tensor
    rho1: Tensor
    group_index: Tensor
    num_steps: int
    max_lag: int
    fft_length: int


class _Part(NamedTuple):
    """One kind of one source in a :class:`PendingSummary`: its history, or its spectra."""

    kind: str
    names: tuple[str, ...]
    num_steps: int
    columns: Tensor | None  # the history still to analyse; None once its spectra are in
    group_index: Tensor
    spectra: _GroupSpectra | None
    stream: Any  # the CUDA stream its tensors were made on (None off CUDA)

    @property
    def tensors(self) -> list[Tensor]:
        """The tensors it holds."""
        if self.spectra is not None:
            return list(self.spectra[:4])
        return [self.group_index] if self.columns is None else [self.columns, self.group_index]


class PendingSummary:
    """An autocorrelation summary whose arithmetic is still to run: :meth:`finish` runs it.

    Made by :func:`prepare_summary` on the thread that owns the histories (the training
    thread), finished on any thread (the writers' thread): it holds the histories it was
    handed (or, for sharded columns, their figures already summed over the ranks), which no
    later step changes. :meth:`finish` runs once and lets them go.

    On CUDA, :meth:`finish` queues its work on the stream that was current when the summary
    was prepared, so it follows the copies it reads, whatever thread runs it, and no thread
    synchronises with the device but the one that finishes (for the one transfer to the host).

    Attributes:
        step: The training step the histories end at.
        lags: The lags charted.

    Example:
        >>> import torch
        >>> history = torch.randn(60, 3, generator=torch.Generator().manual_seed(0))
        >>> pending = prepare_summary(
        ...     [({"grads": history}, torch.tensor([0, 0, 1]), ["encoder", "head"])],
        ...     step=60, lags=(1, 2),
        ... )
        >>> pending.step, pending.nbytes, pending.finishes_anywhere
        (60, 744, True)
        >>> [group.group for group in pending.finish().groups]
        ['encoder', 'head']
        >>> pending.nbytes  # finished: the histories are let go
        0
    """

    def __init__(
        self, step: int, lags: tuple[int, ...], options: _Options, parts: Sequence[_Part]
    ) -> None:
        self.step = step
        self.lags = lags
        self._options = options
        self._parts: tuple[_Part, ...] | None = tuple(parts)

    @property
    def nbytes(self) -> int:
        """Bytes of the tensors it holds until it is finished (0 after)."""
        parts = self._parts or ()
        return sum(t.numel() * t.element_size() for part in parts for t in part.tensors)

    @property
    def finishes_anywhere(self) -> bool:
        """Whether :meth:`finish` may run on another thread than the one that prepared it.

        True for tensors on the CPU and CUDA devices; other devices (MPS, XLA...) are not
        known to take work from two threads, so their summary is finished where it was
        prepared.
        """
        parts = self._parts or ()
        return all(t.device.type in ("cpu", "cuda") for part in parts for t in part.tensors)

    def finish(self, all_scalars: bool = True) -> AutocorrelationSummary:
        """Run the arithmetic and move the summary to the host, in one transfer.

        Args:
            all_scalars: The summary's ``all_scalars`` (which figures writers give as
                scalars: see :class:`~learnscope.records.AutocorrelationSummary`).

        Returns:
            The summary :func:`summarize_several` gives for the same arguments.

        Raises:
            RuntimeError: It was finished already.
        """
        if self._parts is None:
            raise RuntimeError(f"the autocorrelation summary of step {self.step} is finished")
        parts, self._parts = self._parts, None
        options = self._options
        tables: list[Tensor] = []
        for part in parts:
            with _on_stream(part.stream):
                spectra = part.spectra
                if spectra is None:
                    assert part.columns is not None
                    spectra = _group_spectra(
                        part.columns, part.group_index, len(part.names), options
                    )
                table = _group_table(spectra, options)
                device = tables[0].device if tables else table.device
                tables.append(table.to(device=device, dtype=torch.float64))
        with _on_stream(parts[0].stream):
            host = torch.cat(tables).cpu().numpy()  # the one transfer to the host
        labels = [(part.kind, name, part.num_steps) for part in parts for name in part.names]
        groups = []
        for row, (kind, name, num_steps) in zip(host, labels, strict=True):
            *acf, q25, median, q75, tau, non_finite = row.tolist()
            groups.append(
                GroupAutocorrelation(
                    group=name,
                    kind=kind,
                    mean_acf=row[: len(acf)],
                    rho1_median=median,
                    rho1_q25=q25,
                    rho1_q75=q75,
                    tau=None if math.isnan(tau) else tau,
                    non_finite_elements=int(non_finite),
                    num_steps=num_steps,
                )
            )
        return AutocorrelationSummary(self.step, self.lags, tuple(groups), all_scalars)


def _current_stream(tensor: Tensor) -> Any:
    """The current CUDA stream of ``tensor``'s device; None off CUDA."""
    return torch.cuda.current_stream(tensor.device) if tensor.device.type == "cuda" else None


def _on_stream(stream: Any) -> contextlib.AbstractContextManager[Any]:
    """Queue the work in the block on ``stream`` (nothing to do for None)."""
    return contextlib.nullcontext() if stream is None else torch.cuda.stream(stream)


def _group_spectra(
    columns: Tensor,
    group_index: Tensor,
    num_groups: int,
    options: _Options,
    sharded: ShardedLayout | None = None,
) -> _GroupSpectra:
    """Each group's summed power spectra, non-finite count, and each column's lag-1 value.

    The group's mean ACF is the inverse FFT of its summed power spectra, each column's
    weighted by the inverse of its energy, so no per-column ACF is ever materialised; each
    column's energy and lag-1 sum come from its power spectrum by matrix-vector products.
    With ``sharded``, the group power spectra, the non-finite counts and the lag-1 values (at
    their whole-history columns, zero elsewhere) are summed over the ranks in one call of its
    ``reduce``.
    """
    _, detrend, c, factor = options
    num_steps, num_columns = columns.shape
    max_lag = max(options.report_lag, min(num_steps - 1, math.ceil(c * num_steps / factor)))
    fft_length = _fast_fft_length(num_steps + max_lag)
    group_power = columns.new_zeros(num_groups, fft_length // 2 + 1)
    rho1 = columns.new_empty(num_columns)
    non_finite = columns.new_zeros(num_groups)
    energy_basis, lag1_basis = _lag_basis(fft_length, 1, columns).unbind(1)
    padded = _padded_rows(columns, fft_length)
    for chunk in _column_chunks(columns):
        power, floor, finite = _power_spectra(columns[:, chunk], detrend, padded)
        non_finite.index_add_(0, group_index[chunk], (~finite).to(columns.dtype))
        energy, lag1 = power.mv(energy_basis), power.mv(lag1_basis)  # two mv beat one mm
        constant = energy <= floor
        rho1[chunk] = torch.where(constant, torch.nan, lag1 / energy)
        weight = torch.where(constant, 0.0, energy.reciprocal())
        group_power.index_add_(0, group_index[chunk], power.mul_(weight.unsqueeze(1)))
    if sharded is not None:
        group_power, non_finite, rho1 = _sum_over_ranks(group_power, non_finite, rho1, sharded)
        group_index = sharded.group_index.to(columns.device)
    return _GroupSpectra(group_power, non_finite, rho1, group_index, num_steps, max_lag, fft_length)


def _group_table(spectra: _GroupSpectra, options: _Options) -> Tensor:
    """Per group: mean ACF to the report lag, rho_1 quartiles, tau (NaN = None), non-finite count.

    The last number is how many of the group's columns were left out for holding NaN or Inf.
    """
    group_power, non_finite, rho1, group_index, num_steps, max_lag, fft_length = spectra
    report_lag, _, c, factor = options
    covariance = torch.fft.irfft(group_power, n=fft_length, dim=1)[:, : max_lag + 1]
    mean_acf = (covariance / covariance[:, :1]).T  # [max_lag + 1, G]; NaN if all constant
    tau = integrated_time(mean_acf, c)
    trusted = is_reliable(tau, num_steps, factor, max_lag=max_lag, c=c) & (mean_acf[1] >= 0)
    tau = torch.where(trusted, tau, torch.nan)
    quartiles = _group_quantiles(rho1, group_index, group_power.shape[0], _QUARTILES)
    table = [mean_acf[: report_lag + 1].T, quartiles, tau.unsqueeze(1), non_finite.unsqueeze(1)]
    return torch.cat(table, dim=1)


def _sum_over_ranks(
    group_power: Tensor, non_finite: Tensor, rho1: Tensor, sharded: ShardedLayout
) -> tuple[Tensor, Tensor, Tensor]:
    """Sum the per-group figures over the ranks; lag-1 values go to their whole-history columns.

    Every element is held by one rank, whose value (NaN included) lands at its column; the
    other ranks add zeros there.
    """
    whole = rho1.new_zeros(sharded.total_elements)
    whole.index_copy_(0, sharded.positions.to(rho1.device), rho1)
    packed = sharded.reduce(torch.cat([group_power.flatten(), non_finite, whole]))
    power_size, groups = group_power.numel(), non_finite.shape[0]
    return (
        packed[:power_size].view_as(group_power),
        packed[power_size : power_size + groups],
        packed[power_size + groups :],
    )


def _group_quantiles(
    values: Tensor, group_index: Tensor, num_groups: int, quantiles: Sequence[float]
) -> Tensor:
    """``[G, len(quantiles)]`` quantiles of ``values`` per group, NaN ignored.

    Linear interpolation, as ``numpy.nanquantile``. Sorting by value and then (stably) by
    group lays every group out contiguously in ascending order with its NaNs last, so the
    quantiles are two gathers; no shape depends on the data, so nothing syncs.
    """
    by_value = torch.sort(values, stable=True).indices  # NaN sorts last
    order = by_value[torch.sort(group_index[by_value], stable=True).indices]
    ordered = values[order]
    size = torch.zeros(num_groups, dtype=torch.long, device=values.device)
    size.index_add_(0, group_index, torch.ones_like(group_index))
    count = torch.zeros(num_groups, dtype=values.dtype, device=values.device)
    count.index_add_(0, group_index, (~values.isnan()).to(values.dtype))
    start = (size.cumsum(0) - size).unsqueeze(1)
    last = (count - 1).clamp(min=0).unsqueeze(1)
    position = torch.cat([q * last for q in quantiles], dim=1)  # Python floats: no copy
    below = position.floor()
    above = (below + 1).minimum(last)
    highest = values.shape[0] - 1
    low = ordered[(start + below.long()).clamp(max=highest)]
    high = ordered[(start + above.long()).clamp(max=highest)]
    result = low + (high - low) * (position - below)
    return torch.where(count.unsqueeze(1) > 0, result, torch.nan)


def _as_columns(history: Tensor, allow_empty: bool = False) -> Tensor:
    """Validate a history and return it as ``[T, K]`` in float32 or float64."""
    if not isinstance(history, Tensor):
        raise TypeError(f"history must be a torch.Tensor, got {type(history).__name__}")
    if history.ndim not in (1, 2):
        raise ValueError(
            f"history must be [T, K] (or [T] for one series), got shape {tuple(history.shape)}"
        )
    if history.is_complex():
        raise ValueError("history must be real, got a complex tensor")
    if history.shape[0] < 2:
        raise ValueError(f"history needs at least 2 steps, got {history.shape[0]}")
    if history.ndim == 2 and history.shape[1] == 0 and not allow_empty:
        raise ValueError(
            f"history has no columns (shape {tuple(history.shape)}): pass at least one series"
        )
    return _as_float(history if history.ndim == 2 else history.unsqueeze(1))


def _as_float(tensor: Tensor) -> Tensor:
    """float64 stays float64; anything else is computed in float32."""
    return tensor if tensor.dtype == torch.float64 else tensor.to(torch.float32)


def _check_max_lag(max_lag: int | None, num_steps: int) -> int:
    """The default max_lag is ``T - 1``; anything outside ``0..T-1`` is an error."""
    if max_lag is None:
        return num_steps - 1
    if isinstance(max_lag, bool) or not isinstance(max_lag, int):
        raise ValueError(f"max_lag must be an int or None, got {max_lag!r}")
    if not 0 <= max_lag < num_steps:
        raise ValueError(f"max_lag must be in 0..{num_steps - 1} (T - 1), got {max_lag}")
    return max_lag


def _check_detrend(detrend: str) -> None:
    if detrend not in _DETREND_METHODS:
        raise ValueError(f"detrend must be one of {_DETREND_METHODS}, got {detrend!r}")


def _check_lags(lags: Sequence[int]) -> tuple[int, ...]:
    checked = tuple(lags)
    if not checked:
        raise ValueError("lags is empty: pass at least one lag, e.g. (1, 2, 5, 10)")
    for lag in checked:
        if isinstance(lag, bool) or not isinstance(lag, int) or lag < 0:
            raise ValueError(f"lags must be non-negative ints, got {lag!r}")
    return checked


def _check_group_index(group_index: Tensor, columns: Tensor) -> Tensor:
    """A ``[K]`` long tensor on the columns' device."""
    if group_index.ndim != 1 or group_index.shape[0] != columns.shape[1]:
        raise ValueError(
            f"group_index must be [K] = [{columns.shape[1]}] to match the history, "
            f"got shape {tuple(group_index.shape)}"
        )
    if group_index.is_floating_point() or group_index.is_complex():
        raise ValueError(f"group_index must hold integers, got {group_index.dtype}")
    return group_index.to(device=columns.device, dtype=torch.long)


def _padded_rows(columns: Tensor, fft_length: int) -> Tensor:
    """A zeroed ``[chunk width, fft_length]`` workspace, reused by every chunk of a call."""
    width = max((chunk.stop - chunk.start for chunk in _column_chunks(columns)), default=0)
    return columns.new_zeros(width, fft_length)


def _power_spectra(
    columns: Tensor, detrend: Detrend, padded: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Centre (or detrend) each column and take the power spectrum of its zero-padded series.

    A column holding NaN or Inf is replaced by zeros (so it counts as constant and is left
    out). Each column is divided by its largest absolute value before centring, so the mean
    and the FFT see values of at most one whatever the input's scale (float32 series of
    ``1e20`` overflowed in the power spectrum, and of ``1e-25`` underflowed to zero). The
    centred values are then either zero or at least about one float epsilon, whose squares
    are far from underflow, so no second scaling is needed.

    Args:
        columns: ``[T, K]``.
        detrend: ``"mean"`` or ``"linear"``.
        padded: A workspace from :func:`_padded_rows`, at least ``[K, T + max_lag]`` so
            lags do not wrap around; only its first ``T`` columns are ever written.

    Returns:
        ``[K, fft_length // 2 + 1]`` power spectra, whose inverse real FFT is
        ``sum_t x_t x_{t+k}`` at lag ``k`` of the scaled series; the ``[K]`` energy
        ``sum_t x_t^2`` at or below which a column counts as constant: ``T`` times the square
        of a few float epsilons times the column's magnitude (its mean, plus the ends of its
        trend line), the rounding residue that centring a constant leaves, in the same
        scaled units; and the ``[K]`` bool mask of the columns that were all finite.
    """
    num_steps = columns.shape[0]
    # The largest absolute value of each column: Inf or NaN when the column holds any (amax
    # propagates NaN). Such a column is divided by Inf, and the NaN that Inf / Inf and
    # NaN / Inf give are zeroed: two cheap passes, where a full-size ``where`` costs several.
    # (Divisions, not multiplications by reciprocals, which overflow for subnormal values.)
    magnitude = columns.abs().amax(0)
    finite = torch.isfinite(magnitude)
    divisor = torch.where(magnitude > 0, magnitude, 1.0).where(finite, torch.inf)
    centred = (columns / divisor).nan_to_num_(0.0, 0.0, 0.0)
    mean = centred.mean(0)
    centred -= mean
    scale = mean.abs()
    if detrend == "linear":
        time = torch.arange(num_steps, dtype=centred.dtype, device=centred.device)
        time -= (num_steps - 1) / 2
        slope = time @ centred / time.dot(time)
        centred.addr_(time, slope, alpha=-1.0)
        scale += slope.abs() * ((num_steps - 1) / 2)
    epsilon = torch.finfo(columns.dtype).eps * _CONSTANT_TOLERANCE_EPS
    floor = num_steps * (epsilon * scale).square()
    # The FFT runs along contiguous rows: on the CPU a transposed copy plus a row FFT
    # measured about three times faster than an FFT along the strided time axis.
    rows = padded[: columns.shape[1]]
    rows[:, :num_steps] = centred.T.contiguous()
    spectrum = torch.view_as_real(torch.fft.rfft(rows, dim=1))
    real, imaginary = spectrum.unbind(-1)
    return torch.addcmul(real.square(), imaginary, imaginary), floor, finite


def _lag_basis(fft_length: int, max_lag: int, like: Tensor) -> Tensor:
    """``[fft_length // 2 + 1, max_lag + 1]``: ``power @ basis`` is the inverse real FFT at lags.

    Each frequency but zero and Nyquist stands for itself and its mirror image, hence the
    weight two.
    """
    frequencies = torch.arange(fft_length // 2 + 1, dtype=like.dtype, device=like.device)
    lags = torch.arange(max_lag + 1, dtype=like.dtype, device=like.device)
    basis = torch.cos(torch.outer(frequencies, lags) * (2 * math.pi / fft_length))
    weights = torch.full_like(frequencies, 2.0 / fft_length)
    weights[0] = 1.0 / fft_length
    if fft_length % 2 == 0:
        weights[-1] = 1.0 / fft_length
    return basis * weights.unsqueeze(1)


def _window_reached(lags: Tensor | int, tau: Tensor, c: float) -> Tensor:
    """Sokal's window condition ``M >= c * tau(M)``; shared so both tests agree exactly."""
    return lags >= c * tau


def _column_chunks(columns: Tensor) -> Iterator[slice]:
    """Column slices to process together: all at once on a GPU, cache-sized on the CPU."""
    num_steps, num_columns = columns.shape
    if columns.device.type == "cpu":
        size = max(1, _CPU_CHUNK_VALUES // num_steps)
    else:
        size = max(1, num_columns)
    for start in range(0, num_columns, size):
        yield slice(start, min(start + size, num_columns))


def _fast_fft_length(minimum: int) -> int:
    """The smallest ``2^a 3^b 5^c >= minimum``: lengths FFT libraries handle fastest."""
    best = 1 << max(0, (minimum - 1).bit_length())
    power3 = 1
    while power3 < best:
        power5 = power3
        while power5 < best:
            length = power5 << max(0, (math.ceil(minimum / power5) - 1).bit_length())
            best = min(best, length)
            power5 *= 5
        power3 *= 3
    return best
