"""Runs on object storage: everything learnscope writes goes to the logger's URL, nothing local.

A fit with ``TensorBoardLogger("s3://...")`` on a real local S3 server (moto, behind the proxy
of ``tests/kit/s3_server.py``) leaves the Projector files, the event files with the pictures and
findings, the Custom Scalars layout and the run record (as immutable segments) in the bucket;
TensorBoard's own readers read them back from there. Faults injected at the server (refused
and slow requests) leave the fit finished and the reason said in the end-of-fit line.
``memory://`` (fsspec's in-process store) checks the writer alone, fast.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

import fsspec
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from learnscope.plugins.pipeline.loggers import logger_writers
from learnscope.plugins.tensorboard import projector_files
from learnscope.plugins.tensorboard.layout import multiline
from learnscope.plugins.tensorboard.writer import TensorBoardWriter
from learnscope.records import EmbeddingSnapshot, Finding, RunEnd, RunStart
from learnscope.run_directory.file_names import LAYOUT_FILE, PROJECTOR_CONFIG, RECORD_SEGMENTS
from learnscope.run_directory.record import RecordReader
from learnscope.run_directory.write_limits import WriteLimits
from learnscope.storage import MissingFileSystem, open_run_folder
from tests.kit.models import ZeroBranch, loaders, trainer
from tests.kit.readers import read_events
from tests.kit.s3_server import LocalS3
from tests.kit.tb_server import tensorboard

pytest_plugins = ["tests.kit.s3_server"]  # s3_endpoint, s3_env, s3_fail_fast

# The objects learnscope writes (the buckets' own names start with "learnscope" too).
LEARNSCOPE_FILES = (
    r"/learnscope_record\.d/|/projector/|/projector_config|\.learnscope$|_scalars\.json"
)


@pytest.fixture
def memory_store() -> Any:
    """fsspec's in-process file system, empty before and after the test."""
    fs = fsspec.filesystem("memory")
    fs.store.clear()
    fs.pseudo_dirs[:] = [""]
    yield fs
    fs.store.clear()
    fs.pseudo_dirs[:] = [""]


def three_callbacks(write_limits: WriteLimits | None = None) -> list[Any]:
    return [
        EmbeddingProjector(ids_fn="dataset_index", aligned_pca=True, write_limits=write_limits),
        ModelAutocorrelation(analyze_every_n_steps=4, buffer_size=8, lags=(1,)),
        TrainingHelper(check_every_n_steps=3),
    ]


