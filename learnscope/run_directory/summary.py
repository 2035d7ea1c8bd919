"""One run at a glance: what a run record holds, folded into a few stable, flat values.

:func:`summarize_record` folds the entries of a run record (``docs/run_record.md``) into a
:class:`RunSummary` (:class:`SummaryFold` folds one entry at a time, as a record is written):
how the run stands (``running``, ``finished``, ``interrupted``, ``failed`` with its exception),
its last step, its findings (how many of each code still hold and were seen at all, the first
one, the first step of a collapse, an oversmoothing and a non-finite value), the lag-1 median
and tau of each parameter group at the newest autocorrelation analysis, and each embedding key's
snapshots: how many, the last and the lowest RankMe and effective rank, and the label silhouette
of each 2-D view at the newest snapshot. :meth:`RunSummary.flat` names each value once,
``learnscope/...``, with at most 4 separators (``/`` or ``.``) in a name, as W&B's run
summaries allow; the names are listed in ``docs/summary.md``.

The whole record is folded: a record that holds a fit and then a ``validate`` keeps the fit's
analyses and snapshots; the status is the newest run's. An entry the summary cannot read (a
field missing or of the wrong type) is left out of it, as the views leave it out. Nothing here
imports torch.

Example:
    >>> summary = summarize_record([
    ...     {"kind": "run", "format": 1, "time": 1.0, "hyperparameters": {"lr": 0.1}},
    ...     {"kind": "snapshot", "key": "encoder/val", "step": 4},
    ...     {"kind": "findings", "step": 4, "rows": [{"code": "embedding-collapse",
    ...      "subject": "encoder/val", "step": 4, "first_step": 4, "resolved_step": None}]},
    ...     {"kind": "end", "step": 6, "status": "finished"}])
    >>> summary.status, summary.last_step, summary.first_collapse_step, summary.hyperparameters
    ('finished', 6, 4, {'lr': 0.1})
    >>> flat = summary.flat()
    >>> flat["learnscope/findings/embedding-collapse"]
    1
    >>> flat["learnscope/snapshots/encoder:val/count"]
    1
    >>> summarize_record([
    ...     {"kind": "snapshot", "key": "enc", "step": 2, "ranks": {"rankme": 5.0,
    ...      "effective_rank": 4.0, "rows": 90, "dim": 8}},
    ...     {"kind": "snapshot", "key": "enc", "step": 4, "ranks": {"rankme": 6.0,
    ...      "effective_rank": 3.0, "rows": 90, "dim": 8}, "silhouette": {"column": "label",
    ...      "points": 90, "views": {"pca": 0.25}}}]).flat()["learnscope/rankme/enc/lowest"]
    5.0
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from learnscope.finding_codes import FINDING_CODES
from learnscope.hyperparameter_values import HyperValue, is_hyper_value
from learnscope.run_directory.endings import error_text

PREFIX = "learnscope"
MAX_SEPARATORS = 4  # W&B nests a summary key at each dot; learnscope's names stay this flat
MAX_TEXT = 200  # the longest text value of the flat summary (an exception, a subject)
COLLAPSE = "embedding-collapse"
OVERSMOOTHING = "oversmoothing"
NON_FINITE = ("non-finite-loss", "non-finite-gradient", "non-finite-output")
_STEP_KINDS = ("snapshot", "autocorrelation", "findings", "end")


@dataclass(frozen=True)
class FindingCount:
    """How many findings of one code the run's findings table holds.

    Attributes:
        code: The finding's code (:data:`~learnscope.finding_codes.FINDING_CODES`).
        holding: Those that still hold (found at the newest check that looked for them).
        seen: All of them, those no longer found included.
    """

    code: str
    holding: int
    seen: int


@dataclass(frozen=True)
class FirstFinding:
    """The finding first found in the run: its code, its subject and the step it was found."""

    code: str
    subject: str
    step: int


@dataclass(frozen=True)
class GroupAnalysis:
    """One parameter group at the newest analysis of its kind (``params`` or ``grads``).

    ``rho1_median`` and ``tau`` are ``None`` where the record holds ``null`` (NaN, or a tau that
    means nothing).
    """

    what: str
    group: str
    step: int
    rho1_median: float | None
    tau: float | None


@dataclass(frozen=True)
class KeySnapshots:
    """An embedding key's snapshots: how many the record holds, the newest one's step, its measures.

    Attributes:
        key: The embedding key (``tag/stage``).
        count: How many snapshots of the key the record holds.
        last_step: The newest snapshot's step.
        rankme_last: RankMe of the newest snapshot (the largest step; of equals the one
            written last); ``None`` when it has none (fewer than 2 rows, an older record).
        rankme_lowest: The lowest RankMe of the key's snapshots; ``None`` when none has one.
        effective_rank_last: The effective rank of the newest snapshot, as ``rankme_last``.
        effective_rank_lowest: The lowest effective rank, as ``rankme_lowest``.
        silhouette: ``(projection, silhouette)`` of each view of the newest snapshot (its label
            silhouette, see ``docs/run_record.md``), in the record's order; empty without one.
    """

    key: str
    count: int
    last_step: int
    rankme_last: float | None = None
    rankme_lowest: float | None = None
    effective_rank_last: float | None = None
    effective_rank_lowest: float | None = None
    silhouette: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class RunSummary:
    """A run at a glance (see :func:`summarize_record`).

    Attributes:
        status: ``running`` (no ``end`` entry after the newest ``run`` entry: the run goes on,
            or its process was killed), ``finished``, ``interrupted`` (Ctrl-C), ``failed``, or
            a newer learnscope's word as the record says it.
        error: A failed run's exception, ``type: message`` (its first line), else ``None``.
        last_step: The largest step of any entry, ``None`` before the first.
        findings: One count per code in the findings table, in the order first seen.
        first_finding: The finding with the smallest first step (the table's order between
            equals), ``None`` without findings.
        first_collapse_step: The first step an ``embedding-collapse`` was found, else ``None``.
        first_oversmoothing_step: The same for ``oversmoothing``.
        first_non_finite_step: The same for any ``non-finite-*`` finding.
        analyses: Each group of each kind at that kind's newest analysis, in the record's order.
        snapshots: Each embedding key's snapshots and their measures, in the order first
            written.
        hyperparameters: The newest ``run`` entry's hyper-parameters (flat: name to ``None``,
            bool, number or text), empty when it has none. Not in :meth:`flat`: a tracker
            keeps them apart (W&B's config, TensorBoard's HParams).
    """

    status: str = "running"
    error: str | None = None
    last_step: int | None = None
    findings: tuple[FindingCount, ...] = ()
    first_finding: FirstFinding | None = None
    first_collapse_step: int | None = None
    first_oversmoothing_step: int | None = None
    first_non_finite_step: int | None = None
    analyses: tuple[GroupAnalysis, ...] = ()
    snapshots: tuple[KeySnapshots, ...] = ()
    hyperparameters: Mapping[str, HyperValue] = field(default_factory=dict)

    def flat(self) -> dict[str, int | float | str]:
        """The summary as flat names and values (numbers or short text), for a run's summary.

        Every finding code gets its two counts, ``0`` when not found; a value the run does not
        have (no failure, no finding, a ``null`` tau) has no name. A group's or a key's name
        has its ``/`` and ``.`` written as ``:`` (``encoder/val`` is ``encoder:val``), so that
        every name has at most 4 separators.

        Raises:
            ValueError: When two groups or keys would get the same name (``a.b`` and ``a:b``).

        Example:
            >>> summary = RunSummary(status="failed", error="ValueError: bad", last_step=3,
            ...     analyses=(GroupAnalysis("params", "encoder.0", 3, 0.5, None),))
            >>> flat = summary.flat()
            >>> flat["learnscope/status"], flat["learnscope/error"]
            ('failed', 'ValueError: bad')
            >>> flat["learnscope/acf/params/encoder:0/rho1_median"]
            0.5
            >>> flat["learnscope/acf_step/params"]
            3
            >>> flat["learnscope/findings/oversmoothing"], "learnscope/first_finding/code" in flat
            (0, False)
        """
        flat: dict[str, int | float | str] = {f"{PREFIX}/status": _short(self.status)}
        if self.error is not None:
            flat[f"{PREFIX}/error"] = _short(self.error)
        if self.last_step is not None:
            flat[f"{PREFIX}/last_step"] = self.last_step
        counts = {code: FindingCount(code, 0, 0) for code in FINDING_CODES}
        counts.update({count.code: count for count in self.findings})
        for count in counts.values():
            flat[f"{PREFIX}/findings/{_part(count.code)}"] = count.holding
            flat[f"{PREFIX}/findings_seen/{_part(count.code)}"] = count.seen
        flat[f"{PREFIX}/finding_count"] = sum(c.holding for c in self.findings)
        flat[f"{PREFIX}/finding_count_seen"] = sum(c.seen for c in self.findings)
        if self.first_finding is not None:
            flat[f"{PREFIX}/first_finding/code"] = _short(self.first_finding.code)
            flat[f"{PREFIX}/first_finding/subject"] = _short(self.first_finding.subject)
            flat[f"{PREFIX}/first_finding/step"] = self.first_finding.step
        firsts = {
            "collapse": self.first_collapse_step,
            "oversmoothing": self.first_oversmoothing_step,
            "non-finite": self.first_non_finite_step,
        }
        for name, step in firsts.items():
            if step is not None:
                flat[f"{PREFIX}/first_step/{name}"] = step
        named: dict[str, str] = {}
        for group in self.analyses:
            base = f"{PREFIX}/acf/{_part(group.what)}/{_unique(named, group.what, group.group)}"
            flat[f"{PREFIX}/acf_step/{_part(group.what)}"] = group.step
            if group.rho1_median is not None:
                flat[f"{base}/rho1_median"] = group.rho1_median
            if group.tau is not None:
                flat[f"{base}/tau"] = group.tau
        for key in self.snapshots:
            part = _unique(named, "snapshots", key.key)
            flat[f"{PREFIX}/snapshots/{part}/count"] = key.count
            flat[f"{PREFIX}/snapshots/{part}/last_step"] = key.last_step
            measures = {
                f"rankme/{part}/last": key.rankme_last,
                f"rankme/{part}/lowest": key.rankme_lowest,
                f"effective_rank/{part}/last": key.effective_rank_last,
                f"effective_rank/{part}/lowest": key.effective_rank_lowest,
            }
            for projection, value in key.silhouette:
                view = _unique(named, f"silhouette/{part}", projection)
                measures[f"silhouette/{part}/{view}"] = value
            for name, value in measures.items():
                if value is not None:
                    flat[f"{PREFIX}/{name}"] = value
        return flat


class SummaryFold:
    """A :class:`RunSummary` kept as a record is written: :meth:`add` each entry, in order.

    :func:`summarize_record` is this fold over a whole record; a record's writer keeps one to
    say, at any time, what its record holds so far.

    Example:
        >>> fold = SummaryFold()
        >>> fold.add({"kind": "run"})
        >>> fold.summary().status
        'running'
        >>> fold.add({"kind": "end", "step": 5, "status": "finished"})
        >>> fold.summary().status, fold.summary().last_step
        ('finished', 5)
    """

    def __init__(self) -> None:
        self._status = "running"
        self._error: str | None = None
        self._last_step: int | None = None
        self._rows: list[Mapping[str, Any]] = []
        self._analyses: dict[str, tuple[GroupAnalysis, ...]] = {}
        self._snapshots: dict[str, KeySnapshots] = {}
        self._hyperparameters: dict[str, HyperValue] = {}

    def add(self, entry: Mapping[str, Any]) -> None:
        """Fold in the next entry of the record (one the summary cannot read changes nothing)."""
        kind = entry.get("kind")
        step = _whole(entry.get("step"))
        if kind in _STEP_KINDS and step is not None:
            self._last_step = step if self._last_step is None else max(self._last_step, step)
        if kind == "run":
            self._status, self._error = "running", None
            self._hyperparameters = _hyperparameters(entry.get("hyperparameters"))
        elif kind == "end" and isinstance(entry.get("status"), str):
            self._status = entry["status"]
            self._error = error_text(entry) if self._status == "failed" else None
        elif kind == "findings" and isinstance(entry.get("rows"), list):
            self._rows = [row for row in entry["rows"] if _finding_row(row)]
        elif kind == "autocorrelation" and step is not None:
            groups = _analysis(entry, step)
            if groups is not None:
                self._analyses[entry["what"]] = groups
        elif kind == "snapshot" and step is not None and isinstance(entry.get("key"), str):
            key = entry["key"]
            self._snapshots[key] = _with_snapshot(self._snapshots.get(key), key, step, entry)

    def state(self) -> dict[str, Any]:
        """What the fold holds, as JSON values: :meth:`from_state` folds on from it.

        Example:
            >>> fold = SummaryFold()
            >>> fold.add({"kind": "snapshot", "key": "enc", "step": 2})
            >>> again = SummaryFold.from_state(fold.state())
            >>> again.add({"kind": "end", "step": 3, "status": "finished"})
            >>> again.summary().snapshots[0].count, again.summary().last_step
            (1, 3)
        """
        return {
            "status": self._status,
            "error": self._error,
            "last_step": self._last_step,
            "rows": [{name: row.get(name) for name in _ROW_FIELDS} for row in self._rows],
            "analyses": {
                what: [[g.group, g.step, g.rho1_median, g.tau] for g in groups]
                for what, groups in self._analyses.items()
            },
            "snapshots": [
                [
                    k.key,
                    k.count,
                    k.last_step,
                    k.rankme_last,
                    k.rankme_lowest,
                    k.effective_rank_last,
                    k.effective_rank_lowest,
                    [list(view) for view in k.silhouette],
                ]
                for k in self._snapshots.values()
            ],
            "hyperparameters": dict(self._hyperparameters),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> SummaryFold:
        """The fold :meth:`state` described.

        Raises:
            ValueError: When ``state`` is not what :meth:`state` gives (a damaged file).
        """
        fold = cls()
        try:
            fold._status = _text(state["status"])
            fold._error = None if state["error"] is None else _text(state["error"])
            fold._last_step = _optional_whole(state["last_step"])
            fold._rows = [dict(row) for row in state["rows"] if _finding_row(row)]
            fold._analyses = {
                _text(what): tuple(
                    GroupAnalysis(
                        what, _text(g), _step(step), _optional_number(m), _optional_number(t)
                    )
                    for g, step, m, t in groups
                )
                for what, groups in state["analyses"].items()
            }
            for key, count, last, r_last, r_low, e_last, e_low, views in state["snapshots"]:
                fold._snapshots[_text(key)] = KeySnapshots(
                    key,
                    _step(count),
                    _step(last),
                    _optional_number(r_last),
                    _optional_number(r_low),
                    _optional_number(e_last),
                    _optional_number(e_low),
                    tuple((_text(p), float(_step_or_number(v))) for p, v in views),
                )
            fold._hyperparameters = _hyperparameters(state["hyperparameters"])
        except (KeyError, TypeError, AttributeError, ValueError) as error:
            raise ValueError(f"not a summary fold's state: {error!r}") from None
        return fold

    def summary(self) -> RunSummary:
        """The summary of the entries folded so far."""
        rows = self._rows
        return RunSummary(
            status=self._status,
            error=self._error,
            last_step=self._last_step,
            findings=_counts(rows),
            first_finding=_first(rows),
            first_collapse_step=_first_step(rows, (COLLAPSE,)),
            first_oversmoothing_step=_first_step(rows, (OVERSMOOTHING,)),
            first_non_finite_step=_first_step(rows, NON_FINITE),
            analyses=tuple(group for groups in self._analyses.values() for group in groups),
            snapshots=tuple(self._snapshots.values()),
            hyperparameters=dict(self._hyperparameters),
        )


def summarize_record(entries: Iterable[Mapping[str, Any]]) -> RunSummary:
    """Fold a run record's entries, in the order written, into a :class:`RunSummary`.

    Args:
        entries: The record's entries (:class:`~learnscope.run_directory.record.RecordReader`
            reads them), all of them.

    Example:
        >>> summarize_record([]).status
        'running'
        >>> summary = summarize_record([{"kind": "run"}, {"kind": "end", "step": 2,
        ...     "status": "failed", "error": {"type": "KeyError", "message": "'x'"}}])
        >>> summary.status, summary.error, summary.last_step
        ('failed', "KeyError: 'x'", 2)
    """
    fold = SummaryFold()
    for entry in entries:
        fold.add(entry)
    return fold.summary()


_ROW_FIELDS = ("code", "subject", "step", "first_step", "resolved_step")  # what a row's fold reads


def _text(value: Any) -> str:
    """``value`` when it is text (a state's), else ``ValueError``."""
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is no text")
    return value


def _step(value: Any) -> int:
    """``value`` when it is a whole number (a state's), else ``ValueError``."""
    if _whole(value) is None:
        raise ValueError(f"{value!r} is no whole number")
    return int(value)


def _optional_whole(value: Any) -> int | None:
    return None if value is None else _step(value)


def _optional_number(value: Any) -> float | None:
    """``None``, or ``value`` as a finite float (a state's), else ``ValueError``."""
    if value is None:
        return None
    return _step_or_number(value)


def _step_or_number(value: Any) -> float:
    number = _number(value)
    if number is None:
        raise ValueError(f"{value!r} is no finite number")
    return number


def _whole(value: Any) -> int | None:
    """``value`` when it is a whole number (not a boolean), else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    """``value`` as a finite float, else ``None``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _hyperparameters(given: Any) -> dict[str, HyperValue]:
    """A ``run`` entry's hyper-parameters: the readable ones (text name, plain value)."""
    if not isinstance(given, Mapping):
        return {}
    return {
        name: value
        for name, value in given.items()
        if isinstance(name, str) and is_hyper_value(value)
    }


def _finding_row(row: Any) -> bool:
    """Whether a findings row has what the summary reads: text code and subject, a step."""
    return (
        isinstance(row, Mapping)
        and isinstance(row.get("code"), str)
        and isinstance(row.get("subject"), str)
        and _whole(row.get("step")) is not None
    )


def _first_seen(row: Mapping[str, Any]) -> int:
    """A row's first step (its ``step`` in records written before ``first_step``)."""
    first = _whole(row.get("first_step"))
    return first if first is not None else row["step"]


def _counts(rows: list[Mapping[str, Any]]) -> tuple[FindingCount, ...]:
    holding: dict[str, int] = {}
    seen: dict[str, int] = {}
    for row in rows:
        seen[row["code"]] = seen.get(row["code"], 0) + 1
        holding[row["code"]] = holding.get(row["code"], 0) + (row.get("resolved_step") is None)
    return tuple(FindingCount(code, holding[code], seen[code]) for code in seen)


def _first(rows: list[Mapping[str, Any]]) -> FirstFinding | None:
    if not rows:
        return None
    row = min(rows, key=_first_seen)  # the first of equals in the table's order
    return FirstFinding(row["code"], row["subject"], _first_seen(row))


def _first_step(rows: list[Mapping[str, Any]], codes: tuple[str, ...]) -> int | None:
    steps = [_first_seen(row) for row in rows if row["code"] in codes]
    return min(steps) if steps else None


def _analysis(entry: Mapping[str, Any], step: int) -> tuple[GroupAnalysis, ...] | None:
    """An ``autocorrelation`` entry's groups, or ``None`` when it is damaged."""
    what, groups = entry.get("what"), entry.get("groups")
    if not isinstance(what, str) or not what or not isinstance(groups, list):
        return None
    medians, taus = entry.get("rho1_median"), entry.get("tau")  # missing or null: none
    medians = [None] * len(groups) if medians is None else medians
    taus = [None] * len(groups) if taus is None else taus
    if not all(isinstance(g, str) for g in groups):
        return None
    if not isinstance(medians, list) or not isinstance(taus, list):
        return None
    if len(medians) != len(groups) or len(taus) != len(groups):
        return None
    return tuple(
        GroupAnalysis(what, group, step, _number(median), _number(tau))
        for group, median, tau in zip(groups, medians, taus, strict=True)
    )


def _with_snapshot(
    before: KeySnapshots | None, key: str, step: int, entry: Mapping[str, Any]
) -> KeySnapshots:
    """A key's snapshots with one more, ``entry`` at ``step`` (its damaged measures left out)."""
    ranks, silhouette = _ranks(entry.get("ranks")), _silhouette(entry.get("silhouette"))
    rankme, effective = ranks if ranks is not None else (None, None)
    if before is None:
        return KeySnapshots(key, 1, step, rankme, rankme, effective, effective, silhouette)
    folded = replace(
        before,
        count=before.count + 1,
        last_step=max(before.last_step, step),
        rankme_lowest=_lowest(before.rankme_lowest, rankme),
        effective_rank_lowest=_lowest(before.effective_rank_lowest, effective),
    )
    if step < before.last_step:  # not the newest: its values count for the lowest only
        return folded
    return replace(  # of equal steps, the one written last is the newest
        folded, rankme_last=rankme, effective_rank_last=effective, silhouette=silhouette
    )


def _lowest(a: float | None, b: float | None) -> float | None:
    """The lower of two values, either of which may be missing."""
    return b if a is None else a if b is None else min(a, b)


def _ranks(ranks: Any) -> tuple[float, float] | None:
    """A snapshot's ``ranks`` as ``(rankme, effective_rank)``; ``None`` if missing or damaged."""
    if not isinstance(ranks, Mapping):
        return None
    rankme, effective = _number(ranks.get("rankme")), _number(ranks.get("effective_rank"))
    rows, dim = _whole(ranks.get("rows")), _whole(ranks.get("dim"))
    if rankme is None or effective is None or rows is None or dim is None:
        return None
    if rankme <= 0 or effective <= 0 or rows < 2 or dim < 1:
        return None
    return rankme, effective


def _silhouette(silhouette: Any) -> tuple[tuple[str, float], ...]:
    """A snapshot's ``silhouette`` views as ``(projection, value)``; empty if missing or damaged."""
    if not isinstance(silhouette, Mapping) or not isinstance(silhouette.get("column"), str):
        return ()
    points, views = _whole(silhouette.get("points")), silhouette.get("views")
    if points is None or points < 2 or not isinstance(views, Mapping):
        return ()
    measured = []
    for projection, value in views.items():
        number = _number(value)
        if not isinstance(projection, str) or number is None or not -1 <= number <= 1:
            return ()
        measured.append((projection, number))
    return tuple(measured)


def _part(name: str) -> str:
    """A name as one part of a flat name: its separators (``/``, ``.``) written ``:``."""
    return name.replace("/", ":").replace(".", ":")


def _unique(named: dict[str, str], space: str, name: str) -> str:
    """``name`` as a part (:func:`_part`), checked unique within ``space``.

    Raises:
        ValueError: When another name of ``space`` has the same part.
    """
    part = _part(name)
    other = named.setdefault(f"{space}/{part}", name)
    if other != name:
        raise ValueError(f"{other!r} and {name!r} would share the summary name {part!r}")
    return part


def _short(text: str) -> str:
    """``text`` cut to :data:`MAX_TEXT` characters (the cut said by ``...``)."""
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."
