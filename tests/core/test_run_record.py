"""The run record: append-only JSON lines, read incrementally, a torn tail ignored."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from learnscope.run_directory.record import RecordReader, append_entries, decode_array, encode_array


def test_a_cut_line_is_ignored_and_the_next_append_starts_a_fresh_line(tmp_path: Path) -> None:
    path = tmp_path / "learnscope_record.jsonl"
    append_entries(path, [{"kind": "run", "step": 0}])
    with open(path, "ab") as file:  # a crash in the middle of a line
        file.write(b'{"kind":"finding","st')
    reader = RecordReader(path)
    assert [e["kind"] for e in reader.read()] == ["run"]
    assert reader.read() == []  # the cut line waits for its end
    append_entries(path, [{"kind": "finding", "step": 4}, {"kind": "end", "step": 5}])
    assert [(e["kind"], e["step"]) for e in reader.read()] == [("finding", 4), ("end", 5)]
    assert reader.skipped == 1  # the cut line, ended by the newline the writer added


def test_damaged_lines_are_skipped_and_a_replaced_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "learnscope_record.jsonl"
    path.write_bytes(b'[1, 2]\n\xff\xfe\n{"no kind": 1}\n{"kind": "run"}\n')
    reader = RecordReader(path)
    assert [e["kind"] for e in reader.read()] == ["run"] and reader.skipped == 3
    replacement = tmp_path / "new"
    append_entries(replacement, [{"kind": "end"}])
    os.replace(replacement, path)
    assert [e["kind"] for e in reader.read()] == ["end"] and reader.restarted


def test_nan_becomes_null_and_arrays_round_trip_exactly(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    values = np.random.default_rng(0).normal(size=(7, 2)).astype(np.float32)
    append_entries(path, [{"kind": "x", "tau": float("nan"), "xy": encode_array(values)}])
    (entry,) = RecordReader(path).read()
    assert entry["tau"] is None
    np.testing.assert_array_equal(decode_array(entry["xy"]), values)
    with pytest.raises(ValueError, match="has 14 values"):
        decode_array({**entry["xy"], "shape": [3, 2]})


def test_a_fifo_or_a_symlink_is_never_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        RecordReader(fifo).read()
    secret = tmp_path / "secret.jsonl"
    append_entries(secret, [{"kind": "run"}])
    link = tmp_path / "link.jsonl"
    link.symlink_to(secret)
    with pytest.raises(OSError):
        RecordReader(link).read()
    with pytest.raises(OSError):
        append_entries(link, [{"kind": "end"}])


def test_a_run_ends_failed_with_its_exception_and_ctrl_c_stays_interrupted(tmp_path: Path) -> None:
    from learnscope.plugins.pipeline.run_record_writer import RunRecordWriter
    from learnscope.plugins.views.run_status import RunEntries
    from learnscope.records import RunEnd, RunError

    class LoaderError(RuntimeError):
        pass

    failed = RunEnd.after(3, LoaderError("x" * 3000))
    assert failed.status == "failed" and failed.error is not None
    assert failed.error.type == f"{__name__}.{LoaderError.__qualname__}"  # as a traceback does
    assert RunEnd.after(3, ValueError("bad")).error == RunError("ValueError", "bad")
    assert len(failed.error.message) == 2000 and failed.error.message.endswith("...")
    assert RunEnd.after(3, KeyboardInterrupt()) == RunEnd(3, "interrupted")
    assert RunEnd.after(3, None) == RunEnd(3, "finished")
    with pytest.raises(ValueError, match="a failed run has its error"):
        RunEnd(3, "failed")
    with pytest.raises(ValueError, match="a failed run has its error"):
        RunEnd(3, "finished", RunError("ValueError", "no"))

    writer = RunRecordWriter(tmp_path)
    writer.write_run_end(RunEnd.after(5, ValueError("no column 'label'")))
    writer.write_run_end(RunEnd(6, "interrupted"))
    (failed_entry, interrupted_entry) = RecordReader(writer.folder.record_source()).read()
    assert failed_entry == {
        "kind": "end",
        "step": 5,
        "status": "failed",
        "error": {"type": "ValueError", "message": "no column 'label'"},
    }
    assert interrupted_entry == {"kind": "end", "step": 6, "status": "interrupted"}

    run = RunEntries()  # the views' reader
    run.fold_end(failed_entry)
    assert run.failure() == "the run failed at step 5: ValueError: no column 'label'"
    run.fold_end(interrupted_entry)  # a record of before issue 29 reads as it did
    assert run.failure() is None and run.ended == {"step": 6, "status": "interrupted"}
    run.fold_end({"kind": "end", "step": 7, "status": "failed", "error": "garbled"})
    assert run.failure() == (
        "the run failed at step 7: unknown exception: the record does not say which"
    )
