"""One bad record costs that record only; several writers share a run directory; no debris.

Covers the failure rule of ``Writers`` (a failed record is skipped, a kind of record failing
three times in a row is switched off, a permanent failure switches the writer off), marker
runs of several writers, orphan temporaries, lock files and a corrupt projector config.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from learnscope import EmbeddingSnapshot
from learnscope.plugins.pipeline.base import Writer
from learnscope.plugins.pipeline.fanout import Writers
from learnscope.plugins.tensorboard import projector_files
from learnscope.plugins.tensorboard.layout import multiline
from learnscope.plugins.tensorboard.projector_refresh import MARKER_PREFIX, ProjectorRefresh
from learnscope.plugins.tensorboard.writer import TensorBoardWriter
from learnscope.storage import open_run_folder
from learnscope.storage.files import locked, remove_orphan_temporaries, write_atomic
from tests.kit.readers import ProjectorReader, debris


def snapshot(tag: str, step: int) -> EmbeddingSnapshot:
    return EmbeddingSnapshot(tag, step, torch.randn(6, 3) + 1.0)


def scalars(run_dir: Path) -> dict[str, list[int]]:
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [e.step for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


# -- one record fails, the writer goes on ---------------------------------------------------


def test_one_failed_snapshot_is_skipped_and_later_records_land(
    lenient: None, tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    run = tmp_path / "run"
    tb = TensorBoardWriter(run)
    writers = Writers([tb])
    writers.write_embedding(snapshot("enc", 0))
    first = Path(projector_files.read_config(run).embeddings[0].tensor_path).parent
    in_the_way = run / first.parent / projector_files.step_name(1)
    in_the_way.write_text("a file where step 1's folder goes")  # a real fault, this step only
    for step in range(4):
        writers.write_scalars({"loss": 1.0 / (step + 1)}, step=step)
        if step:
            writers.write_embedding(snapshot("enc", step))
    writers.close()

    assert writers.active == [tb]
    assert ProjectorReader(tmp_path).names("run") == [f"enc/step_{s:09d}" for s in (0, 2, 3)]
    assert scalars(run)["loss"] == [0, 1, 2, 3]
    (failure,) = [r for r in learnscope_log.records if "failed" in r.getMessage()]
    message = failure.getMessage()
    assert message.startswith(f"learnscope: TensorBoardWriter({run}) failed in write_embedding")
    assert "on enc at step 1" in message and "record is skipped" in message
    assert failure.levelno == logging.WARNING and failure.exc_info is not None
    assert debris(run) == []


class Failing(Writer):
    """Fails ``write_embedding`` for the steps in ``bad``; records what it wrote."""

    def __init__(self, bad: set[int]) -> None:
        self.bad = bad
        self.written: list[tuple[str, int]] = []

    def write_embedding(self, snapshot: EmbeddingSnapshot) -> None:
        if snapshot.step in self.bad:
            raise OSError(28, "No space left on device")
        self.written.append(("embedding", snapshot.step))

    def write_scalars(self, scalars: Any, step: int) -> None:
        self.written.append(("scalars", step))


def test_a_kind_of_record_failing_three_times_in_a_row_is_switched_off_alone(
    lenient: None, learnscope_log: pytest.LogCaptureFixture
) -> None:
    writer = Failing(bad={1, 3, 4, 5})
    writers = Writers([writer])
    for step in range(8):
        writers.write_embedding(snapshot("enc", step))
        writers.write_scalars({"a": 1.0}, step)
    assert [s for kind, s in writer.written if kind == "embedding"] == [0, 2]  # off after 5
    assert [s for kind, s in writer.written if kind == "scalars"] == list(range(8))
    messages = [r.getMessage() for r in learnscope_log.records]
    assert len(messages) == 4  # steps 1, 3, 4 skipped; 5 switches embeddings off
    assert "3 times in a row; write_embedding is switched off" in messages[-1]
    assert [r.exc_info is not None for r in learnscope_log.records] == [True, True, False, True]


def test_a_permanent_failure_switches_the_writer_off_with_one_message(
    lenient: None, tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    run = tmp_path / "run"
    other = Failing(bad=set())
    writers = Writers([TensorBoardWriter(run), other])
    writers.write_embedding(snapshot("enc", 0))
    shutil.rmtree(run)  # the run directory removed under the writer
    for step in range(1, 5):
        writers.write_embedding(snapshot("enc", step))
        writers.write_scalars({"a": 1.0}, step)
    writers.close()
    (error,) = [r for r in learnscope_log.records if "failed" in r.getMessage()]
    assert "its run directory" in error.getMessage() and "switched off" in error.getMessage()
    assert writers.active == [other]
    assert [s for kind, s in other.written if kind == "embedding"] == [0, 1, 2, 3, 4]


class Refused(Writer):
    """Every record fails, after ``seconds`` (a store's client retrying), with S3's reason."""

    def __init__(self, seconds: float = 0.0, good: frozenset[int] = frozenset()) -> None:
        self.seconds = seconds
        self.good = good  # steps written after all
        self.written: list[tuple[str, int]] = []
        self.tries = 0

    def _write(self, kind: str, step: int) -> None:
        self.tries += 1
        time.sleep(self.seconds)
        if step not in self.good:
            raise OSError(16, "Please reduce your request rate.")
        self.written.append((kind, step))

    def write_scalars(self, scalars: Any, step: int) -> None:
        self._write("scalars", step)

    def write_findings(self, findings: Any, step: int) -> None:
        self._write("findings", step)

    def write_embedding(self, snapshot: EmbeddingSnapshot) -> None:
        self._write("embedding", snapshot.step)


def feed(writers: Writers, steps: range) -> None:
    """A snapshot, scalars and the findings table at each step."""
    for step in steps:
        writers.write_embedding(snapshot("enc", step))
        writers.write_scalars({"a": 1.0}, step)
        writers.write_findings([], step)


def test_a_writer_whose_records_keep_failing_is_switched_off_with_one_message(
    lenient: None, learnscope_log: pytest.LogCaptureFixture
) -> None:
    refused, other = Refused(), Failing(bad=set())
    writers = Writers([refused, other])
    feed(writers, range(4))

    assert writers.active == [other]  # three records in a row of three kinds, none written
    messages = [r.getMessage() for r in learnscope_log.records]
    assert len(messages) == 3, messages  # two skipped records, then the one that switches off
    assert [r.levelno for r in learnscope_log.records] == [logging.WARNING] * 2 + [logging.ERROR]
    off = messages[-1]
    assert "Refused failed in write_findings on findings at step 0" in off
    assert "reduce your request rate" in off and "its last 3 records failed" in off
    assert "switched off for the rest of the run" in off and "not written there" in off
    outcome = writers.outcomes[id(refused)]  # every record given to it, counted as lost
    assert sum(outcome.written.values()) == 0 and sum(outcome.lost.values()) == 12
    assert outcome.reason == "OSError: [Errno 16] Please reduce your request rate."
    assert [s for kind, s in other.written if kind == "embedding"] == [0, 1, 2, 3]


def test_one_failure_between_writes_costs_that_record_only(
    lenient: None, learnscope_log: pytest.LogCaptureFixture
) -> None:
    flaky = Failing(bad={1})  # one snapshot fails; the scalars around it are written
    writers = Writers([flaky])
    for step in range(4):
        writers.write_scalars({"a": 1.0}, step)
        writers.write_embedding(snapshot("enc", step))

    assert writers.active == [flaky]
    assert len(learnscope_log.records) == 1
    outcome = writers.outcomes[id(flaky)]
    assert outcome.written == {"write_scalars": 4, "write_embedding": 3}
    assert outcome.lost == {"write_embedding": 1}


def test_a_failure_its_client_retried_for_long_switches_the_writer_off_at_once(
    lenient: None, monkeypatch: pytest.MonkeyPatch, learnscope_log: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(Writers, "GIVE_UP_AFTER_S", 0.5)  # 20 s in a run
    slow = Refused(seconds=0.6)
    writers = Writers([slow])
    feed(writers, range(5))

    assert slow.tries == 1  # one write tried, the other 14 records not
    (off,) = [r.getMessage() for r in learnscope_log.records]
    assert "kept failing for 1 s, none written in between" in off and "switched off" in off
    assert sum(writers.outcomes[id(slow)].lost.values()) == 15


def test_strict_mode_raises_the_first_failure() -> None:
    with pytest.raises(OSError, match="No space"):
        Writers([Failing(bad={0})]).write_embedding(snapshot("enc", 0))


# -- several writers in one run directory ---------------------------------------------------


def test_a_writer_removes_only_its_own_markers_and_those_of_dead_processes(tmp_path: Path) -> None:
    dead = tmp_path / f"{MARKER_PREFIX}999999999-0a1b2c3d-1"
    dead.mkdir()
    first = ProjectorRefresh(open_run_folder(tmp_path))
    assert dead.exists()  # a constructor touches nothing
    second = ProjectorRefresh(open_run_folder(tmp_path))
    first.announce()  # the first marker removes the crashed process's marker
    assert not dead.exists()
    second.announce()
    first.announce()
    second.close()
    (left,) = [p.name for p in tmp_path.iterdir()]
    assert left.startswith(f"{MARKER_PREFIX}{os.getpid()}-") and first._own in f"{left}"
    first.close()
    first.close()  # nothing left to remove: no error
    assert list(tmp_path.iterdir()) == []


# Two processes writing into one run directory: tests/test_two_writers.py


# -- no debris ------------------------------------------------------------------------------


def test_orphan_temporaries_are_removed_at_a_writers_first_write(tmp_path: Path) -> None:
    run = tmp_path / "run"
    folder = run / "projector" / "enc" / "step_3"
    folder.mkdir(parents=True)
    host = write_atomic.__globals__["_HOST"]
    crashed = folder / f".tensor.bin.999999999-{host}.abcd1234.tmp"  # its process is gone
    live = folder / f".tensor.bin.{os.getpid()}-{host}.efgh5678.tmp"  # being written now
    other_host = run / ".projector_config.pbtxt.999999999-ffffff.ijkl9012.tmp"  # fresh
    old_naming = folder / ".metadata.tsv.mnop3456.tmp"
    stale = folder / ".sprite.png.qrst7890.tmp"
    users = [folder / "notes.tmp", run / ".cache.tmp", run / "other" / ".x.abcd1234.tmp"]
    for path in [crashed, live, other_host, old_naming, stale, *users]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 1000)
    an_hour_ago = time.time() - 3600
    os.utime(stale, (an_hour_ago, an_hour_ago))  # older than 5 minutes, whoever wrote it

    writer = TensorBoardWriter(run)
    assert stale.exists() and crashed.exists()  # a constructor removes nothing
    writer.write_scalars({"loss": 1.0}, step=0)  # the first write removes the debris
    writer.close()
    assert set(run.rglob("*.tmp")) == {live, other_host, old_naming, *users}
    removed = set(remove_orphan_temporaries(run, min_age_s=0))  # past the age: any writer's
    assert removed == {live, other_host, old_naming}


def test_a_linked_projector_folder_outside_the_run_is_never_cleaned(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    host = write_atomic.__globals__["_HOST"]
    theirs = outside / f".tensor.bin.999999999-{host}.abcd1234.tmp"  # named like an orphan
    theirs.write_bytes(b"someone else's file")
    run = tmp_path / "run"
    run.mkdir()
    (run / "projector").symlink_to(outside, target_is_directory=True)

    writer = TensorBoardWriter(run)
    removed = remove_orphan_temporaries(run, min_age_s=0)
    writer.close()
    assert theirs.exists() and removed == []


def test_locks_leave_no_file_and_still_exclude_each_other(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    counter.write_text("0")
    lock = tmp_path / ".counter.lock"

    def add(times: int) -> None:
        for _ in range(times):
            with locked(lock):
                value = int(counter.read_text())
                time.sleep(0.0005)  # widen the window a lost update needs
                counter.write_text(str(value + 1))

    threads = [threading.Thread(target=add, args=(40,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counter.read_text() == "160"
    assert not lock.exists()


def test_writing_leaves_no_lock_files(tmp_path: Path) -> None:
    run = tmp_path / "run"
    writer = TensorBoardWriter(run)
    writer.write_embedding(snapshot("enc", 0))
    writer.add_charts({"loss": {"all": multiline(["loss"])}})
    writer.close()
    assert debris(run) == []


def test_a_corrupt_config_is_moved_aside_and_a_new_one_started(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    run = tmp_path / "run"
    writer = TensorBoardWriter(run)
    writer.write_embedding(snapshot("enc", 0))
    old_files = sorted(p for p in (run / "projector").rglob("*") if p.is_file())
    garbage = b"embeddings { tensor_name: \xff\xfe garbage"
    (run / projector_files.CONFIG_NAME).write_bytes(garbage)
    writer.write_embedding(snapshot("enc", 1))  # strict mode: nothing raised
    writer.close()

    (aside,) = run.glob(f"{projector_files.CONFIG_NAME}.corrupt-*")
    assert aside.read_bytes() == garbage
    assert ProjectorReader(tmp_path).names("run") == ["enc/step_000000001"]
    assert all(path.is_file() for path in old_files)  # the earlier entry's files stay
    (warning,) = learnscope_log.records
    assert str(run / projector_files.CONFIG_NAME) in warning.getMessage()
    assert aside.name in warning.getMessage()


def test_the_fan_out_asks_the_writer_whether_its_failure_is_permanent(
    lenient: None, learnscope_log: pytest.LogCaptureFixture
) -> None:
    """A writer of its own says its failure is permanent: the fan-out switches it off at once."""

    class Expired(Writer):
        def write_scalars(self, scalars: Any, step: int) -> None:
            raise RuntimeError("the token expired")

        def permanent_failure(self, error: Exception) -> str | None:
            return "its token has expired" if "expired" in str(error) else None

    expired, other = Expired(), Failing(bad=set())
    writers = Writers([expired, other])
    for step in range(3):
        writers.write_scalars({"a": 1.0}, step)
    assert writers.active == [other]  # off after the first failure, not the third
    (error,) = [r.getMessage() for r in learnscope_log.records]
    assert "its token has expired, so it is switched off" in error
    assert writers.outcomes[id(expired)].lost["write_scalars"] == 3
