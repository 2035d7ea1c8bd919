"""The end-of-fit line counts what reached each place, and says what did not and why.

Real fits of the tiny models with the three callbacks, logging to a ``TensorBoardLogger`` in
``tmp_path``, under a free-space reserve larger than the disk's free space (no small disk is
needed: the reserve is set as large as 1 EiB, see :mod:`learnscope.run_directory.write_limits`),
from the start or from the end of the first validation epoch on. What the run directory holds is
read back as the dashboards read it (the run record through ``RecordReader``, the projector config,
the event files through TensorBoard's ``EventAccumulator``), and the line's figures are checked
against it. Strict mode is on: a record skipped for the reserve is no failure.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
from lightning.pytorch.loggers import TensorBoardLogger

from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from learnscope.lightning_glue import session as writer_session
from learnscope.lightning_glue.session import WriterSession
from learnscope.plugins.tensorboard import projector_files
from learnscope.run_directory.file_names import PROJECTOR_CONFIG, RECORD_FILE
from learnscope.run_directory.record import RecordReader
from learnscope.run_directory.write_limits import WriteLimits
from tests.kit.models import ZeroBranch, loaders, trainer
from tests.kit.readers import read_events

HUGE = 1 << 60  # a reserve no disk has free
PICTURE = "~learnscope/embeddings/encoder/validate/pca"
COUNTS = re.compile(
    r"learnscope wrote (\d+) embedding snapshots?, (\d+) autocorrelation analys[ie]s and "
    r"(\d+) findings? in this fit"
)


@pytest.fixture
def lightning_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """learnscope's records and those of Lightning's logger (which does not propagate)."""
    logger = logging.getLogger("lightning.pytorch")
    added = not logger.propagate
    if added:
        logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="lightning.pytorch")
    caplog.set_level(logging.INFO, logger="learnscope")
    yield caplog
    if added:
        logger.removeHandler(caplog.handler)


class ReserveBites(pl.Callback):
    """Raises the reserve above the free space once the first validation epoch is written."""

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        if trainer.sanity_checking or trainer.current_epoch != 0:
            return
        session = writer_session.find(trainer)
        assert session is not None
        session.drain()  # the first epoch's snapshot, analysis and findings are on disk
        for writer in session.writers().active:  # the disk's free space falls below the reserve
            writer.reserve.limits = WriteLimits(reserve_min_bytes=HUGE)


def fit(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    *extra: pl.Callback,
    write_limits: WriteLimits | None = None,
) -> tuple[Path, str]:
    """A two-epoch fit with the three callbacks; its run directory and its end-of-fit line."""
    logger = TensorBoardLogger(str(tmp_path), name="tb")
    callbacks = [
        EmbeddingProjector(ids_fn="dataset_index", aligned_pca=True),
        ModelAutocorrelation(
            analyze_every_n_steps=4, buffer_size=8, lags=(1,), write_limits=write_limits
        ),
        TrainingHelper(check_every_n_steps=3),
        *extra,
    ]
    trainer(tmp_path, logger, callbacks, max_epochs=2).fit(ZeroBranch(), *loaders())
    said = [r.getMessage() for r in caplog.records if r.name.endswith(".learnscope")]
    (line,) = [m for m in said if m.startswith("learnscope wrote")]
    return Path(logger.log_dir), line


def learnscope_event_files(run: Path) -> list[Path]:
    return sorted(run.glob("events.out.tfevents.*.learnscope"))


def reserve_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "learnscope" and "learnscope leaves" in r.getMessage()
    ]


def test_a_reserve_larger_than_the_free_space_from_the_start_claims_nothing(
    tmp_path: Path, lightning_log: pytest.LogCaptureFixture
) -> None:
    run, line = fit(tmp_path, lightning_log, write_limits=WriteLimits(reserve_min_bytes=HUGE))

    # nothing of learnscope's is in the run directory
    assert not (run / RECORD_FILE).exists()
    assert not (run / PROJECTOR_CONFIG).exists()
    assert not (run / "projector").exists()
    assert learnscope_event_files(run) == []
    assert not any(t.startswith("~learnscope/") for t in read_events(run).Tags()["scalars"])

    # and the line says so: nothing written, what was not and why, no command to open it
    assert line.startswith(
        "learnscope wrote 0 embedding snapshots, 0 autocorrelation analyses and 0 findings in "
        "this fit; nothing to TensorBoardLogger (2 embedding snapshots, 3 autocorrelation "
        "analyses and "
    ), line
    assert f"other records not written: the free-space reserve: {run} has " in line
    assert "free and learnscope leaves 1024.0 PiB)" in line
    assert "Open it with" not in line and f"to {run}" not in line
    assert len(reserve_warnings(lightning_log)) == 1  # said once when skipping began


def test_a_reserve_that_bites_mid_fit_is_counted_against_what_is_on_disk(
    tmp_path: Path, lightning_log: pytest.LogCaptureFixture
) -> None:
    run, line = fit(tmp_path, lightning_log, ReserveBites())

    entries = RecordReader(run / RECORD_FILE).read()
    kinds = [e["kind"] for e in entries]
    snapshots = kinds.count("snapshot")
    analyses = len({e["step"] for e in entries if e["kind"] == "autocorrelation"})
    findings = [len(e["rows"]) for e in entries if e["kind"] == "findings"][-1]
    assert snapshots == 1 and kinds[0] == "run" and kinds[-1] != "end"  # the end was skipped
    assert len(projector_files.read_config(run).embeddings) == snapshots
    events = read_events(run)
    assert len(events.Images(PICTURE)) == snapshots  # the Images tab has the first epoch's

    counts = COUNTS.match(line)
    assert counts is not None, line
    assert tuple(map(int, counts.groups())) == (snapshots, analyses, findings)
    assert line.startswith(f"{counts[0]}, to {run} (1 embedding snapshot, ")
    assert f"other records not written: the free-space reserve: {run} has " in line
    lost_analyses = re.search(r"(\d+) autocorrelation analys[ie]s and \d+ other records not", line)
    assert lost_analyses is not None and int(lost_analyses[1]) == 3 - analyses  # 3 were made
    assert f"Open it with: tensorboard --logdir {tmp_path}" in line  # it holds the first epoch
    assert len(reserve_warnings(lightning_log)) == 1


def test_with_room_the_line_counts_every_record_and_says_nothing_was_lost(
    tmp_path: Path, lightning_log: pytest.LogCaptureFixture
) -> None:
    """The reference of the tests above: the same fit with the default reserve."""
    run, line = fit(tmp_path, lightning_log)

    entries = RecordReader(run / RECORD_FILE).read()
    analyses = len({e["step"] for e in entries if e["kind"] == "autocorrelation"})
    assert line.startswith(
        f"learnscope wrote 2 embedding snapshots, {analyses} autocorrelation analyses and 1 "
        f"finding in this fit, to {run}. "
    ), line
    assert "not written" not in line and entries[-1]["kind"] == "end"
    assert len(read_events(run).Images(PICTURE)) == 2


class Metrics:
    """A logger of learnscope's scalars (as a CSV logger): ``log_metrics`` fails at ``bad``."""

    def __init__(self, save_dir: str, bad: set[int]) -> None:
        self.save_dir = save_dir
        self.bad = bad
        self.steps: list[int] = []

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        if step in self.bad:
            raise OSError(5, "Input/output error")
        self.steps.append(step)


def test_places_that_got_less_are_named_with_their_own_counts(lenient: None) -> None:
    whole, short, none = Metrics("a", set()), Metrics("b", {1}), Metrics("c", {0, 1, 2})
    session = WriterSession([whole, short, none], is_global_zero=True)
    for step in range(3):
        session.writers().write_scalars({"loss": 0.5}, step)
    session.close(step=3)

    line = session.summary()
    assert line == (
        "learnscope wrote 0 embedding snapshots, 0 autocorrelation analyses and 0 findings in "
        "this fit, to Metrics (a); 0 embedding snapshots, 0 autocorrelation analyses and 0 "
        "findings to Metrics (b) (1 record not written: OSError: [Errno 5] Input/output error); "
        "nothing to Metrics (3 records not written: OSError: [Errno 5] Input/output error)"
    )
    assert (whole.steps, short.steps, none.steps) == ([0, 1, 2], [0, 2], [])
