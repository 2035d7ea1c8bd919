"""The findings of a run with their lives, and when each is due a warning."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from learnscope.records import Finding


@dataclass(frozen=True)
class CheckScope:
    """What one check judged: the codes it can give, about which subjects.

    A finding in the table that the scope covers and that the check did not find again is
    healthy at that check: it no longer holds.

    Args:
        codes: The finding codes the check judged.
        subjects: The subjects it judged them on; ``None`` for every subject.

    Example:
        >>> scope = CheckScope.of(["embedding-collapse"], ["encoder"])
        >>> scope.covers(Finding("embedding-collapse", "encoder", "low rank", 0))
        True
        >>> scope.covers(Finding("embedding-collapse", "decoder", "low rank", 0))
        False
    """

    codes: frozenset[str]
    subjects: frozenset[str] | None = None

    @classmethod
    def of(cls, codes: Iterable[str], subjects: Iterable[str] | None = None) -> CheckScope:
        """A scope from any iterables of codes and subjects (``None``: every subject)."""
        return cls(frozenset(codes), None if subjects is None else frozenset(subjects))

    def covers(self, finding: Finding) -> bool:
        """Whether the check judged ``finding``'s code on its subject."""
        in_subjects = self.subjects is None or finding.subject in self.subjects
        return finding.code in self.codes and in_subjects


class Observed(NamedTuple):
    """What one check changed in the table of a :class:`FindingLog`.

    Attributes:
        due: The findings due a warning now.
        news: The findings that entered the table, or hold again after being resolved.
        resolved: The findings that no longer hold since this check.
    """

    due: list[Finding]
    news: list[Finding]
    resolved: list[Finding]

    @property
    def changed(self) -> bool:
        """Whether the table changed in a way its readers must see.

        Example:
            >>> Observed([], [], []).changed
            False
        """
        return bool(self.due or self.news or self.resolved)


class FindingLog:
    """The findings of a run, one per (code, subject) with its life, and when each is due a warning.

    :meth:`observe` folds in what one check found: a new finding enters the table, one seen
    before is updated (keeping when it was first seen), and one that the check's
    :class:`CheckScope` covers but did not find no longer holds (its ``resolved_step`` is the
    check's step) until it is found again. A finding is due a warning when its (code, subject)
    was never warned about, or was last warned about at least ``warn_every_n_steps`` steps
    before; codes in ``once_codes`` are warned about once per run. The state goes into
    checkpoints with :meth:`state_dict`.

    Args:
        warn_every_n_steps: Fewest steps between two warnings about the same thing.
        once_codes: Codes warned about once only.

    Raises:
        ValueError: ``warn_every_n_steps`` is below 1.

    Example:
        >>> log = FindingLog(warn_every_n_steps=100)
        >>> scope = CheckScope.of(["zero-gradient"])
        >>> [len(log.observe([Finding("zero-gradient", "head", "zero", s)], s, scope).due)
        ...  for s in (0, 50, 100)]
        [1, 0, 1]
        >>> _ = log.observe([], 150, scope)
        >>> [f.life for f in log.findings]
        ['seen at steps 0-100; healthy at every check since step 150']
    """

    def __init__(
        self, warn_every_n_steps: int = 1000, once_codes: Sequence[str] = ("unused-parameter",)
    ) -> None:
        if warn_every_n_steps < 1:
            raise ValueError(f"warn_every_n_steps must be at least 1, got {warn_every_n_steps}")
        self.warn_every_n_steps = warn_every_n_steps
        self.once_codes = tuple(once_codes)
        self._table: dict[tuple[str, str], Finding] = {}
        self._last_warned: dict[tuple[str, str], int] = {}

    @property
    def findings(self) -> list[Finding]:
        """The table: one finding per (code, subject), in the order they first appeared.

        Example:
            >>> FindingLog().findings
            []
        """
        return list(self._table.values())

    def observe(
        self, findings: Sequence[Finding], step: int, scope: CheckScope | None = None
    ) -> Observed:
        """Fold in what the check at ``step`` found; say what changed.

        Args:
            findings: What the check found.
            step: The check's step.
            scope: What it judged (``None``: an event, which resolves nothing).

        Example:
            >>> log = FindingLog()
            >>> finding = Finding("unused-parameter", "spare", "no gradient", 0)
            >>> [len(part) for part in log.observe([finding], 0)]
            [1, 1, 0]
            >>> [len(part) for part in log.observe([finding], 5)]  # warned once only
            [0, 0, 0]
        """
        new_keys = [f.identity for f in findings if not self._holds(f.identity)]
        due = [self._table[f.identity] for f in findings if self._seen(f)]
        news = [self._table[key] for key in new_keys]
        found = {finding.identity for finding in findings}
        resolved = []
        for key, held in self._table.items():
            covered = scope is not None and scope.covers(held)
            if covered and held.holds and key not in found and step > held.step:
                resolved.append(held.resolved_at(step))
        for finding in resolved:
            self._table[finding.identity] = finding
        return Observed(due, news, resolved)

    def _holds(self, key: tuple[str, str]) -> bool:
        held = self._table.get(key)
        return held is not None and held.holds

    def _seen(self, finding: Finding) -> bool:
        """Put ``finding`` in the table; whether it is due a warning.

        The table keeps the message last warned about (the first, for a non-finite value, names
        where it started) with the steps of the newest.
        """
        key = finding.identity
        held = self._table.get(key)
        last = self._last_warned.get(key)
        due = last is None or (
            finding.code not in self.once_codes and finding.step - last >= self.warn_every_n_steps
        )
        if due:
            self._last_warned[key] = finding.step
        if held is None:
            self._table[key] = finding
        else:
            self._table[key] = held.seen_again(finding if due else held, finding.step)
        return due

    def state_dict(self) -> dict[str, Any]:
        """The table and the last warning steps, as plain Python values.

        Example:
            >>> log = FindingLog()
            >>> _ = log.observe([Finding("zero-gradient", "head", "zero", 7)], 7)
            >>> restored = FindingLog()
            >>> restored.load_state_dict(log.state_dict())
            >>> restored.findings == log.findings
            True
        """
        return {
            "findings": [asdict(f) for f in self._table.values()],
            "last_warned": [[c, s, step] for (c, s), step in self._last_warned.items()],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (a table saved before lives were kept, too).

        Example:
            >>> log = FindingLog()
            >>> log.load_state_dict({"findings": [], "last_warned": []})
            >>> log.findings
            []
        """
        table = [Finding(**f) for f in state.get("findings", [])]
        self._table = {f.identity: f for f in table}
        self._last_warned = {(c, s): int(step) for c, s, step in state.get("last_warned", [])}
