"""A run's findings as the views show them: those that still hold first, each with its life.

The newest ``findings`` entry of the record is the run's table: one row per finding, checked by
:func:`~learnscope.plugins.views.record_checks.finding_row` (``first_step``, ``step``,
``resolved_step``, ``advice``; older rows read as first seen at their step, still holding,
without advice). A view shows the findings that still hold apart from those no longer seen, and
counts only the first: a finding seen once, before training, and healthy at every check since
is no headline. Each row gets its life in words (:func:`life`), the same in every view and in
the logs and dashboards (:func:`~learnscope.finding_codes.finding_life`).
Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from learnscope.finding_codes import finding_life


def life(row: Mapping[str, Any]) -> str:
    """A checked findings row's life in words (:func:`~learnscope.finding_codes.finding_life`).

    Example:
        >>> life({"first_step": 0, "step": 0, "resolved_step": 50})
        'seen at step 0 only; healthy at every check since step 50'
    """
    return finding_life(row["first_step"], row["step"], row["resolved_step"])


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
    shown = [{**row, "holds": row["resolved_step"] is None, "life": life(row)} for row in rows]
    return [row for row in shown if row["holds"]] + [row for row in shown if not row["holds"]]
