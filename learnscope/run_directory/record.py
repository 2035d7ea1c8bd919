"""The run record: append-only JSON lines per run directory, read by every view.

Each line is one JSON object with a ``kind`` (what the entries hold is in ``docs/run_record.md``).
On a local disk the record is one file, ``learnscope_record.jsonl``, written only by appending
whole lines, each in one ``write`` under the run directory's lock; on an object store it is a
folder of immutable segments (:mod:`learnscope.storage.object_store`). Either way:

* a reader never needs more than the lines it has not seen yet (:class:`RecordReader` keeps its
  place in the file);
* a line cut short by a crash (no newline at its end) is ignored by readers, and the next
  writer first ends it with a newline, so that it never glues the next entry to it;
* a line that is not valid JSON (a damaged disk block) is skipped and counted, never fatal.

Arrays travel as base64 of their little-endian bytes (:func:`encode_array`), exact and compact.
Nothing here imports torch.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> path = Path(tempfile.mkdtemp()) / "learnscope_record.jsonl"
    >>> append_entries(path, [{"kind": "finding", "step": 3}])
    >>> reader = RecordReader(path)
    >>> [entry["kind"] for entry in reader.read()], reader.read()
    (['finding'], [])
    >>> append_entries(path, [{"kind": "end", "step": 9}])
    >>> [entry["step"] for entry in reader.read()]
    [9]
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from learnscope.storage.files import append_lines
from learnscope.storage.folder import RecordSource
from learnscope.storage.local import FileRecordSource

log = logging.getLogger("learnscope")

FORMAT = 1  # the ``format`` of the ``run`` entry; a reader skips entries of a newer format
MAX_LINE_BYTES = 64 * 1024 * 1024  # a longer line is damage, not an entry
_DTYPES = ("<f2", "<f4", "<f8", "<i4", "<i8", "<u2", "|u1")


def encode_array(values: Any, dtype: str = "<f4") -> dict[str, Any]:
    """An array as JSON: its dtype, shape and base64 little-endian bytes.

    Example:
        >>> encoded = encode_array([[1.5, 2.0]])
        >>> encoded["dtype"], encoded["shape"], decode_array(encoded).tolist()
        ('<f4', [1, 2], [[1.5, 2.0]])
    """
    if dtype not in _DTYPES:
        raise ValueError(f"an array in the run record is one of {_DTYPES}, not {dtype!r}")
    array = np.ascontiguousarray(np.asarray(values), dtype=np.dtype(dtype))
    return {
        "dtype": dtype,
        "shape": list(array.shape),
        "b64": base64.b64encode(array.tobytes()).decode("ascii"),
    }


def decode_array(encoded: Mapping[str, Any]) -> np.ndarray:
    """The array of :func:`encode_array`.

    Raises:
        ValueError: When the dtype is unknown or the bytes do not fill the shape.
    """
    dtype = encoded.get("dtype")
    if dtype not in _DTYPES:
        raise ValueError(f"unknown array dtype {dtype!r} in the run record")
    shape = [int(n) for n in encoded.get("shape", [])]
    data = base64.b64decode(encoded.get("b64", ""), validate=True)
    array = np.frombuffer(data, dtype=np.dtype(dtype))
    if array.size != int(np.prod(shape, dtype=np.int64)):
        raise ValueError(f"an array of shape {shape} has {array.size} values in the run record")
    return array.reshape(shape)


def encode_entries(entries: Iterable[Mapping[str, Any]]) -> bytes:
    r"""``entries`` as the record holds them: one JSON line each, UTF-8.

    Non-finite floats are written as ``null`` (JSON has no NaN).

    Example:
        >>> encode_entries([{"kind": "end", "tau": float("nan")}])
        b'{"kind":"end","tau":null}\n'
    """
    text = "".join(json.dumps(_finite(e), separators=(",", ":")) + "\n" for e in entries)
    return text.encode("utf-8", "surrogatepass")


def append_entries(path: Path, entries: Iterable[Mapping[str, Any]]) -> None:
    """Append ``entries`` to the record file at ``path``, one JSON line each, in one write.

    A record whose last line was cut short (by a crash) is first ended with a newline (see
    :func:`learnscope.storage.files.append_lines`).

    Raises:
        OSError: When the file cannot be written (the disk is full, say); the file is then cut
            back to its length before the call, so nothing of the entries is left in it.
    """
    data = encode_entries(entries)
    if data:
        append_lines(path, data)


class RecordReader:
    """Reads a run record incrementally: each :meth:`read` returns the entries added since.

    A record that was replaced or cut shorter (another run started over in the directory) is
    read again from its start, and :attr:`restarted` says so once.

    Args:
        source: The record file (it need not exist yet), or the
            :meth:`~learnscope.storage.RunFolder.record_source` of a run folder (on an object
            store, the record's segments).
        max_bytes: Read at most about this many new bytes per call (the rest comes next time).
    """

    def __init__(self, source: Path | RecordSource, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.source = source if isinstance(source, RecordSource) else FileRecordSource(source)
        self.max_bytes = max_bytes
        self.skipped = 0  # lines that were not valid JSON objects
        self.restarted = False

    def read(self) -> list[dict[str, Any]]:
        """The complete entries added since the last call (a cut last line waits)."""
        data = self.source.read(self.max_bytes)
        self.restarted = self.source.restarted
        entries = []
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                entry = json.loads(line) if len(line) <= MAX_LINE_BYTES else None
            except ValueError:
                entry = None
            if isinstance(entry, dict) and isinstance(entry.get("kind"), str):
                entries.append(entry)
            else:
                self.skipped += 1
        return entries


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinite floats as ``None``, for strict JSON."""
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, np.generic):
        return _finite(value.item())
    return value
