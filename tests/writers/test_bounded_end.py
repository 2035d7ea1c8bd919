"""The end of a fit is bounded: a hung write never hangs the fit, and no writer thread outlives it.

The hung write is real: the run record of the run is a FIFO nobody reads, so the writer's
``os.write`` blocks once the pipe's buffer is full, as a write to a hung network file system
does. Each fit that may hang runs in a child process under a time limit.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from lightning.pytorch.loggers import TensorBoardLogger

from learnscope.lightning_glue import TrainingHelper
from learnscope.plugins import Writer
from learnscope.plugins.pipeline import background as background_module
from learnscope.plugins.pipeline.background import BackgroundWriters
from tests.kit.models import TinyClassifier, loaders, trainer

WAITS = "the fit ends once learnscope's writer thread is done with"  # the long wait's line

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="FIFOs and signals as on Linux"),
]

CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    # Ctrl-C raises KeyboardInterrupt even when the test run was started with SIGINT ignored
    # (a background job of a non-interactive shell), which a child inherits
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path[:0] = [{repo!r}, {here!r}]
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import TensorBoardLogger
    from tests.kit.models import TinyClassifier, loaders, trainer
    from learnscope.lightning_glue import EmbeddingProjector
    from learnscope.run_directory.write_limits import WriteLimits

    limits = None if {timeout!r} is None else WriteLimits(end_timeout_s={timeout!r})

    class Said(pl.Callback):
        def on_train_end(self, trainer, pl_module):
            print("TRAINING ENDED", flush=True)

    run = os.path.join({root!r}, "tb", "version_0")
    os.makedirs(run)
    os.mkfifo(os.path.join(run, "learnscope_record.jsonl"))  # written to, never read
    logger = TensorBoardLogger({root!r}, name="tb", version=0)
    projector = EmbeddingProjector(max_points=20000, aligned_pca=True, write_limits=limits)
    fit = trainer({root!r}, logger, [projector, Said()], max_epochs=1, num_sanity_val_steps=0)
    start = time.monotonic()
    fit.fit(TinyClassifier(), *loaders(n_train=32, n_val=12000, batch_size=2000))
    print("FIT RETURNED after %.1f s" % (time.monotonic() - start), flush=True)
    """
)


def child(tmp_path: Path, timeout: float | None) -> subprocess.Popen[str]:
    script = CHILD.format(
        repo=str(Path(__file__).parents[2]),
        here=str(Path(__file__).parent),
        root=str(tmp_path),
        timeout=timeout,
    )
    return subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a Ctrl-C of the test run does not reach it
    )


def lines(stream: object) -> queue.Queue[str]:
    """The lines of ``stream`` as they come, read by a thread."""
    got: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:  # type: ignore[attr-defined]
            got.put(line)

    threading.Thread(target=read, daemon=True).start()
    return got


def wait_for(got: queue.Queue[str], text: str, seconds: float, seen: list[str]) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            line = got.get(timeout=max(0.0, end - time.monotonic()))
        except queue.Empty:
            break
        seen.append(line)
        if text in line:
            return True
    return False


def finish(process: subprocess.Popen[str], seconds: float) -> int | None:
    """The exit status within ``seconds``; ``None`` (and the child killed) when it hangs."""
    try:
        return process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return None


def test_a_write_blocked_on_a_fifo_does_not_hang_the_fit_past_the_limit(tmp_path: Path) -> None:
    process = child(tmp_path, timeout=3.0)
    out, err = lines(process.stdout), lines(process.stderr)
    status = finish(process, 150)
    stdout, stderr = list(out.queue), "".join(err.queue)
    assert status is not None, f"the fit hung in its end; stderr: {stderr[-2000:]}"
    assert status == 0, stderr[-3000:]
    assert any("FIT RETURNED" in line for line in stdout), stdout
    # one message names what is abandoned, and one says the thread is left behind
    abandoned = [line for line in stderr.splitlines() if "abandoning" in line]
    assert len(abandoned) == 1, stderr[-3000:]
    assert "waited 3 s" in abandoned[0] and "snapshot encoder step" in abandoned[0]
    assert "left behind as a daemon thread" in stderr


