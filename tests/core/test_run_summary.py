"""The run summary and ``learnscope.read_summaries`` on real fits: one that finished with
findings, one that failed in a training step, one interrupted by Ctrl-C. Every value is checked
against the same value recomputed from the run's own files (``tests/kit/summary_reference.py``:
the record's lines read with ``json``, the ranks from the embeddings TensorBoard holds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger

import learnscope
from learnscope.run_directory.file_names import RECORD_FILE
from learnscope.run_directory.summary import MAX_SEPARATORS, summarize_record
from tests.kit.callbacks import CtrlC, learnscope_callbacks
from tests.kit.models import ZeroBranch, loaders, trainer
from tests.kit.summary_reference import assert_same_summary, expected_summary, record_lines

pytestmark = pytest.mark.slow

FAILURE = "the batch of step 5 is broken"
STEP_KINDS = ("snapshot", "autocorrelation", "findings", "end")


class FailsAtStep5(ZeroBranch):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == 5:
            raise RuntimeError(FAILURE)
        return super().training_step(batch, batch_idx)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``finished``, ``failed`` (at step 5) and ``stopped`` (Ctrl-C at step 7) under one dir."""
    root = tmp_path_factory.mktemp("sweep") / "logs"
    train, val = loaders()  # 6 steps an epoch
    finished = TensorBoardLogger(str(root), name="finished")
    trainer(root, finished, learnscope_callbacks()).fit(ZeroBranch(), train, val)
    failed = TensorBoardLogger(str(root), name="failed")
    with pytest.raises(RuntimeError, match=FAILURE):
        trainer(root, failed, learnscope_callbacks()).fit(FailsAtStep5(), train, val)
    stopped = TensorBoardLogger(str(root), name="stopped")
    run = trainer(root, stopped, [*learnscope_callbacks(), CtrlC(step=7)])
    with pytest.raises(SystemExit):  # Lightning's graceful shutdown after a Ctrl-C
        run.fit(ZeroBranch(), train, val)
    return root


def test_read_summaries_gives_one_summary_per_run(logdir: Path) -> None:
    summaries = learnscope.read_summaries(logdir)
    assert sorted(summaries) == ["failed/version_0", "finished/version_0", "stopped/version_0"]
    assert summaries == learnscope.read_summaries(str(logdir))  # a path as text reads the same


@pytest.mark.parametrize("run", ["finished/version_0", "failed/version_0", "stopped/version_0"])
def test_every_value_equals_the_one_recomputed_from_the_runs_files(logdir: Path, run: str) -> None:
    flat = learnscope.read_summaries(logdir)[run].flat()
    assert_same_summary(flat, expected_summary(logdir / run))
    assert all(name.count("/") + name.count(".") <= MAX_SEPARATORS for name in flat)


def test_the_runs_hold_what_the_summary_is_checked_on(logdir: Path) -> None:
    """The fits made what each check needs: findings, analyses, snapshots, each ending."""
    summaries = learnscope.read_summaries(logdir)
    finished, failed, stopped = (
        summaries[f"{name}/version_0"] for name in ("finished", "failed", "stopped")
    )
    assert (finished.status, failed.status, stopped.status) == ("finished", "failed", "interrupted")
    assert failed.error == f"RuntimeError: {FAILURE}" and finished.error is None
    assert (failed.last_step, stopped.last_step) == (5, 7)
    assert finished.first_finding is not None and finished.first_finding.code == "zero-gradient"
    assert {a.what for a in finished.analyses} == {"params", "grads"}
    assert finished.snapshots and finished.snapshots[0].count == 2


def test_a_run_without_its_end_is_running(logdir: Path) -> None:
    entries = record_lines(logdir / "finished/version_0")
    assert summarize_record(entries[:-1]).status == "running"
    assert summarize_record([*entries, {"kind": "run", "format": 1}]).status == "running"


def test_a_url_reads_the_same_summaries(logdir: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    for run in ("finished/version_0", "failed/version_0"):
        memory.pipe(
            f"/summary_sweep/{run}/{RECORD_FILE}", (logdir / run / RECORD_FILE).read_bytes()
        )
    local = learnscope.read_summaries(logdir)
    remote = learnscope.read_summaries("memory://summary_sweep")
    assert remote == {run: local[run] for run in ("finished/version_0", "failed/version_0")}


def test_only_what_is_inside_the_log_directory_is_read(logdir: Path, tmp_path: Path) -> None:
    """A folder reached through a link is not searched; a record that is a link is refused."""
    (tmp_path / "linked").symlink_to(logdir / "finished", target_is_directory=True)
    assert learnscope.read_summaries(tmp_path) == {}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / RECORD_FILE).symlink_to(logdir / "finished/version_0" / RECORD_FILE)
    with pytest.raises(OSError, match="run record of run: .*symbolic link"):
        learnscope.read_summaries(tmp_path)
