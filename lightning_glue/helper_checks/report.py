"""FindingReport: the findings of a fit, on the ``learnscope`` logger and in the dashboards."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from learnscope.health import CheckScope, FindingLog
from learnscope.records import STATE_CODES, Finding, Histogram

log = logging.getLogger("learnscope")


@dataclass(frozen=True)
class CheckReport:
    """What a check found: findings to report, and scalars (and a histogram) to write.

    ``scope`` says what the check judged: a finding it covers and did not find again no longer
    holds (``None``: it judged nothing that can be resolved).

    Example:
        >>> CheckReport([Finding("non-finite-loss", "loss", "loss is nan", 3)], {}).non_finite
        True
    """

    findings: list[Finding]
    scalars: dict[str, float]
    histogram: Histogram | None = None
    scope: CheckScope | None = None

    def on_starting_weights(self) -> CheckReport:
        """This report as given on the weights a fit starts with: no verdict on the model's state.

        Findings of :data:`~learnscope.records.STATE_CODES` (collapse, oversmoothing, heads,
        vanishing gradients) are left out, and judge nothing; the scalars stay.

        Example:
            >>> found = Finding("embedding-collapse", "encoder", "all parallel", 0)
            >>> CheckReport([found], {"cosine_spread": 0.004}).on_starting_weights().findings
            []
        """
        scope = self.scope
        if scope is not None:
            scope = CheckScope(scope.codes - STATE_CODES, scope.subjects)
        kept = [finding for finding in self.findings if finding.code not in STATE_CODES]
        return dataclasses.replace(self, findings=kept, scope=scope)

    @property
    def non_finite(self) -> bool:
        """Whether a gradient or the loss was not finite (then the next step is traced)."""
        return any(f.code in ("non-finite-gradient", "non-finite-loss") for f in self.findings)


class FindingReport:
    """The findings table of a fit, with each finding's life, logged when found or due again.

    Warnings and errors go to the ``learnscope`` logger at warning level, ``info`` findings at
    info level, each (code, subject) at most once per ``warn_every_n_steps`` (unused
    parameters once: see :class:`~learnscope.health.FindingLog`), with what to try; a finding
    that a later check no longer finds is said at info level.

    Only rank zero reports: elsewhere (``rank_zero`` false) :meth:`add` does nothing.

    Args:
        warn_every_n_steps: Fewest steps between two warnings about the same (code, subject).

    Example:
        >>> report = FindingReport(warn_every_n_steps=100)
        >>> report.add([Finding("zero-gradient", "encoder.0", "gradient is zero", 0)], 0)
        >>> [f.code for f in report.findings], report.take_new(), report.take_new()
        (['zero-gradient'], True, False)
        >>> report.add([], 50, CheckScope.of(["zero-gradient"]))
        >>> [f.life for f in report.findings], report.take_new()
        (['seen at step 0 only; healthy at every check since step 50'], True)
    """

    def __init__(self, warn_every_n_steps: int) -> None:
        self._log = FindingLog(warn_every_n_steps)
        self._new = False  # findings were added since the dashboards last got the table
        self._said: set[str] = set()  # messages given by warn_once
        self.rank_zero = True

    @property
    def findings(self) -> list[Finding]:
        """Every finding so far, one per (code, subject)."""
        return self._log.findings

    def warn_once(self, message: str, rank_zero: bool) -> None:
        """Log ``message`` at warning level, the first time it is given, on rank zero only."""
        if rank_zero and message not in self._said:
            self._said.add(message)
            log.warning(message)

    def restart(self) -> None:
        """Start an empty table, as a new fit does."""
        self._log = FindingLog(self._log.warn_every_n_steps, self._log.once_codes)

    def add(self, findings: Sequence[Finding], step: int, scope: CheckScope | None = None) -> None:
        """Fold in what the check at ``step`` found, logging what is due (on rank zero only).

        Args:
            findings: What the check found.
            step: The check's step.
            scope: What it judged (see :class:`~learnscope.health.CheckScope`).
        """
        if not self.rank_zero:
            return
        observed = self._log.observe(findings, step, scope)
        self._new = self._new or observed.changed
        for finding in observed.due:
            log.log(
                logging.INFO if finding.severity == "info" else logging.WARNING,
                "learnscope: %s %s: %s (step %d). Try: %s",
                finding.code,
                finding.subject,
                finding.message,
                finding.step,
                finding.advice,
            )
        for finding in observed.resolved:
            log.info(
                "learnscope: %s %s no longer holds at step %d (%s)",
                finding.code,
                finding.subject,
                step,
                finding.life,
            )

    def take_new(self) -> bool:
        """Whether findings were added since the last call."""
        new, self._new = self._new, False
        return new

    def state_dict(self) -> dict[str, Any]:
        """The table and when each finding was last warned about."""
        return self._log.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the table of :meth:`state_dict`."""
        self._log.load_state_dict(state)
