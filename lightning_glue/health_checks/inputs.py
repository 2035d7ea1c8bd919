"""The input checks of a check step's first batch, as findings."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from learnscope.records import Finding


def input_findings(checks: Sequence[Callable[..., Any]], batch: Any, step: int) -> list[Finding]:
    """Run each check ``batch -> str | None``; a message is an ``input-range`` finding.

    The finding is about the check's ``subject`` attribute, else its name.

    Args:
        checks: Callables such as :class:`~learnscope.health.CoordinateRangeCheck`.
        batch: The training batch.
        step: The global step, for the findings.

    Returns:
        One finding per check that returned a message.

    Example:
        >>> def positive(batch):
        ...     return None if min(batch) > 0 else "not all positive"
        >>> [(f.code, f.subject, f.message) for f in input_findings([positive], [1, -2], 0)]
        [('input-range', 'positive', 'not all positive')]
    """
    findings = []
    for check in checks:
        message = check(batch)
        if message:
            subject = getattr(check, "subject", None) or getattr(
                check, "__name__", type(check).__name__
            )
            findings.append(Finding("input-range", str(subject), message, step))
    return findings
