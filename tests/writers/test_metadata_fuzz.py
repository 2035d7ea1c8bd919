"""Metadata TSV against the projector front end's own parsing rule, on hostile values.

The front end (``vz_projector/data-provider.ts``: ``streamParse`` and ``parseMetadata``) reads
the file in 1,000,000-byte chunks, decodes each chunk on its own with ``FileReader.readAsText``
(UTF-8, a leading byte order mark dropped, bad bytes replaced), splits on ``"\\n"`` only, skips
every line whose JavaScript ``trim()`` is empty, takes the first kept line as the header when it
holds a tab, splits rows on tabs and stores each cell in a plain object under its column name
(so a repeated name keeps only its last cell, and ``"__proto__"`` stores nothing).
:func:`front_end_parse` applies exactly that rule in Python.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from learnscope import EmbeddingSnapshot
from learnscope.plugins.tensorboard.projector_files import metadata_tsv
from learnscope.plugins.tensorboard.writer import TensorBoardWriter
from tests.kit.readers import ProjectorReader

# ECMAScript WhiteSpace (TAB, VT, FF, SP, NBSP, ZWNBSP and every Zs character) and
# LineTerminator (LF, CR, LS, PS): what String.prototype.trim() removes.
JS_SPACE = (
    "\t\x0b\x0c \xa0\ufeff\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u202f\u205f\u3000"
)
JS_LINE_END = "\n\r\u2028\u2029"
JS_TRIMMED = JS_SPACE + JS_LINE_END
CHUNK = 1_000_000  # bytes the front end decodes at a time


def js_trim(text: str) -> str:
    """JavaScript's ``String.prototype.trim``."""
    return text.strip(JS_TRIMMED)


def front_end_parse(data: bytes, chunk: int = CHUNK) -> tuple[list[str], list[dict[str, Any]]]:
    """Column names and per-point metadata as the projector front end reads ``data``."""
    lines: list[str] = []
    pending = ""
    for start in range(0, len(data), chunk):
        text = data[start : start + chunk].decode("utf-8", "replace")
        text = text.removeprefix("\ufeff")  # readAsText drops a byte order mark per chunk
        parts = text.split("\n")
        parts[0] = pending + parts[0]
        pending = parts.pop()
        lines += parts
    if pending:
        lines.append(pending)
    names, points, first = ["label"], [], True
    for line in lines:
        if not js_trim(line):
            continue
        if first:
            first = False
            if "\t" in line:
                names = line.split("\t")
                continue
        cells = line.split("\t")
        point: dict[str, Any] = {}
        for i, name in enumerate(names):
            value = cells[i] if i < len(cells) else None
            if name != "__proto__":  # a JS object ignores a string stored under __proto__
                point[name] = None if value == "" else value
        points.append(point)
    return names, points


def expected_label(value: Any) -> str:
    """The label a value should show: the documented cleaning, written independently."""
    text = str(value).encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    text = text.replace("\r\n", " ")
    for char in "\t\n\r\u2028\u2029\ufeff":
        text = text.replace(char, " ")
    return text if text.strip(JS_TRIMMED + "\u180e") else "<empty>"  # U+180E: old engines


POOL = [
    *JS_TRIMMED,
    "\r\n",
    "\t",
    "\n",
    "\r",
    "\ufeff",
    "\ud800",
    "\udfff",
    "\ud83d",
    "\ude00",
    "\ud83d\ude00",
    "",
    " ",
    "\x85",
    "\x1c",
    "\x00",
    "\u180e",
    "\u200b",
    "<empty>",
    "__proto__",
    "a",
    "Z",
    "7",
    "é",
    "✓",
]


def hostile(rng: random.Random) -> Any:
    """One value: mostly a short string from the pool, sometimes random unicode or a number."""
    roll = rng.random()
    if roll < 0.05:
        return rng.choice([0, -1, 2.5, float("nan"), None, True])
    if roll < 0.12:
        return "".join(chr(rng.randrange(sys.maxunicode + 1)) for _ in range(rng.randrange(4)))
    return "".join(rng.choice(POOL) for _ in range(rng.choice([0, 1, 1, 2, 3, 5])))


