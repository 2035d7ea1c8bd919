"""Checks of run-record entries for the views: each returns a field or says what is wrong.

A view folds entries written by any learnscope (or by hand, following ``docs/run_record.md``);
an entry that fails a check raises :class:`DamagedEntry`, whose message says what is wrong,
and the view skips it and names it. Nothing here imports torch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from learnscope.embeddings.scatter_frame import MAX_CATEGORIES
from learnscope.run_directory.record import decode_array


class DamagedEntry(ValueError):
    """An entry of the record that cannot be shown; the message says what is wrong with it."""


def describe_entry(entry: Mapping[str, Any]) -> str:
    """An entry named for a message: its kind, key or kind of series, and step.

    Example:
        >>> describe_entry({"kind": "snapshot", "key": "enc", "step": 3})
        'snapshot enc at step 3'
    """
    parts = [str(entry.get("kind"))]
    for name in ("key", "what"):
        if isinstance(entry.get(name), str):
            parts.append(entry[name])
    if entry.get("step") is not None:
        parts.append(f"at step {entry['step']!r}")
    return " ".join(parts)


def is_number(value: Any) -> bool:
    """Whether ``value`` is an int or a float (not a bool).

    Example:
        >>> is_number(2.5), is_number(True), is_number("2")
        (True, False, False)
    """
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def whole_number(entry: Mapping[str, Any], name: str) -> int:
    """The field ``name`` of ``entry``, a whole number.

    Example:
        >>> try:
        ...     whole_number({"step": "3"}, "step")
        ... except DamagedEntry as error:
        ...     print(error)
        step is '3', not a whole number
    """
    value = entry.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise DamagedEntry(f"{name} is {value!r}, not a whole number")
    return value


def list_field(entry: Mapping[str, Any], name: str, required: bool = True) -> list[Any]:
    """The field ``name`` of ``entry``, a list (``[]`` when absent and not ``required``).

    Example:
        >>> list_field({}, "columns", required=False)
        []
    """
    value = entry.get(name)
    if value is None and not required:
        return []
    if not isinstance(value, list):
        raise DamagedEntry(f"{name} is not a list")
    return value


def array_field(entry: Mapping[str, Any], name: str) -> np.ndarray:
    """The field ``name`` of ``entry``, an array encoded as the record encodes arrays.

    Example:
        >>> from learnscope.run_directory.record import encode_array
        >>> array_field({"xy": encode_array(np.zeros((2, 2), np.float32))}, "xy").shape
        (2, 2)
    """
    value = entry.get(name)
    if not isinstance(value, Mapping):
        raise DamagedEntry(f"{name} is not an array")
    try:
        return decode_array(value)
    except (ValueError, TypeError) as error:
        raise DamagedEntry(f"{name}: {error}") from None


def rounded(value: Any, digits: int = 4) -> float | None:
    """``value`` rounded to ``digits``, or ``None`` when it is no finite number.

    Example:
        >>> rounded(0.123456), rounded(float("nan"))
        (0.1235, None)
    """
    if not is_number(value) or not math.isfinite(value):
        return None
    return round(float(value), digits)


def finding_row(row: Any) -> dict[str, Any]:
    """A row of a findings table, checked: what was found, when, and what to try.

    ``code``, ``subject``, ``message`` and ``severity`` are text; ``step`` (when it was last
    seen) a whole number; ``first_step`` (when it was first seen) a whole number no larger than
    ``step``; ``resolved_step`` (the first check at which it was no longer found) ``None``
    while it still holds, else a whole number larger than ``step``; ``advice`` (what to try)
    text. A row written before these came (issue 37) has none of the last three: it was first
    seen at its step, still holds, and has no advice (``""``).

    Example:
        >>> row = finding_row({"severity": "warning", "code": "c", "subject": "s",
        ...                    "message": "m", "step": 3})
        >>> row["first_step"], row["resolved_step"], row["advice"]
        (3, None, '')
        >>> try:
        ...     finding_row({**row, "first_step": 0, "resolved_step": 2})
        ... except DamagedEntry as error:
        ...     print(error)
        a row of its table has resolved_step 2, not after its step 3
    """
    if not isinstance(row, Mapping):
        raise DamagedEntry("a row of its table is not an object")
    out: dict[str, Any] = {}
    for name in ("severity", "code", "subject", "message"):
        if not isinstance(row.get(name), str):
            raise DamagedEntry(f"a row of its table has no text {name!r}")
        out[name] = row[name]
    step = _row_step(row, "step")
    first = _row_step(row, "first_step") if row.get("first_step") is not None else step
    resolved = _row_step(row, "resolved_step") if row.get("resolved_step") is not None else None
    if first > step:
        raise DamagedEntry(f"a row of its table has first_step {first}, after its step {step}")
    if resolved is not None and resolved <= step:
        raise DamagedEntry(
            f"a row of its table has resolved_step {resolved}, not after its step {step}"
        )
    advice = row.get("advice")
    if advice is not None and not isinstance(advice, str):
        raise DamagedEntry(f"a row of its table has advice {advice!r}, not text")
    return {
        "code": out["code"],
        "subject": out["subject"],
        "message": out["message"],
        "step": step,
        "severity": out["severity"],
        "first_step": first,
        "resolved_step": resolved,
        "advice": advice or "",
    }


def _row_step(row: Mapping[str, Any], name: str) -> int:
    """The step ``name`` of a findings row, a whole number."""
    value = row.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise DamagedEntry(f"a row of its table has {name} {value!r}, not a whole number")
    return value


def typed_column(column: Any, points: int, rows: Sequence[int] | np.ndarray) -> dict[str, Any]:
    """A typed metadata column of the record, at ``rows`` (checked against ``points``).

    Example:
        >>> from learnscope.run_directory.record import encode_array
        >>> column = {"name": "label", "kind": "categorical", "categories": ["a", "b"],
        ...           "codes": encode_array(np.array([1, 0, 1]), "<i4")}
        >>> typed_column(column, 3, [2, 1])["codes"]
        [1, 0]
    """
    if not isinstance(column, Mapping) or not isinstance(column.get("name"), str):
        raise DamagedEntry("a column has no name")
    name, kind = column["name"], column.get("kind")
    if kind == "categorical":
        categories = list_field(column, "categories")
        codes = array_field(column, "codes")
        if codes.shape != (points,) or not np.issubdtype(codes.dtype, np.integer):
            raise DamagedEntry(f"column {name!r}: codes are not {points} whole numbers")
        codes = codes.astype(np.int64)
        codes[(codes < 0) | (codes >= len(categories))] = -1  # no category: "other"
        counts = np.bincount(codes[codes >= 0], minlength=len(categories))
        frequent = sorted(range(len(categories)), key=lambda i: (-counts[i], i))
        return {
            "name": name,
            "kind": "categorical",
            "categories": [c if isinstance(c, str) else json.dumps(c) for c in categories],
            "codes": codes[np.asarray(rows, np.int64)].tolist(),
            "coloured": sorted(frequent[:MAX_CATEGORIES]),  # as the Images-tab picture
        }
    if kind == "numeric":
        values = array_field(column, "values")
        if values.shape != (points,) or not np.issubdtype(values.dtype, np.number):
            raise DamagedEntry(f"column {name!r}: values are not {points} numbers")
        picked = values[np.asarray(rows, np.int64)].astype(np.float64)
        return {"name": name, "kind": "numeric", "values": [rounded(v, 6) for v in picked]}
    raise DamagedEntry(f"column {name!r} is of kind {kind!r}, not categorical or numeric")


def sprite_fields(sprite: Any) -> tuple[str, int, int, int]:
    """``(path, width, height, per_row)`` of a snapshot's ``sprite`` field.

    Example:
        >>> sprite_fields({"path": "s.png", "cell": [28, 28], "per_row": 10})
        ('s.png', 28, 28, 10)
    """
    if not isinstance(sprite, Mapping) or not isinstance(sprite.get("path"), str):
        raise DamagedEntry("sprite has no path")
    cell = sprite.get("cell")
    sizes = [
        *(cell if isinstance(cell, list) and len(cell) == 2 else [None]),
        sprite.get("per_row"),
    ]
    if len(sizes) != 3 or not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes
    ):
        raise DamagedEntry(f"sprite cell {cell!r} and per_row are not positive whole numbers")
    return sprite["path"], sizes[0], sizes[1], sizes[2]
