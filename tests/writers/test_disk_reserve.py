"""The free-space reserve: learnscope's large records never take the last free space of a disk.

Each test writes to a real small ``tmpfs`` (mounted for the test; without root or
``CAP_SYS_ADMIN`` the tests skip and say so, as in ``test_disk_full.py``), filled to leave a
known free space. A record that would leave less than the reserve is skipped, the first with one
warning; on ``ENOSPC`` learnscope gives back what it took (a snapshot's files written before
the one that did not fit, a cut line of the run record).
"""

from __future__ import annotations

import errno
import logging
import sys
from pathlib import Path

import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from learnscope.plugins.pipeline.base import RecordSkipped
from learnscope.plugins.pipeline.fanout import Writers
from learnscope.plugins.pipeline.run_record_writer import record_writer
from learnscope.plugins.tensorboard import projector_files
from learnscope.plugins.tensorboard.writer import TensorBoardWriter
from learnscope.records import EmbeddingSnapshot
from learnscope.run_directory.record import append_entries
from learnscope.run_directory.write_limits import WriteLimits
from tests.kit.callbacks import learnscope_callbacks
from tests.kit.disk import fill, free_bytes, small_disk
from tests.kit.models import TinyClassifier, loaders, trainer

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="tmpfs mounts are Linux only")

MIB = 1 << 20
RESERVE_OF_1_MIB = WriteLimits(reserve_fraction=0.0, reserve_min_bytes=MIB)
NO_RESERVE = WriteLimits(reserve_fraction=0.0, reserve_min_bytes=0)


def entry_names(run: Path) -> list[str]:
    return [e.tensor_name for e in projector_files.read_config(run).embeddings]


def test_a_snapshot_that_would_take_the_reserve_is_skipped_saying_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with small_disk(tmp_path / "disk", size_kib=4096) as disk:
        writer = TensorBoardWriter(disk / "run", limits=RESERVE_OF_1_MIB)
        writers = Writers([writer])  # strict mode: a skip is no failure, nothing is raised
        fill(disk, leave=MIB + 512 * 1024)  # 1.5 MiB free, 1 MiB of it the reserve
        large = torch.randn(2048, 64)  # 512 KiB of vectors: its files take more than 0.5 MiB
        with caplog.at_level(logging.WARNING, logger="learnscope"):
            with pytest.raises(RecordSkipped, match="1.5 MiB free and learnscope leaves 1.0"):
                writer.write_embedding(EmbeddingSnapshot("large", 0, large))  # said to the caller
            writers.write_embedding(EmbeddingSnapshot("large", 1, large))
            writers.write_embedding(EmbeddingSnapshot("small", 2, torch.randn(8, 3)))
        writers.close()
        assert entry_names(disk / "run") == ["small/step_000000002"]
        assert not (disk / "run" / "projector" / "large").exists()
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 1, said
        assert "snapshot large" in said[0] and "is not written" in said[0]
        assert "1.0 MiB" in said[0] and "WriteLimits" in said[0]
        assert writer.reserve.skipped == 2
        outcome = writers.outcomes[id(writer)]  # what the end-of-fit line counts
        assert outcome.written["write_embedding"] == 1 and outcome.lost["write_embedding"] == 1
        assert outcome.reason.startswith(f"the free-space reserve: {disk / 'run'} has 1.5 MiB")
        assert writers.active == [writer]  # skipping is not failing: the writer stays on
        assert free_bytes(disk) >= MIB  # the reserve is still free


def test_with_no_reserve_the_same_snapshot_is_written(tmp_path: Path) -> None:
    """The reference for the test above: the snapshot fits the disk, only not the reserve."""
    with small_disk(tmp_path / "disk", size_kib=4096) as disk:
        writer = TensorBoardWriter(disk / "run", limits=NO_RESERVE)
        fill(disk, leave=MIB + 512 * 1024)
        writer.write_embedding(EmbeddingSnapshot("large", 0, torch.randn(2048, 64)))
        writer.close()
        assert entry_names(disk / "run") == ["large/step_000000000"]


