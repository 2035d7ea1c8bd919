"""The autocorrelation analyses of a run, folded from the record's ``autocorrelation`` entries.

Per kind (``params``, ``grads``): the groups x lags at each analysis step, and the median
lag-1 autocorrelation and the integrated autocorrelation time tau (``None`` where the record has
none: the history too short for it) of each group over the steps. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from learnscope.plugins.views.record_checks import DamagedEntry, list_field, rounded, whole_number
from learnscope.run_directory.record import decode_array


@dataclass
class AutocorrelationSeries:
    """The analyses of one kind (``params`` or ``grads``), by step.

    Example:
        >>> series = {}
        >>> fold_autocorrelation(series, {"kind": "autocorrelation", "what": "params", "step": 4,
        ...     "groups": ["encoder"], "lags": [1, 2], "acf": [[0.9, 0.8]]})
        >>> series["params"].view([1, 2, 5])["values"]
        [[[0.9, 0.8]]]
        >>> series["params"].view([1, 2, 5])["tau"]  # none in the entry
        [[None]]
    """

    kind: str
    groups: dict[str, None] = field(default_factory=dict)  # in first-seen order
    lags: set[int] = field(default_factory=set)
    # step -> group -> (value by lag, lag-1 median, tau)
    by_step: dict[int, dict[str, tuple[dict[int, float | None], float | None, float | None]]] = (
        field(default_factory=dict)
    )

    def view(self, charted: Sequence[int]) -> dict[str, Any]:
        """Groups x the ``charted`` lags (those the record has) at each step, lag 1 and tau."""
        groups, steps = list(self.groups), sorted(self.by_step)
        lags = [lag for lag in charted if lag in self.lags]
        empty: tuple[dict[int, float | None], float | None, float | None] = ({}, None, None)
        values = [
            [[self.by_step[s].get(g, empty)[0].get(lag) for lag in lags] for g in groups]
            for s in steps
        ]
        rho1 = [[self.by_step[s].get(g, empty)[1] for s in steps] for g in groups]
        tau = [[self.by_step[s].get(g, empty)[2] for s in steps] for g in groups]
        return {
            "kind": self.kind,
            "groups": groups,
            "lags": lags,
            "steps": steps,
            "values": values,
            "rho1": rho1,
            "tau": tau,
        }


def fold_autocorrelation(
    series: dict[str, AutocorrelationSeries], entry: Mapping[str, Any]
) -> None:
    """Add one ``autocorrelation`` entry to ``series`` (by kind), after checking all of it.

    Raises:
        DamagedEntry: Naming what is wrong with the entry (nothing is added then).
    """
    kind = entry.get("what")
    if not isinstance(kind, str) or not kind:
        raise DamagedEntry("it has no 'what' (params or grads)")
    step = whole_number(entry, "step")
    groups = list_field(entry, "groups")
    lags = list_field(entry, "lags")
    if not all(isinstance(g, str) for g in groups) or not all(
        isinstance(lag, int) and not isinstance(lag, bool) for lag in lags
    ):
        raise DamagedEntry("groups must be names and lags whole numbers")
    acf = entry.get("acf")
    acf = decode_array(acf).tolist() if isinstance(acf, Mapping) else acf
    if not (
        isinstance(acf, list)
        and len(acf) == len(groups)
        and all(isinstance(row, list) and len(row) == len(lags) for row in acf)
    ):
        raise DamagedEntry(f"acf is not [{len(groups)} groups][{len(lags)} lags]")
    rho1 = entry.get("rho1_median")
    if rho1 is None:
        rho1 = [None] * len(groups)
    if not isinstance(rho1, list) or len(rho1) != len(groups):
        raise DamagedEntry(f"rho1_median is not one value per group ({len(groups)})")
    taus = entry.get("tau")
    if taus is None:
        taus = [None] * len(groups)
    if not isinstance(taus, list) or len(taus) != len(groups):
        raise DamagedEntry(f"tau is not one value per group ({len(groups)})")
    fold = series.get(kind)
    if fold is None:
        fold = series[kind] = AutocorrelationSeries(kind)
    analysis = fold.by_step.setdefault(step, {})
    for group, row, lag_one, tau in zip(groups, acf, rho1, taus, strict=True):
        fold.groups.setdefault(group)
        values = {lag: rounded(v) for lag, v in zip(lags, row, strict=True)}
        median = rounded(lag_one)
        analysis[group] = (values, median if median is not None else values.get(1), rounded(tau))
    fold.lags.update(lags)
