"""Autocorrelation records: what the analysis (:mod:`learnscope.autocorrelation`) hands to writers.

A record holds host-side numbers only (numpy arrays and floats), so writers never touch the
device. One :class:`AutocorrelationSummary` per logging step holds one
:class:`GroupAutocorrelation` per (kind, group): ``kind`` is ``"params"`` or ``"grads"`` and
``group`` a module prefix such as ``"encoder"``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from learnscope.records import checks
from learnscope.tags import AUTOCORRELATION

__all__ = ["AutocorrelationSummary", "GroupAutocorrelation"]


@dataclass(frozen=True, eq=False)
class GroupAutocorrelation:
    """Autocorrelation of the sampled elements of one module group, for one kind of series.

    Attributes:
        group: The module group, e.g. ``"encoder"`` (non-empty text).
        kind: ``"params"`` or ``"grads"`` (the history's name: non-empty text).
        mean_acf: The mean autocorrelation over the group's elements at lags
            ``0..len(mean_acf) - 1`` (elements that stayed constant are left out). All NaN
            when every element of the group stayed constant. Real numbers (an array or a
            list), kept as a read-only float64 array.
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

    Raises:
        TypeError: If a name is no text, a number is complex, text or a bool, or a count is
            no int.
        ValueError: If a name is empty, ``mean_acf`` is not one non-empty row, tau is not
            positive and finite, or a count is below its least (0; 2 for ``num_steps``).

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
        checks.name(self.kind, "GroupAutocorrelation kind")
        checks.name(self.group, f"GroupAutocorrelation group of {self.kind!r}")
        what = f"of GroupAutocorrelation {self.kind}/{self.group}"
        acf = checks.real_array(self.mean_acf, f"mean_acf {what}").copy()
        if acf.ndim != 1 or acf.size == 0:
            raise ValueError(
                f"mean_acf {what} must be a non-empty 1-D array (one value per lag from 0), "
                f"got shape {acf.shape}"
            )
        acf.setflags(write=False)
        object.__setattr__(self, "mean_acf", acf)
        for name in ("rho1_median", "rho1_q25", "rho1_q75"):
            value = checks.real_number(getattr(self, name), f"{name} {what}")
            object.__setattr__(self, name, value)
        if self.tau is not None:
            tau = checks.real_number(self.tau, f"tau {what} (or None)")
            if not (math.isfinite(tau) and tau > 0):
                raise ValueError(
                    f"tau {what} must be a positive number of steps or None, got {tau}"
                )
            object.__setattr__(self, "tau", tau)
        count = checks.count(self.non_finite_elements, f"non_finite_elements {what}")
        object.__setattr__(self, "non_finite_elements", count)
        if self.num_steps is not None:
            steps = checks.count(self.num_steps, f"num_steps {what} (or None)", least=2)
            object.__setattr__(self, "num_steps", steps)

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

    Raises:
        TypeError: If the step or a lag is no int, a group no :class:`GroupAutocorrelation`,
            or ``all_scalars`` no bool.
        ValueError: If the step or a lag is negative, or a lag is beyond a group's ACF.

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
        object.__setattr__(self, "step", checks.step(self.step, "AutocorrelationSummary step"))
        if isinstance(self.lags, str) or not isinstance(self.lags, Iterable):
            raise TypeError(f"lags must be a sequence of ints, got {type(self.lags).__name__}")
        lags = tuple(
            checks.count(lag, "each lag of an AutocorrelationSummary") for lag in self.lags
        )
        object.__setattr__(self, "lags", lags)
        object.__setattr__(self, "groups", tuple(self.groups))
        for group in self.groups:
            if not isinstance(group, GroupAutocorrelation):
                raise TypeError(
                    f"groups of an AutocorrelationSummary must be GroupAutocorrelation, got "
                    f"{type(group).__name__}"
                )
            too_far = [lag for lag in self.lags if not 0 <= lag <= group.max_lag]
            if too_far:
                raise ValueError(
                    f"lags {too_far} are outside 0..{group.max_lag} for group "
                    f"{group.kind}/{group.group}"
                )
        if not isinstance(self.all_scalars, bool):
            raise TypeError(f"all_scalars must be True or False, got {self.all_scalars!r}")

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