def corpus(seed: int = 11, snapshots: int = 700) -> list[dict[str, list[Any]]]:
    """Fixed hostile snapshots' metadata, one to four columns each (about 20,000 values)."""
    rng = random.Random(seed)
    out = []
    for _ in range(snapshots):
        points = rng.randrange(1, 30)
        width = rng.choice([1, 1, 2, 3, 4])
        columns: dict[str, list[Any]] = {}
        while len(columns) < width:
            columns[str(hostile(rng))] = [hostile(rng) for _ in range(points)]
        out.append(columns)
    return out


def check(columns: dict[str, list[Any]], chunk: int = CHUNK) -> None:
    """Assert the front end reads one row per point and each point's own cleaned labels."""
    data = metadata_tsv(columns)
    data.decode("utf-8")  # strict: the file is valid UTF-8
    names, points = front_end_parse(data, chunk)
    values = list(columns.values())
    assert len(points) == len(values[0])
    if len(values) == 1:
        assert names == ["label"]
    else:
        assert len(names) == len(values) == len(set(names))
        assert all(js_trim(name) and name != "__proto__" for name in names)
        assert data.startswith("\t".join(names).encode() + b"\n")
        for original, name in zip(columns, names, strict=True):
            if js_trim(expected_label(original)) and expected_label(original) != "<empty>":
                assert name.startswith(expected_label(original))
    for name, column in zip(names, values, strict=True):
        assert [point[name] for point in points] == [expected_label(v) for v in column]


def test_every_hostile_snapshot_parses_to_one_row_per_point_with_its_own_labels() -> None:
    snapshots = corpus()
    assert sum(len(c) * len(next(iter(c.values()))) + len(c) for c in snapshots) >= 10_000
    for columns in snapshots:
        check(columns)


def test_rows_survive_the_front_ends_per_chunk_decoding() -> None:
    """Tiny chunks split characters and put BOM-like bytes at chunk starts: rows must hold."""
    for columns in corpus(seed=5, snapshots=150):
        data = metadata_tsv(columns)
        for chunk in (7, 64):
            assert len(front_end_parse(data, chunk)[1]) == len(next(iter(columns.values())))


@pytest.mark.parametrize(
    ("value", "label"),
    [
        ("\ufeff", "<empty>"),
        ("\u2028", "<empty>"),
        ("\xa0\u3000", "<empty>"),
        ("a\rb", "a b"),
        ("a\u2029b", "a b"),
        ("x\ud800", "x\ufffd"),
        ("\ud83d\ude00", "\U0001f600"),
        ("\x85", "\x85"),
    ],
)
def test_awkward_single_values(value: str, label: str) -> None:
    for columns in ({"label": ["a", value]}, {"label": ["a", value], "id": [0, 1]}):
        names, points = front_end_parse(metadata_tsv(columns))
        assert points[1][names[0]] == label


def test_blank_duplicate_and_reserved_column_names_are_kept_apart() -> None:
    columns = {"": [1], " ": [2], "\ufeff": [3], "a\t": [4], "a ": [5], "__proto__": [6]}
    names, points = front_end_parse(metadata_tsv(columns))
    assert len(set(names)) == 6 and all(js_trim(name) for name in names)
    assert [points[0][name] for name in names] == ["1", "2", "3", "4", "5", "6"]


def test_the_plugin_serves_the_bytes_the_front_end_parses(tmp_path: Path) -> None:
    columns = {"\u2028": ["\ufeff", "\t", "ok\ud800"], "": ["\r", "x", " "]}
    writer = TensorBoardWriter(tmp_path / "run")
    writer.write_embedding(EmbeddingSnapshot("e", 0, torch.randn(3, 2), columns))
    writer.close()

    served = ProjectorReader(tmp_path).get("metadata", run="run", name="e/step_000000000")
    names, points = front_end_parse(served)
    assert [[p[n] for n in names] for p in points] == [
        ["<empty>", "<empty>"],
        ["<empty>", "x"],
        ["ok\ufffd", "<empty>"],
    ]
