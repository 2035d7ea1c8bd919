"""Autocorrelation records: what :func:`learnscope.autocorrelation.summarize` hands to writers.

A record holds host-side numbers only (numpy arrays and floats), so writers never touch the
device. One :class:`AutocorrelationSummary` per logging step holds one
:class:`GroupAutocorrelation` per (kind, group): ``kind`` is ``"params"`` or ``"grads"`` and
``group`` a module prefix such as ``"encoder"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from learnscope.tags import AUTOCORRELATION

__all__ = ["AutocorrelationSummary", "GroupAutocorrelation"]


@dataclass(frozen=True, eq=False)
class GroupAutocorrelation:
    """Autocorrelation of the sampled elements of one module group, for one kind of series.

    Attributes:
        group: The module group, e.g. ``"encoder"``.
        kind: ``"params"`` or ``"grads"``.
        mean_acf: The mean autocorrelation over the group's elements at lags
            ``0..len(mean_acf) - 1`` (elements that stayed constant are left out). All NaN
            when every element of the group stayed constant. Read-only.
        rho1_median: The median of the elements' lag-1 autocorrelations.
        rho1_q25: Their 25% quantile.
        rho1_q75: Their 75% quantile.
        tau: The integrated autocorrelation time of the group's mean series, in steps, or
            ``None`` when it cannot be trusted: the history is shorter than 50 tau, Sokal's
            window was not found, or the group is anti-correlated (mean lag-1 below zero,
            where tau means nothing; read ``rho1_median`` instead).
        non_finite_elements: How many of the group's sampled elements were left out of every
            number above because they were NaN or Inf at some step of the history (``0``
            when none). A writer may show it as a scalar (:meth:`AutocorrelationSummary.
            to_scalars` names it ``.../non_finite_elements`` when it is above zero) or in a
            chart's caption; a writer that ignores it still shows correct numbers for the
            finite elements.
        num_steps: How many recorded steps (``T``) the ACF was computed from, or ``None``
            when not known. A lag's autocorrelation of white noise over ``T`` steps lies
            within ``±1.96/√T`` 95% of the time (the band the ACF pictures shade).

    Example:
        >>> import numpy as np
        >>> g = GroupAutocorrelation("encoder", "params", np.array([1.0, 0.5]), 0.5, 0.4, 0.6, 3.0)
        >>> float(g.mean_acf[1]), g.tau
        (0.5, 3.0)
    """

    group: str
    kind: str
    mean_acf: np.ndarray
    rho1_median: float
    rho1_q25: float
    rho1_q75: float
    tau: float | None
    non_finite_elements: int = 0
    num_steps: int | None = None

    def __post_init__(self) -> None:
        acf = np.array(self.mean_acf, dtype=np.float64)
        if acf.ndim != 1 or acf.size == 0:
            raise ValueError(f"mean_acf must be a non-empty 1-D array, got shape {acf.shape}")
        acf.setflags(write=False)
        object.__setattr__(self, "mean_acf", acf)
        for name in ("rho1_median", "rho1_q25", "rho1_q75"):
            object.__setattr__(self, name, float(getattr(self, name)))
        if self.tau is not None:
            object.__setattr__(self, "tau", float(self.tau))
        count = self.non_finite_elements
        if isinstance(count, bool) or int(count) != count or count < 0:
            raise ValueError(f"non_finite_elements must be a non-negative int, got {count!r}")
        object.__setattr__(self, "non_finite_elements", int(count))
        steps = self.num_steps
        if steps is not None:
            if isinstance(steps, bool) or int(steps) != steps or steps < 2:
                raise ValueError(f"num_steps must be an int of at least 2 or None, got {steps!r}")
            object.__setattr__(self, "num_steps", int(steps))

    @property
    def max_lag(self) -> int:
        """The largest lag in ``mean_acf``.

        Example:
            >>> import numpy as np
            >>> GroupAutocorrelation("head", "grads", np.ones(3), 0.0, 0.0, 0.0, None).max_lag
            2
        """
        return self.mean_acf.size - 1


@dataclass(frozen=True)
class AutocorrelationSummary:
    """The autocorrelation of sampled parameters and gradients at one training step.

    Attributes:
        step: The training step the history ends at.
        lags: The lags worth charting over steps (each at most the groups' ``max_lag``).
        groups: One entry per (kind, group).
        all_scalars: Whether :meth:`to_scalars` gives every figure (each lag and the lag-1
            quartiles) or only the lag-1 median and tau of each group. The summary itself
            (pictures, run record) always holds everything.

    Example:
        >>> import numpy as np
        >>> acf = np.array([1.0, 0.9])
        >>> g = GroupAutocorrelation("encoder", "params", acf, 0.9, 0.8, 0.95, tau=None)
        >>> summary = AutocorrelationSummary(step=100, lags=(1,), groups=(g,))
        >>> summary.to_scalars()["~learnscope/autocorrelation/params/encoder/lag_1"]
        0.9
    """

    step: int
    lags: tuple[int, ...]
    groups: tuple[GroupAutocorrelation, ...] = field(default_factory=tuple)
    all_scalars: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "lags", tuple(int(lag) for lag in self.lags))
        object.__setattr__(self, "groups", tuple(self.groups))
        for group in self.groups:
            too_far = [lag for lag in self.lags if not 0 <= lag <= group.max_lag]
            if too_far:
                raise ValueError(
                    f"lags {too_far} are outside 0..{group.max_lag} for group "
                    f"{group.kind}/{group.group}"
                )

    def to_scalars(self, prefix: str = AUTOCORRELATION) -> dict[str, float]:
        """Flatten the summary into scalar metrics, one name per number.

        Names are ``{prefix}/{kind}/{group}/rho1_median`` and ``.../tau``, and
        ``.../non_finite_elements`` for a group with elements left out for NaN or Inf; with
        ``all_scalars`` also ``.../lag_{k}`` for each of ``lags``, ``.../rho1_q25`` and
        ``.../rho1_q75``. A tau of ``None`` and NaN values (groups whose elements all stayed
        constant) are left out, so a chart shows a gap instead of a made-up number.

        Args:
            prefix: The first component of every name.

        Returns:
            Metric name to value.

        Example:
            >>> import numpy as np
            >>> acf = np.array([1.0, -0.4])
            >>> g = GroupAutocorrelation("head", "grads", acf, -0.4, -0.5, -0.3, tau=None)
            >>> for name in sorted(AutocorrelationSummary(7, (1,), (g,)).to_scalars()):
            ...     print(name)
            ~learnscope/autocorrelation/grads/head/lag_1
            ~learnscope/autocorrelation/grads/head/rho1_median
            ~learnscope/autocorrelation/grads/head/rho1_q25
            ~learnscope/autocorrelation/grads/head/rho1_q75
            >>> few = AutocorrelationSummary(7, (1,), (g,), all_scalars=False)
            >>> sorted(few.to_scalars())
            ['~learnscope/autocorrelation/grads/head/rho1_median']
        """
        scalars: dict[str, float] = {}
        for group in self.groups:
            base = f"{prefix}/{group.kind}/{group.group}"
            values: dict[str, float] = {}
            if self.all_scalars:
                values = {f"lag_{lag}": float(group.mean_acf[lag]) for lag in self.lags}
            values["rho1_median"] = group.rho1_median
            if self.all_scalars:
                values["rho1_q25"] = group.rho1_q25
                values["rho1_q75"] = group.rho1_q75
            if group.tau is not None:
                values["tau"] = group.tau
            if group.non_finite_elements:
                values["non_finite_elements"] = float(group.non_finite_elements)
            scalars.update(
                {f"{base}/{name}": value for name, value in values.items() if math.isfinite(value)}
            )
        return scalars