def test_a_writer_on_memory_writes_every_file_there_and_nothing_local(
    memory_store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    writer = TensorBoardWriter("memory://runs/version_0")
    writer.write_run_start(RunStart())
    for step in (3, 6):
        labels = {"label": [0, 1, 2, 0, 1, 2]}
        writer.write_embedding(EmbeddingSnapshot("enc", step, torch.randn(6, 4), labels))
    writer.write_scalars({"loss": 0.5}, step=6)
    writer.add_charts({"loss": {"all": multiline(["loss"])}})
    writer.write_findings([Finding("zero-gradient", "head.bias", "is zero", 6)], step=6)
    writer.write_run_end(RunEnd(6))
    writer.close()

    assert list(tmp_path.iterdir()) == []  # no local folder named "memory:"
    names = {name.removeprefix("/runs/version_0/") for name in memory_store.find("/runs")}
    assert PROJECTOR_CONFIG in names and LAYOUT_FILE in names
    for step in ("step_000000003", "step_000000006"):
        assert f"projector/enc/{step}/tensor.bin" in names
        assert f"projector/enc/{step}/metadata.tsv" in names
    segments = sorted(n for n in names if n.startswith(f"{RECORD_SEGMENTS}/"))
    assert len(segments) == 5  # run, two snapshots, findings, end: one object each
    events = sorted(n for n in names if n.startswith("events.out.tfevents."))
    assert events and all(n.endswith(".learnscope") for n in events)

    folder = open_run_folder("memory://runs/version_0")
    config = projector_files.read_config(folder)
    assert [e.tensor_name for e in config.embeddings] == [
        "enc/step_000000003",
        "enc/step_000000006",
    ]
    entries = RecordReader(folder.record_source()).read()
    assert [e["kind"] for e in entries] == ["run", "snapshot", "snapshot", "findings", "end"]
    tensor = entries[1]["tensor"]
    data = folder.read(tensor["path"], max_bytes=1 << 20, size=6 * 4 * 4)
    assert len(data) == 96


def test_a_log_dir_whose_file_system_is_missing_gets_no_writer_and_no_local_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("fsspec")
    if _installed("gcsfs"):
        pytest.skip("gcsfs is installed here")
    monkeypatch.chdir(tmp_path)

    class TensorBoardLogger:
        log_dir = "gs://bucket/runs/version_0"
        save_dir = "gs://bucket/runs"

        def log_metrics(self, metrics: Any, step: Any) -> None:
            pass

    with pytest.raises(MissingFileSystem, match="'gcsfs'.*pip install gcsfs"):
        TensorBoardWriter("gs://bucket/runs/version_0")
    with caplog.at_level(logging.ERROR, logger="learnscope"):
        made = logger_writers(TensorBoardLogger())
    assert (
        made.writers == []
        and made.unwritable == "no 'gcsfs' package for gs://bucket/runs/version_0"
    )
    (said,) = [r.getMessage() for r in caplog.records if "gcsfs" in r.getMessage()]
    assert "pip install gcsfs" in said and "writes nothing for TensorBoardLogger" in said
    assert list(tmp_path.iterdir()) == []


def _installed(package: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(package) is not None


def _fit_to_s3(
    s3: LocalS3,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: Any,
    write_limits: WriteLimits | None = None,
) -> tuple[str, str]:
    """A fit with the three callbacks logging to a new bucket; (its run URL, the end line)."""
    monkeypatch.chdir(tmp_path)
    bucket = s3.bucket()
    logger = TensorBoardLogger(f"s3://{bucket}/tb")
    with caplog.at_level(logging.INFO, logger="learnscope"):
        run = trainer(tmp_path / "root", logger, three_callbacks(write_limits), max_epochs=2)
        run.fit(ZeroBranch(), *loaders())
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("learnscope")]
    end = [line for line in lines if "in this fit" in line]
    assert len(end) == 1, lines
    return logger.log_dir, end[0]


def test_a_fit_to_s3_leaves_every_file_in_the_bucket_and_none_locally(
    s3_env: LocalS3,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    run_url, line = _fit_to_s3(s3_env, tmp_path, monkeypatch, caplog)

    assert not any(p.name.startswith("s3") for p in tmp_path.iterdir())  # no local "s3:" folder
    root = run_url.removeprefix("s3://")
    names = {n.removeprefix(f"{root}/") for n in fsspec.filesystem("s3").find(root)}
    assert PROJECTOR_CONFIG in names and LAYOUT_FILE in names
    assert any(n.startswith(f"{RECORD_SEGMENTS}/") for n in names)
    assert sum(n.endswith("/tensor.bin") for n in names) == 2  # two validation epochs
    assert any(n.endswith(".learnscope") for n in names)

    folder = open_run_folder(run_url)
    entries = RecordReader(folder.record_source()).read()
    kinds = [e["kind"] for e in entries]
    assert kinds[0] == "run" and kinds[-1] == "end" and kinds.count("snapshot") == 2
    assert "autocorrelation" in kinds and "findings" in kinds
    assert entries[-1]["status"] == "finished"

    # TensorBoard's own readers, through its S3 file system (S3_ENDPOINT names the server).
    events = read_events(run_url)
    tags = events.Tags()
    assert "~learnscope/embeddings/encoder/validate/pca" in tags["images"]
    assert "~learnscope/autocorrelation/params/acf" in tags["images"]
    config = projector_files.read_config(folder)
    assert len(config.embeddings) == 2

    assert f"to {run_url}" in line  # the place named is where the files went
    logdir = run_url.rsplit("/lightning_logs", 1)[0]
    assert f"tensorboard --logdir {logdir}" in line
    assert "not written" not in line

    # A TensorBoard server on the bucket: the Projector lists every snapshot as written (it
    # cannot load their tensors from a cloud path: tensorflow/tensorboard#1047, its asset paths
    # go through os.path.realpath), the Images tab has the pictures.
    run = "lightning_logs/version_0"
    with tensorboard(logdir) as server:
        server.wait_for("/data/plugin/projector/runs", lambda runs: run in runs, timeout=60)
        info = server.json("/data/plugin/projector/info", run=run)
        names = [e["tensorName"] for e in info["embeddings"]]
        assert names == [e.tensor_name for e in config.embeddings]
        pca = "~learnscope/embeddings/encoder/validate/pca"
        images = server.wait_for(
            "/data/plugin/images/tags", lambda tags: pca in tags.get(run, {}), timeout=60
        )
        assert "~learnscope/autocorrelation/params/acf" in images[run]


def test_a_store_that_refuses_learnscopes_writes_leaves_the_fit_finished_and_says_why(
    s3_fail_fast: LocalS3,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    lenient: None,
) -> None:
    s3_fail_fast.faults.refuse(503, "SlowDown", methods={"PUT"}, match=r"/projector/")
    run_url, line = _fit_to_s3(s3_fail_fast, tmp_path, monkeypatch, caplog)

    assert s3_fail_fast.requests.refused >= 2
    entries = RecordReader(open_run_folder(run_url).record_source()).read()
    assert entries[-1]["kind"] == "end" and entries[-1]["status"] == "finished"
    assert [e for e in entries if e["kind"] == "snapshot"] == []  # refused, not half written
    analyses = len({e["step"] for e in entries if e["kind"] == "autocorrelation"})
    # the line counts what is in the bucket, and names what is not and why
    assert line.startswith(f"learnscope wrote 0 embedding snapshots, {analyses} autocorrelation")
    assert f"to {run_url} (2 embedding snapshots not written: " in line
    assert "reduce your request rate" in line or "SlowDown" in line or "Busy" in line


def test_a_slow_store_slows_no_training_step_beyond_the_queue(
    s3_env: LocalS3,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    s3_env.faults.slow(0.5, methods={"PUT"}, match=r"/projector/|learnscope_record\.d")
    run_url, line = _fit_to_s3(s3_env, tmp_path, monkeypatch, caplog)

    entries = RecordReader(open_run_folder(run_url).record_source()).read()
    assert [e["kind"] for e in entries].count("snapshot") == 2
    assert "not written" not in line


def test_credentials_refused_mid_run_switch_the_writer_off_once(
    s3_fail_fast: LocalS3,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    lenient: None,
) -> None:
    s3_fail_fast.faults.refuse(403, "ExpiredToken", methods={"PUT"}, match=LEARNSCOPE_FILES)
    run_url, line = _fit_to_s3(s3_fail_fast, tmp_path, monkeypatch, caplog)

    switched_off = [r for r in caplog.records if "switched off for the rest" in r.getMessage()]
    assert len(switched_off) == 1 and "credentials" in switched_off[0].getMessage()
    assert "ExpiredToken" in line or "PermissionError" in line or "denied" in line.lower()
    assert os.environ.get("AWS_MAX_ATTEMPTS") == "1"


def learnscope_objects(run_url: str) -> list[str]:
    """The objects learnscope wrote under ``run_url`` (listed afresh)."""
    fs = fsspec.filesystem("s3")
    fs.invalidate_cache()
    return [n for n in fs.find(run_url.removeprefix("s3://")) if re.search(LEARNSCOPE_FILES, n)]


def check_refused_throughout(line: str, caplog: pytest.LogCaptureFixture) -> str:
    """The line and the messages of a fit whose every learnscope write was refused; the
    message that switched the writer off."""
    said = [r.getMessage() for r in caplog.records if r.name == "learnscope"]
    (off,) = [m for m in said if "switched off for the rest" in m]
    assert "reduce your request rate" in off and "not written there" in off
    assert not [m for m in said if "abandoning" in m]  # the end did not wait out its bound
    assert line.startswith(
        "learnscope wrote 0 embedding snapshots, 0 autocorrelation analyses and 0 findings in "
        "this fit; nothing to TensorBoardLogger (2 embedding snapshots, 3 autocorrelation "
        "analyses and "
    ), line
    assert (
        "other records not written: OSError: [Errno 16] Please reduce your request rate.)" in line
    )
    assert "Open it with" not in line
    return off


@pytest.mark.slow
def test_a_store_that_refuses_every_learnscope_write_switches_the_writer_off_once(
    s3_fail_fast: LocalS3,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    lenient: None,
) -> None:
    s3_fail_fast.faults.refuse(503, "SlowDown", methods={"PUT"}, match=LEARNSCOPE_FILES)
    run_url, line = _fit_to_s3(s3_fail_fast, tmp_path, monkeypatch, caplog)

    off = check_refused_throughout(line, caplog)
    assert "failed in write_scalars" in off and "its last 3 records failed" in off
    skipped = [r for r in caplog.records if "that record is skipped" in r.getMessage()]
    assert len(skipped) == 2  # run_start and the first scalars, then the writer is off
    assert s3_fail_fast.requests.refused == 3  # nothing is tried once it is off
    assert learnscope_objects(run_url) == []


@pytest.mark.slow
def test_a_refusal_the_client_retried_until_it_gave_up_does_not_hold_the_fit_end(
    s3_env: LocalS3,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    lenient: None,
) -> None:
    """The client's default retries: one refused write takes about 30-40 s (s3_server.py);
    before, the end of the fit waited for each queued record to fail the same way."""
    s3_env.faults.refuse(503, "SlowDown", methods={"PUT"}, match=LEARNSCOPE_FILES)
    limits = WriteLimits(end_timeout_s=120)
    run_url, line = _fit_to_s3(s3_env, tmp_path, monkeypatch, caplog, limits)

    off = check_refused_throughout(line, caplog)
    assert "failed in write_run_start" in off and "the client retried them" in off
    assert s3_env.requests.refused == 25  # one record: botocore's 5 attempts, 5 times by s3fs
    assert learnscope_objects(run_url) == []


def test_a_damaged_config_on_a_store_is_set_aside_and_a_new_one_started(
    memory_store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    folder = open_run_folder("memory://runs/damaged")
    folder.write(PROJECTOR_CONFIG, b"embeddings { tensor_name: ")  # cut short
    writer = TensorBoardWriter("memory://runs/damaged")
    with caplog.at_level(logging.WARNING, logger="learnscope"):
        writer.write_embedding(EmbeddingSnapshot("enc", 3, torch.randn(4, 2)))
    writer.close()

    _, files = folder.listing()
    (aside,) = [name for name in files if name.startswith(f"{PROJECTOR_CONFIG}.corrupt-")]
    assert folder.read(aside, max_bytes=100) == b"embeddings { tensor_name: "  # kept as found
    names = [e.tensor_name for e in projector_files.read_config(folder).embeddings]
    assert names == ["enc/step_000000003"]
    (said,) = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
    assert aside in said and "memory://runs/damaged/projector_config.pbtxt" in said
