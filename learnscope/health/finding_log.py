"""One finding per (code, subject), and when each is due a warning."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from learnscope.records import Finding


class FindingLog:
    """The findings of a run, one per (code, subject), and when each is due a warning.

    A finding is due when its (code, subject) was never warned about, or was last warned about
    at least ``warn_every_n_steps`` steps before; codes in ``once_codes`` are warned about once
    per run. The table (:attr:`findings`) keeps the latest warned form of each. The state goes
    into checkpoints with :meth:`state_dict`.

    Args:
        warn_every_n_steps: Fewest steps between two warnings about the same thing.
        once_codes: Codes warned about once only.

    Raises:
        ValueError: ``warn_every_n_steps`` is below 1.

    Example:
        >>> log = FindingLog(warn_every_n_steps=100)
        >>> [log.add(Finding("zero-gradient", "head", "zero", step)) for step in (0, 50, 100)]
        [True, False, True]
        >>> [f.step for f in log.findings]
        [100]
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

    def add(self, finding: Finding) -> bool:
        """Record ``finding`` when it is due; return whether it is (whether to warn now).

        Example:
            >>> log = FindingLog()
            >>> finding = Finding("unused-parameter", "spare", "no gradient", 0)
            >>> log.add(finding), log.add(finding)
            (True, False)
        """
        key = finding.identity
        last = self._last_warned.get(key)
        due = last is None or (
            finding.code not in self.once_codes and finding.step - last >= self.warn_every_n_steps
        )
        if due:
            self._table[key] = finding
            self._last_warned[key] = finding.step
        return due

    def state_dict(self) -> dict[str, Any]:
        """The table and the last warning steps, as plain Python values.

        Example:
            >>> log = FindingLog()
            >>> _ = log.add(Finding("zero-gradient", "head", "zero", 7))
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
        """Restore what :meth:`state_dict` returned.

        Example:
            >>> log = FindingLog()
            >>> log.load_state_dict({"findings": [], "last_warned": []})
            >>> log.findings
            []
        """
        table = [Finding(**f) for f in state.get("findings", [])]
        self._table = {f.identity: f for f in table}
        self._last_warned = {(c, s): int(step) for c, s, step in state.get("last_warned", [])}
