"""The background writer: records are written off the training thread, in order, and never lost.

Real writers (TensorBoard event and projector files, wandb offline) and real fits; the only
stand-ins are writers of learnscope's own ``Writer`` protocol that wait or fail on purpose.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

from learnscope.lightning_glue import EmbeddingProjector
from learnscope.plugins import Writer
from learnscope.plugins.pipeline.background import BackgroundWriters
from learnscope.plugins.tensorboard import projector_files
from learnscope.records import AutocorrelationSummary, EmbeddingSnapshot
from tests.kit.models import TinyClassifier, loaders, trainer
from tests.kit.readers import ProjectorReader, wandb_history, wandb_run_dir


def labels(batch: Any) -> dict[str, Any]:
    return {"label": batch[1]}


class Gate(Writer):
    """Writes scalars into a list, each only once the gate is open."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.written: list[int] = []

    def write_scalars(self, scalars: Any, step: int) -> None:
        self.open.wait(timeout=30)
        self.written.append(step)


def test_records_are_written_in_order_by_the_worker_and_drain_waits_for_them() -> None:
    gate = Gate()
    background = BackgroundWriters([gate])
    for step in range(5):
        background.write_scalars({"a": 1.0}, step)  # returns at once: the gate is shut
    assert gate.written == []
    gate.open.set()
    background.drain()
    assert gate.written == [0, 1, 2, 3, 4]
    background.close()


def test_a_full_queue_makes_the_training_thread_wait_instead_of_growing() -> None:
    gate = Gate()
    background = BackgroundWriters([gate], max_pending_jobs=2)
    background.write_scalars({"a": 1.0}, 0)  # taken by the worker, which waits at the gate
    background.write_scalars({"a": 1.0}, 1)
    background.write_scalars({"a": 1.0}, 2)  # two waiting: the queue is full
    third = threading.Thread(target=background.write_scalars, args=({"a": 1.0}, 3))
    third.start()
    third.join(timeout=0.5)
    assert third.is_alive()  # blocked while the queue is full
    gate.open.set()
    third.join(timeout=30)
    background.close()
    assert gate.written == [0, 1, 2, 3]


def test_records_abandoned_at_the_end_are_counted_as_not_written() -> None:
    gate = Gate()  # shut: the first record hangs until the end gives up
    background = BackgroundWriters([gate])
    for step in range(5):
        background.write_scalars({"a": 1.0}, step)
    background.close(timeout_s=0.3)  # step 0 is being written, steps 1-4 are abandoned
    gate.open.set()

    outcome = background.queued.outcomes[id(gate)]
    assert outcome.lost == {"write_scalars": 4}
    assert outcome.reason == "abandoned: the end of the fit waited 0.3 s for learnscope's writes"
    assert background.queued.records["write_scalars"] == 5  # every record made is counted


def test_the_byte_bound_holds_one_large_snapshot_at_a_time(tmp_path: Path) -> None:
    class SlowProjector(Writer):
        def __init__(self) -> None:
            self.sizes: list[int] = []

        def write_embedding(self, snapshot: EmbeddingSnapshot) -> None:
            time.sleep(0.2)
            self.sizes.append(background._pending_bytes)

    slow = SlowProjector()
    background = BackgroundWriters([slow], max_pending_bytes=1000)
    for step in range(3):  # each 100 x 4 x 4 = 1,600 bytes: more than the bound alone
        background.write_embedding(EmbeddingSnapshot("enc", step, torch.randn(100, 4)))
        assert background._pending_bytes <= 1600  # never two held at once
    background.close()
    assert len(slow.sizes) == 3


def test_in_strict_mode_a_failure_on_the_worker_is_raised_on_the_training_thread() -> None:
    class Failing(Writer):
        def write_scalars(self, scalars: Any, step: int) -> None:
            raise OSError("disk hiccup")

    background = BackgroundWriters([Failing()])
    background.write_scalars({"a": 1.0}, 0)
    with pytest.raises(OSError, match="disk hiccup"):
        background.drain()
    background.close()