def test_the_first_ctrl_c_during_the_end_abandons_the_queue_at_once(tmp_path: Path) -> None:
    process = child(tmp_path, timeout=None)  # the default limit, minutes
    out, err = lines(process.stdout), lines(process.stderr)
    seen: list[str] = []
    try:
        assert wait_for(out, "TRAINING ENDED", 120, seen), "".join(err.queue)[-2000:]
        said = wait_for(err, WAITS, 20, seen)  # the progress line of a long wait
        os.killpg(process.pid, signal.SIGINT)  # one Ctrl-C
        status = finish(process, 30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    stderr = "".join(seen) + "".join(err.queue)
    assert status is not None, f"one Ctrl-C did not end the fit; stderr: {stderr[-2000:]}"
    assert said, stderr[-2000:]
    progress = next(line for line in stderr.splitlines() if WAITS in line)
    assert "snapshot encoder step" in progress and " MB" in progress and "Ctrl-C" in progress
    assert "Ctrl-C; abandoning" in stderr, stderr[-2000:]
    assert status == 1  # Lightning's answer to a Ctrl-C, as for one during training


def writer_threads(before: frozenset[threading.Thread] = frozenset()) -> list[threading.Thread]:
    """learnscope's writer threads alive now, but those of ``before`` (other tests' leftovers)."""
    return [
        t
        for t in threading.enumerate()
        if t.name.startswith("learnscope-writer") and t not in before
    ]


def test_a_hook_called_after_fit_leaves_no_writer_thread(tmp_path: Path) -> None:
    helper = TrainingHelper(check_every_n_steps=2)
    model = TinyClassifier()
    fit = trainer(tmp_path, TensorBoardLogger(str(tmp_path), name="tb"), [helper], max_epochs=1)
    before = frozenset(writer_threads())
    fit.fit(model, *loaders(n_train=32, n_val=16))
    assert writer_threads(before) == []
    helper.on_train_end(fit, model)  # as Lightning's own loop tests drive hooks by hand
    assert writer_threads(before) == [], "a hook after the fit started a learnscope-writer thread"


def test_a_hook_called_after_fit_opens_no_file(tmp_path: Path) -> None:
    """A hook after the fit ended writes nothing: no new event file, no descriptor kept open."""
    helper = TrainingHelper(check_every_n_steps=2)
    model = TinyClassifier()
    logger = TensorBoardLogger(str(tmp_path), name="tb")
    fit = trainer(tmp_path, logger, [helper], max_epochs=1)
    fit.fit(model, *loaders(n_train=32, n_val=16))
    run = Path(logger.log_dir)
    files = sorted(p.name for p in run.iterdir())
    record = (run / "learnscope_record.jsonl").read_bytes()
    descriptors = len(os.listdir("/proc/self/fd"))
    helper.on_train_end(fit, model)
    helper.on_train_end(fit, model)
    assert sorted(p.name for p in run.iterdir()) == files
    assert (run / "learnscope_record.jsonl").read_bytes() == record  # no second run started
    assert len(os.listdir("/proc/self/fd")) <= descriptors


class Slow(Writer):
    def __init__(self) -> None:
        self.steps: list[int] = []

    def write_scalars(self, scalars: object, step: int) -> None:
        time.sleep(0.2)
        self.steps.append(step)


def test_close_abandons_what_is_left_at_its_limit_and_the_worker_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = frozenset(writer_threads())
    slow = Slow()
    background = BackgroundWriters([slow])
    for step in range(50):
        background.write_scalars({"x": 1.0}, step)
    background.close(timeout_s=0.5)  # 50 writes of 0.2 s each would take 10 s
    assert 1 <= len(slow.steps) < 50
    assert slow.steps == list(range(len(slow.steps)))  # in order, the rest dropped
    messages = [r.getMessage() for r in caplog.records if "abandoning" in r.getMessage()]
    assert len(messages) == 1 and "scalars" in messages[0]
    end = time.monotonic() + 5
    while writer_threads(before) and time.monotonic() < end:
        time.sleep(0.05)
    assert writer_threads(before) == []
    written = len(slow.steps)
    time.sleep(0.5)
    assert len(slow.steps) == written  # nothing abandoned is written later


def test_a_long_wait_says_once_what_it_waits_for(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(background_module, "PROGRESS_AFTER_S", 0.2)
    slow = Slow()
    background = BackgroundWriters([slow])
    for step in range(8):  # 1.6 s of writes
        background.write_scalars({"x": 1.0}, step)
    with caplog.at_level(logging.WARNING, logger="learnscope"):
        background.close(timeout_s=math.inf)  # no limit: waits for all of them
    assert slow.steps == list(range(8))
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and WAITS in said[0], said
    assert "queued records (" in said[0] and "scalars (" in said[0] and " MB" in said[0]


def test_the_long_wait_line_says_plainly_what_runs_and_what_is_queued(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The demo's line: umap-learn loading on the writer thread, then the records behind it, of
    one kind together ("being written" once named the loading)."""
    monkeypatch.setattr(background_module, "PROGRESS_AFTER_S", 0.2)
    loaded = threading.Event()
    background = BackgroundWriters([Slow()])
    background.submit(lambda writers: loaded.wait(0.6), label="loading umap-learn")
    for step in (20, 40):
        background.submit(lambda writers: None, label=f"snapshot encoder step {step}")
    for step in range(3):
        background.write_scalars({"x": 1.0}, step)
    with caplog.at_level(logging.WARNING, logger="learnscope"):
        background.close(timeout_s=math.inf)
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith(
        f"learnscope: {WAITS} loading umap-learn (in progress), then 5 queued records (0.0 MB): "
        "snapshot encoder steps 20-40 (2), scalars (3); "
    ), said
    assert "being written" not in said and "Ctrl-C abandons what is queued" in said


class Stuck(Writer):
    """A writer whose write never returns until ``release`` is set (a hung file system)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.thread: threading.Thread | None = None

    def write_scalars(self, scalars: object, step: int) -> None:
        self.thread = threading.current_thread()
        self.release.wait()


def test_a_ctrl_c_the_kernel_hands_to_the_writer_thread_still_ends_the_wait() -> None:
    """Python runs a signal's handler on the main thread only when it wakes: the end's wait is
    sliced, so a Ctrl-C delivered to the blocked worker is seen at once, not at the limit."""
    stuck = Stuck()
    background = BackgroundWriters([stuck])
    background.write_scalars({"x": 1.0}, 0)
    end = time.monotonic() + 5
    while stuck.thread is None and time.monotonic() < end:
        time.sleep(0.01)
    assert stuck.thread is not None
    ident = stuck.thread.ident
    assert ident is not None
    ctrl_c = threading.Timer(0.5, signal.pthread_kill, (ident, signal.SIGINT))
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started ignored
    ctrl_c.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            background.close(timeout_s=60)
        # the Ctrl-C, not the 60 s limit, ended the wait (a bound on the wait, not a speed)
        assert time.monotonic() - start < 30
    finally:
        ctrl_c.cancel()
        stuck.release.set()
        signal.signal(signal.SIGINT, handler)
