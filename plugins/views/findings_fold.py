"""A run's findings as the views show them: those that still hold first, each with its life.

The newest ``findings`` entry of the record is the run's table: one row per finding, checked by
:func:`~learnscope.plugins.views.record_checks.finding_row` (``first_step``, ``step``,
``resolved_step``, ``advice``; older rows read as first seen at their step, still holding,
without advice). A view shows the findings that still hold apart from those no longer seen, and
counts only the first: a finding seen once, before training, and healthy at every check since
is no headline. Each row gets its life in words (:func:`finding_life`), the same in every view.
Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def steps_seen(row: Mapping[str, Any]) -> str:
    """When a finding was seen: ``step 50``, or ``steps 50-300`` from its first to its last.

    Example:
        >>> steps_seen({"first_step": 50, "step": 300}), steps_seen({"first_step": 4, "step": 4})
        ('steps 50-300', 'step 4')
    """
    first, last = row["first_step"], row["step"]
    return f"step {last}" if first == last else f"steps {first}-{last}"


def finding_life(row: Mapping[str, Any]) -> str:
    """A finding's life in words: when it was seen, and whether it still holds.

    Args:
        row: A checked findings row (``first_step``, ``step``, ``resolved_step``).

    Example:
        >>> finding_life({"first_step": 50, "step": 300, "resolved_step": None})
        'found at steps 50-300; still holds'
        >>> finding_life({"first_step": 0, "step": 0, "resolved_step": 50})
        'seen at step 0 only; healthy at every check since step 50'
    """
    resolved = row["resolved_step"]
    if resolved is None:
        return f"found at {steps_seen(row)}; still holds"
    only = " only" if row["first_step"] == row["step"] else ""
    return f"seen at {steps_seen(row)}{only}; healthy at every check since step {resolved}"


def findings_view(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows of a findings table as a view shows them: those that still hold first.

    Each row keeps its fields and gets ``holds`` (whether it was found at the newest check
    that looked for it: no ``resolved_step``) and ``life`` (:func:`finding_life`); within each
    part the table's order (the order the findings were first seen) is kept.

    Example:
        >>> rows = [{"first_step": 0, "step": 0, "resolved_step": 50},
        ...         {"first_step": 50, "step": 50, "resolved_step": None}]
        >>> [(r["holds"], r["life"]) for r in findings_view(rows)]
        [(True, 'found at step 50; still holds'), \
(False, 'seen at step 0 only; healthy at every check since step 50')]
    """
    shown = [
        {**row, "holds": row["resolved_step"] is None, "life": finding_life(row)} for row in rows
    ]
    return [row for row in shown if row["holds"]] + [row for row in shown if not row["holds"]]
