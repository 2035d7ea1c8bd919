"""The comparisons a page holds: one for each pair of snapshots the step cursor can show.

The comparison of two runs follows the page's step cursor: at cursor step ``s`` each run shows
its newest snapshot at or before ``s`` (its first when none is that early:
:func:`~learnscope.plugins.views.compare_runs.shown_step`). The tab asks its server at each
step; a page that opens offline (``learnscope export --compare``) holds the answers. The pair
shown changes only at the two runs' snapshot steps (:func:`cursor_pairs`), so a page holds one
comparison per pair: every one when they fit its share of :data:`COMPARE_PAGE_BYTES`, else
evenly spaced ones, the first and the newest kept, and a note that says so
(:func:`held_comparisons`); at a step between them the page shows the newest it holds at or
before the cursor. Everything here is numpy: nothing imports torch.

Example:
    >>> cursor_pairs([20, 40, 60], [30, 60])
    [(20, 20, 30), (40, 40, 30), (60, 60, 60)]
"""

from __future__ import annotations

import json
from typing import Any

from learnscope.plugins.views.compare_runs import RunSnapshots, compare_runs, shown_step

# The most bytes of comparisons (JSON) an exported page holds, shared by its tags: a page of
# views is a few MB; 540 points (the demo) take 31 KB a step, 5,000 points about 0.16 MB.
# ``learnscope export --compare-mb`` sets it.
COMPARE_PAGE_BYTES = 16 << 20


def cursor_pairs(steps_a: list[int], steps_b: list[int]) -> list[tuple[int, int, int]]:
    """The pairs of snapshots the step cursor shows, in cursor order: ``(from, step_a, step_b)``.

    ``from`` is the first cursor step that shows the pair (the first pair shows before it
    too); each run's step is :func:`~learnscope.plugins.views.compare_runs.shown_step` of its
    ascending ``steps``. Empty when one run has no step.

    Example:
        >>> cursor_pairs([10, 20], [10, 20])
        [(10, 10, 10), (20, 20, 20)]
        >>> cursor_pairs([10, 20], [])
        []
    """
    pairs: list[tuple[int, int, int]] = []
    if not steps_a or not steps_b:
        return pairs
    for at in sorted({*steps_a, *steps_b}):
        pair = (shown_step(steps_a, at), shown_step(steps_b, at))
        if not pairs or pairs[-1][1:] != pair:
            pairs.append((at, *pair))  # type: ignore[arg-type]
    return pairs


def evenly_spaced(count: int, most: int) -> list[int]:
    """At most ``most`` of the indices ``0 .. count - 1``, evenly spaced.

    The last is always kept, the first too when ``most`` is at least 2.

    Example:
        >>> evenly_spaced(10, 4), evenly_spaced(10, 1), evenly_spaced(3, 5)
        ([0, 3, 6, 9], [9], [0, 1, 2])
    """
    if most >= count:
        return list(range(count))
    if most <= 1:
        return [count - 1]
    return sorted({round(i * (count - 1) / (most - 1)) for i in range(most)})


def held_comparisons(
    a: RunSnapshots, b: RunSnapshots, key: str, key_b: str, budget: int = COMPARE_PAGE_BYTES
) -> dict[str, Any]:
    """Run ``a``'s ``key`` beside ``b``'s ``key_b`` at each pair of snapshots, as a page holds them.

    The pairs are :func:`cursor_pairs` of the two runs (their records read already). The
    newest pair is compared first; its JSON size says how many fit ``budget`` bytes; when not
    all do, evenly spaced ones are compared (the first and the newest kept) and ``note`` says
    so.

    Returns:
        ``held`` (the comparisons, in cursor order: the last is the newest pair), ``from``
        (the first cursor step that shows each), ``pairs`` (how many the cursor can show) and
        ``note`` (``None`` when every pair is held).

    Example:
        >>> import tempfile
        >>> a, b = RunSnapshots(tempfile.mkdtemp(), "a"), RunSnapshots(tempfile.mkdtemp(), "b")
        >>> held = held_comparisons(a, b, "enc", "enc")
        >>> held["pairs"], held["held"][0]["messages"][0]
        (0, 'run a has no snapshot of enc (keys: none)')
    """
    pairs = cursor_pairs(a.steps(key), b.steps(key_b))
    if not pairs:  # a run without the key: the comparison says so
        return {
            "held": [compare_runs(a, b, key, key_b=key_b, refresh=False)],
            "from": [0],
            "pairs": 0,
            "note": None,
        }
    newest = compare_runs(a, b, key, *pairs[-1][1:], key_b=key_b, refresh=False)
    size = len(json.dumps(newest, separators=(",", ":")))
    chosen = evenly_spaced(len(pairs), max(1, budget // max(size, 1)))
    held = [compare_runs(a, b, key, *pairs[i][1:], key_b=key_b, refresh=False) for i in chosen[:-1]]
    note = None
    if len(chosen) < len(pairs):
        note = (
            f"this page holds the comparison at {len(chosen)} of the {len(pairs)} pairs of "
            f"snapshots the step cursor can show (all of them would take about "
            f"{size * len(pairs) / 2**20:.0f} MB, more than the {budget / 2**20:.1f} MB a page "
            "gives this tag's comparisons): between them it shows the newest it holds at or "
            "before the cursor's step. The learnscope tab in TensorBoard compares at every step."
        )
    return {
        "held": [*held, newest],
        "from": [pairs[i][0] for i in chosen],
        "pairs": len(pairs),
        "note": note,
    }