def test_leniently_a_failed_record_is_logged_and_later_ones_are_written(
    lenient: None, learnscope_log: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    from learnscope.plugins.tensorboard.writer import TensorBoardWriter

    tb = TensorBoardWriter(tmp_path)
    background = BackgroundWriters([tb])
    background.submit(lambda writers: 1 / 0, label="a sum")  # a job that is not a writer call
    background.write_embedding(EmbeddingSnapshot("enc", 1, torch.randn(4, 2)))
    background.close()
    assert "a background write failed" in learnscope_log.text
    (name,) = ProjectorReader(tmp_path).names(".")
    assert name.startswith("enc/step_")


class Analyses(Writer):
    """Keeps each analysis it is given and the thread that gave it."""

    def __init__(self, on_training_thread: bool = False) -> None:
        self.on_training_thread = on_training_thread
        self.steps: list[int] = []
        self.threads: list[str] = []

    def write_autocorrelation(self, summary: AutocorrelationSummary) -> None:
        self.steps.append(summary.step)
        self.threads.append(threading.current_thread().name)


def test_a_record_made_on_the_worker_reaches_the_training_thread_writers_there() -> None:
    queued, inline, gate = Analyses(), Analyses(on_training_thread=True), threading.Event()
    made_on: list[str] = []

    def make(step: int) -> AutocorrelationSummary:
        gate.wait(timeout=30)
        made_on.append(threading.current_thread().name)
        return AutocorrelationSummary(step=step, lags=(1,))

    background = BackgroundWriters([queued, inline])
    first = background.submit_record(
        "write_autocorrelation", lambda: make(10), label="autocorrelation step 10"
    )
    assert not first.done() and inline.steps == []  # the training thread went on at once
    gate.set()
    assert first.result(timeout=30).step == 10
    assert queued.steps == [10] and inline.steps == []  # not from the worker's thread
    background.deliver()
    assert inline.steps == [10] and inline.threads == [threading.current_thread().name]
    background.submit_record("write_autocorrelation", lambda: make(20), label="analysis")
    background.close()  # the end delivers what the worker made last
    assert queued.steps == inline.steps == [10, 20]
    assert made_on == ["learnscope-writer"] * 2 and set(queued.threads) == {"learnscope-writer"}
    assert background.inline.records["write_autocorrelation"] == 2


def test_a_record_whose_making_fails_is_not_written_and_strict_mode_raises_it() -> None:
    queued = Analyses()
    background = BackgroundWriters([queued])

    def broken() -> AutocorrelationSummary:
        raise ArithmeticError("no summary")

    made = background.submit_record("write_autocorrelation", broken, label="analysis step 5")
    with pytest.raises(ArithmeticError, match="no summary"):
        background.drain()  # strict mode: raised on the training thread
    assert isinstance(made.exception(timeout=30), ArithmeticError)
    swallowed: list[BaseException] = []

    @contextlib.contextmanager
    def guard() -> Iterator[None]:  # the owner's failure isolation: says it, switches off
        try:
            yield
        except ArithmeticError as error:
            swallowed.append(error)

    quiet = background.submit_record(
        "write_autocorrelation", broken, label="analysis step 6", guard=guard
    )
    assert quiet.result(timeout=30) is None
    background.close()
    assert queued.steps == [] and len(swallowed) == 1


def test_writers_that_write_nothing_drop_a_record_to_make_and_cancel_it() -> None:
    made: list[int] = []
    background = BackgroundWriters([Analyses()], writes_nothing=True)
    future = background.submit_record(
        "write_autocorrelation", lambda: made.append(1), label="analysis"
    )
    assert future.cancelled() and made == []
    background.close()


def test_queued_records_are_written_when_the_interpreter_exits(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import torch
        from learnscope.plugins.pipeline.background import BackgroundWriters
        from learnscope.plugins.tensorboard.writer import TensorBoardWriter
        from learnscope.records import AutocorrelationSummary, EmbeddingSnapshot

        background = BackgroundWriters([TensorBoardWriter({str(tmp_path)!r})])
        for step in range(3):
            background.write_embedding(EmbeddingSnapshot("enc", step, torch.randn(2000, 64)))
        # no drain, no close: the script ends with the snapshots queued
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    names = ProjectorReader(tmp_path).names(".")
    assert len(names) == 3
    tensors = [ProjectorReader(tmp_path).tensor(".", name) for name in names]
    assert all(t.shape == (2000, 64) for t in tensors)


def test_a_fit_writes_snapshots_on_the_worker_and_every_one_is_there_after_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    write = projector_files.write_snapshot

    def observed(run_dir: Path, snapshot: EmbeddingSnapshot, config: Any = None) -> Any:
        threads.append(threading.current_thread().name)
        return write(run_dir, snapshot, config)

    monkeypatch.setattr(projector_files, "write_snapshot", observed)
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    projector = EmbeddingProjector(metadata_fn=labels, aligned_pca=True)
    trainer(tmp_path, tb, [projector], max_epochs=3).fit(TinyClassifier(), *loaders())
    assert threads == ["learnscope-writer"] * 3
    assert len(ProjectorReader(tmp_path / "tb").names("version_0")) == 3


def test_wandb_rows_logged_from_both_threads_all_arrive(tmp_path: Path, wandb_dir: Path) -> None:
    """Lightning logs metrics on the training thread while the worker logs tables."""
    wb = WandbLogger(project="t", save_dir=str(wandb_dir))
    projector = EmbeddingProjector(metadata_fn=labels)
    run = trainer(tmp_path, wb, [projector], max_epochs=4, log_every_n_steps=1)
    run.fit(TinyClassifier(), *loaders())
    wb.experiment.finish()
    history = wandb_history(wandb_run_dir(wandb_dir))
    losses = [row for row in history if "train_loss" in row]
    tables = [row for row in history if "~learnscope/embeddings/encoder/validate" in row]
    assert len(losses) == 4 * 6  # 96 samples / 16 a batch, every step logged
    assert sorted(row["trainer/global_step"] for row in tables) == [6, 12, 18, 24]