def test_write_limits_reject_what_is_no_reserve() -> None:
    for bad in ({"reserve_fraction": -0.1}, {"reserve_fraction": 1.5}, {"end_timeout_s": -1}):
        with pytest.raises(ValueError, match="must be"):
            WriteLimits(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reserve_min_bytes must be an int"):
        WriteLimits(reserve_min_bytes=1.5)  # type: ignore[arg-type]


def test_a_writer_keeps_the_reserve_of_the_limits_it_is_given(tmp_path: Path) -> None:
    """No disk to fill: a reserve larger than any disk skips every record, none keeps them."""
    huge = WriteLimits(reserve_fraction=0.0, reserve_min_bytes=1 << 60)
    skipping = TensorBoardWriter(tmp_path / "huge", limits=huge)
    with pytest.raises(RecordSkipped, match="the free-space reserve"):
        skipping.write_embedding(EmbeddingSnapshot("enc", 0, torch.randn(8, 3)))
    skipping.close()
    writing = TensorBoardWriter(tmp_path / "none", limits=NO_RESERVE)
    writing.write_embedding(EmbeddingSnapshot("enc", 0, torch.randn(8, 3)))
    writing.close()
    assert entry_names(tmp_path / "none") == ["enc/step_000000000"]
    assert not (tmp_path / "huge" / "projector").exists()
    with pytest.raises(ValueError, match="keeps the free-space reserve"):  # one reserve a folder
        TensorBoardWriter(tmp_path / "none", record=record_writer(tmp_path / "none"), limits=huge)


def test_a_snapshot_that_does_not_fit_leaves_none_of_its_files(tmp_path: Path) -> None:
    """On ENOSPC the tensor written before the metadata that did not fit is removed again."""
    with small_disk(tmp_path / "disk", size_kib=1024) as disk:
        run = disk / "run"
        run.mkdir()
        free = fill(disk, leave=64 * 1024)
        labels = [f"{n:04d}" + "x" * 200 for n in range(1024)]  # ~200 KiB of TSV
        snapshot = EmbeddingSnapshot("enc", 0, torch.randn(1024, 4), {"label": labels})
        with pytest.raises(OSError) as raised:
            projector_files.write_snapshot(run, snapshot)
        assert raised.value.errno == errno.ENOSPC
        assert [p for p in (run / "projector").rglob("*") if p.is_file()] == []
        assert free_bytes(disk) >= free  # the 16 KiB tensor gave its space back


def test_a_record_entry_that_does_not_fit_is_cut_back_out(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", size_kib=1024) as disk:
        record = disk / "record.jsonl"
        append_entries(record, [{"kind": "run", "n": 1}])
        before = record.read_bytes()
        fill(disk, leave=8 * 1024)
        with pytest.raises(OSError) as raised:
            append_entries(record, [{"kind": "big", "text": "y" * 200_000}])
        assert raised.value.errno == errno.ENOSPC
        assert record.read_bytes() == before  # no cut line left behind


@pytest.mark.usefixtures("lenient")
def test_a_fit_logging_through_lightning_finishes_on_a_nearly_full_disk(tmp_path: Path) -> None:
    """16 KiB free: the fit with learnscope (default reserve) ends as the one without."""
    ended = {}
    for name in ("without", "with"):
        with small_disk(tmp_path / name) as disk:
            fill(disk, leave=16 * 1024)
            logger = TensorBoardLogger(str(disk), name="run")
            extra = learnscope_callbacks() if name == "with" else []
            fit = trainer(disk.parent, logger, extra, max_epochs=2)
            try:
                fit.fit(TinyClassifier(), *loaders(n_train=16 * 50))
                ended[name] = ("finished", fit.current_epoch, fit.global_step)
            except OSError as error:
                ended[name] = ("failed", error.errno, str(error))
    assert ended["without"] == ("finished", 2, 100)
    assert ended["with"] == ended["without"]
