"""The input checks of a check step's first batch, as findings."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from learnscope.records import Finding
from learnscope.user_functions import calling, describe


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
        subject = getattr(check, "subject", None) or getattr(
            check, "__name__", type(check).__name__
        )
        with calling(f"the input check {subject!s}", "TrainingHelper", batch):
            message = check(batch)
        if message is not None and not isinstance(message, str):
            raise TypeError(
                f"TrainingHelper: the input check {subject!s} got {describe(message)} from a "
                f"batch of type {type(batch).__name__}; it must return a message (str) when "
                "the batch looks wrong, else None"
            )
        if message:
            findings.append(Finding("input-range", str(subject), message, step))
    return findings
