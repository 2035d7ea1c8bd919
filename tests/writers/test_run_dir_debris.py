"""What a crash or a damaged file leaves in a run directory is cleaned up by the next writer.

Stale lock files of a SIGKILLed writer go when the next writer starts (a lock a live process
holds stays); the projector's marker timer has ended when the writer closes; a truncated Custom
Scalars layout of a resumed run is moved aside, and the run's charts are written again.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from learnscope.plugins.pipeline.run_record_writer import RunRecordWriter
from learnscope.plugins.tensorboard import layout as tensorboard_layout
from learnscope.plugins.tensorboard.layout import LAYOUT_TAG, multiline
from learnscope.plugins.tensorboard.projector_refresh import ProjectorRefresh
from learnscope.plugins.tensorboard.writer import TensorBoardWriter
from learnscope.records import EmbeddingSnapshot, RunStart
from learnscope.run_directory.file_names import LAYOUT_FILE, PROJECTOR_CONFIG, RECORD_FILE
from learnscope.storage import open_run_folder

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="flock and signals as on Linux")

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from learnscope.storage.files import locked

    with locked(Path(sys.argv[1])):
        print("HELD", flush=True)
        time.sleep(120)
    """
)


def hold_lock(lock: Path) -> subprocess.Popen[str]:
    """A process holding ``lock`` (as a writer merging the config does) until it is killed."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "HELD"
    return process


def leave_stale_lock(lock: Path) -> None:
    """``lock`` as a SIGKILLed writer leaves it: the file stays, nobody holds it."""
    holder = hold_lock(lock)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    assert lock.exists()  # the killed process could not remove it


def test_a_lock_left_by_a_sigkilled_writer_is_removed_at_the_next_writers_first_write(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    lock = run / f".{PROJECTOR_CONFIG}.lock"
    leave_stale_lock(lock)

    writer = TensorBoardWriter(run)
    assert lock.exists()  # a constructor removes nothing
    writer.write_scalars({"loss": 1.0}, step=0)
    assert not lock.exists()
    writer.close()
    leftovers = [p.name for p in run.iterdir() if p.name.endswith(".lock")]
    assert leftovers == []


def test_a_lock_held_by_a_live_writer_stays_and_the_new_writer_does_not_wait(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    lock = run / f".{LAYOUT_FILE}.lock"
    holder = hold_lock(lock)
    try:
        writer = TensorBoardWriter(run)  # returns at once: the lock is not waited for
        assert lock.exists()
        writer.write_embedding(EmbeddingSnapshot("enc", 0, torch.randn(5, 3)))  # another lock
        writer.close()
        assert lock.exists()  # still held: not removed under the live holder
    finally:
        holder.kill()
        holder.wait(timeout=30)


def timer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if isinstance(t, threading.Timer)]


def test_the_marker_timer_has_ended_when_the_refresh_closes(tmp_path: Path) -> None:
    before = set(timer_threads())  # other tests' writers left open may still hold theirs
    alive = 0
    for n in range(200):
        refresh = ProjectorRefresh(open_run_folder(tmp_path / f"run{n % 4}"), linger_s=30)
        refresh.announce()
        refresh.close()
        alive += bool(set(timer_threads()) - before)
    assert alive == 0, f"a marker timer was alive right after close in {alive} of 200 tries"


def layout_versions(run: Path) -> list[tuple[int, dict[str, object]]]:
    """(step, layout categories) of every Custom Scalars layout in the run's event files."""
    from tensorboard.plugins.custom_scalar import layout_pb2

    found = []
    for events in sorted(run.glob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events), size_guidance={"tensors": 0})
        accumulator.Reload()
        if LAYOUT_TAG not in accumulator.Tags()["tensors"]:
            continue
        for event in accumulator.Tensors(LAYOUT_TAG):
            layout = layout_pb2.Layout()
            layout.ParseFromString(event.tensor_proto.string_val[0])
            found.append(
                (event.step, {c.title: [x.title for x in c.chart] for c in layout.category})
            )
    return sorted(found, key=lambda found: found[0])


def test_a_truncated_layout_in_a_resumed_run_is_moved_aside_and_charts_come_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = tmp_path / "run"
    first = TensorBoardWriter(run)
    for n in range(3):
        first.add_charts({"autocorrelation": {f"group {n}": multiline([f"acf/{n}"])}})
    first.close()
    path = run / LAYOUT_FILE
    whole = path.read_text(encoding="utf-8")
    assert json.loads(whole)["version"] == 3
    path.write_text(whole[: len(whole) // 2], encoding="utf-8")  # the crash cut it short

    resumed = TensorBoardWriter(run)
    with caplog.at_level(logging.WARNING, logger="learnscope"):
        resumed.add_charts({"autocorrelation": {"group 9": multiline(["acf/9"])}})
    resumed.close()

    (aside,) = run.glob(f"{LAYOUT_FILE}.corrupt-*")
    assert aside.read_text(encoding="utf-8") == whole[: len(whole) // 2]  # kept as found
    said = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
    assert len(said) == 1 and aside.name in said[0] and LAYOUT_FILE in said[0]
    state = json.loads(path.read_text(encoding="utf-8"))
    assert state["layout"] == {"autocorrelation": {"group 9": multiline(["acf/9"])}}
    assert state["version"] == 4  # goes on from the damaged file's version
    steps, layouts = zip(*layout_versions(run), strict=True)
    assert steps[-1] == 4 and layouts[-1] == {"autocorrelation": ["group 9"]}  # shown last


@pytest.mark.parametrize("content", ["[1, 2]", '{"version": "x", "layout": {}}', "\udcff"])
def test_a_layout_that_is_no_layout_is_moved_aside(tmp_path: Path, content: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / LAYOUT_FILE).write_bytes(content.encode("utf-8", "surrogateescape"))
    state = tensorboard_layout.merge_charts(run, {"c": {"t": multiline(["x"])}})
    assert state is not None and state["layout"] == {"c": {"t": multiline(["x"])}}
    assert len(list(run.glob(f"{LAYOUT_FILE}.corrupt-*"))) == 1


def test_a_layout_fifo_is_moved_aside_without_blocking(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / LAYOUT_FILE)
    done = threading.Event()

    def merge() -> None:
        tensorboard_layout.merge_charts(run, {"c": {"t": multiline(["x"])}})
        done.set()

    threading.Thread(target=merge, daemon=True).start()
    assert done.wait(timeout=10), "reading a FIFO layout blocked"
    assert (run / LAYOUT_FILE).is_file()


def test_a_record_lock_left_by_a_sigkilled_writer_goes_at_a_record_writers_first_write(
    tmp_path: Path,
) -> None:
    """As in a wandb run's files folder, where only the run record is locked."""
    folder = tmp_path / "files"
    folder.mkdir()
    lock = folder / f".{RECORD_FILE}.lock"
    leave_stale_lock(lock)
    writer = RunRecordWriter(folder)
    assert lock.exists()  # a constructor removes nothing
    writer.write_run_start(RunStart())
    assert not lock.exists()
