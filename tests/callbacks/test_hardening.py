"""Hardening in real fits: resume, both Lightning packages, any logger, failures, bad input.

The DDP cases are in ``test_ddp.py``. Cases tested elsewhere, and not repeated here:
``test_embedding_projector.py`` (wrong metadata length fails in the sanity check or, later, is
switched off; non-tensor output without ``select``; ``[B, T, D]`` outputs give one row per token
with ``position``; unknown module fails at setup; no logger and CSV warnings of the projector),
``test_projector_files.py`` (tabs, newlines and non-ASCII values in the metadata file; tags that
try to leave the run directory; bfloat16 vectors; more than 100,000 rows).
"""

from __future__ import annotations

import csv
import importlib
import json
import logging
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from learnscope.lightning_glue import EmbeddingProjector, TrainingHelper
from learnscope.plugins.tensorboard.layout import LAYOUT_FILE
from tests.kit.models import (
    AfterFirstEpoch,
    NanProbe,
    QuietZeroBranch,
    TinyClassifier,
    ZeroBranch,
    blobs,
    loaders,
    trainer,
)
from tests.kit.readers import ProjectorReader, parse_metadata, wandb_history, wandb_records

try:  # landed with the autocorrelation issue
    from learnscope.lightning_glue import ModelAutocorrelation  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - until then
    ModelAutocorrelation = None


def labels(batch: Any) -> dict[str, Any]:
    return {"label": batch[1]}


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "learnscope" and r.levelno >= logging.WARNING
    ]


def all_callbacks(namespace: Any = None, **projector: Any) -> list[Any]:
    """The callbacks of ``namespace`` (default: ``learnscope.lightning_glue``'s)."""
    made = namespace or importlib.import_module("learnscope.lightning_glue")
    callbacks = [
        made.EmbeddingProjector("encoder", metadata_fn=labels, **projector),
        made.TrainingHelper(check_every_n_steps=5),
    ]
    if ModelAutocorrelation is not None:
        callbacks.append(
            made.ModelAutocorrelation(
                buffer_size=8, analyze_every_n_steps=4, lags=(1, 2), all_scalars=True
            )
        )
    return callbacks


# -- resume ------------------------------------------------------------------------------


def wandb_runs(root: Path) -> list[Path]:
    return sorted(root.rglob("offline-run-*"))


def test_resumed_run_keeps_every_entry_and_continues_steps(
    tmp_path: Path, wandb_dir: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    checkpoints = tmp_path / "checkpoints"

    def fit(max_epochs: int, ckpt_path: str | None) -> list[Any]:
        torch.manual_seed(0)
        callbacks = all_callbacks(ids_fn="dataset_index", aligned_pca=True)
        tb = TensorBoardLogger(str(tmp_path), name="tb", version=0)
        wb = WandbLogger(project="t", save_dir=str(wandb_dir), id="resumed", resume="allow")
        saver = ModelCheckpoint(dirpath=checkpoints, save_last=True, save_top_k=0)
        run = trainer(
            tmp_path,
            [tb, wb],
            [*callbacks, saver],
            max_epochs=max_epochs,
            enable_checkpointing=True,
        )
        run.fit(ZeroBranch(), *loaders(), ckpt_path=ckpt_path)
        assert run.global_step == 6 * max_epochs
        wb.experiment.finish()
        return callbacks

    first = fit(2, None)
    saved = torch.load(checkpoints / "last.ckpt", weights_only=False)["callbacks"]
    assert {c.state_key for c in first} <= set(saved)
    second = fit(4, str(checkpoints / "last.ckpt"))

    steps = [6, 12, 18, 24]
    reader = ProjectorReader(tmp_path / "tb")
    (run,) = reader.runs()
    assert reader.names(run) == [f"encoder/validate/step_{s:09d}" for s in steps]  # earlier kept
    events = EventAccumulator(str(tmp_path / "tb" / "version_0"), size_guidance={"scalars": 0})
    events.Reload()
    assert [s.step for s in events.Scalars("~learnscope/health/grad_norm/encoder")] == [
        0,
        5,
        10,
        11,  # the first fit's last step
        15,
        20,
        23,  # the resumed fit's last step
    ]
    images = [i.step for i in events.Images("~learnscope/embeddings/encoder/validate/pca")]
    assert images == steps
    if ModelAutocorrelation is not None:  # analyses go on; the layout of the first run stays
        lag_1 = events.Scalars("~learnscope/autocorrelation/params/encoder/lag_1")
        assert [s.step for s in lag_1] == [4, 8, 12, 16, 20, 24]
        assert events.Tensors("custom_scalars__config__")
        layout = json.loads((tmp_path / "tb" / "version_0" / LAYOUT_FILE).read_text())
        assert "autocorrelation/params/encoder" in layout["layout"]

    # the state came back: the same findings, first seen in the first fit and seen again in
    # the resumed one (not warned again), the same PCA view keys
    def said(findings: list[Any]) -> list[tuple[str, str, int | None, str]]:
        return [(f.code, f.subject, f.first_step, f.message) for f in findings]

    assert said(second[1].findings) == said(first[1].findings)
    assert [f.step for f in first[1].findings] == [11]
    assert [f.step for f in second[1].findings] == [23]
    zero_gradient = [m for m in messages(learnscope_log) if "zero-gradient branch" in m]
    assert len(zero_gradient) == 1
    assert set(second[0].state_dict()["limits"]) == set(first[0].state_dict()["limits"])

    # offline, a resumed wandb run is a second directory with the same run id, whose history
    # goes on at the resumed trainer step
    runs = wandb_runs(wandb_dir)
    # (wandb adds "-1" to the second directory's name when both runs start in the same second)
    assert len(runs) == 2 and all(re.search(r"-resumed(-1)?$", r.name) for r in runs)
    logged = [
        [
            h["trainer/global_step"]
            for h in wandb_history(r)
            if "~learnscope/embeddings/encoder/validate" in h
        ]
        for r in runs
    ]
    assert logged == [steps[:2], steps[2:]]


# -- both Lightning packages, any logger ------------------------------------------------------


def classifier(base: type) -> Any:
    """TinyClassifier's model on the LightningModule of either package."""

    class Classifier(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 8))
            self.head = nn.Linear(8, 3)
            self.branch = nn.Linear(6, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.encoder(x) + 0 * self.branch(x))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return nn.functional.cross_entropy(self(batch[0]), batch[1])

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val_loss", nn.functional.cross_entropy(self(batch[0]), batch[1]))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    return Classifier()


def csv_rows(logger: Any) -> list[dict[str, str]]:
    with open(Path(logger.log_dir) / "metrics.csv", newline="") as file:
        return list(csv.DictReader(file))


def logged_steps(rows: list[dict[str, str]], key: str) -> list[int]:
    return [int(row["step"]) for row in rows if row.get(key)]


@pytest.mark.parametrize("package", ["lightning.pytorch", "pytorch_lightning"])
def test_real_fit_with_either_lightning_package(
    tmp_path: Path, package: str, learnscope_log: pytest.LogCaptureFixture
) -> None:
    pl = importlib.import_module(package)
    loggers = importlib.import_module(f"{package}.loggers")
    tb = loggers.TensorBoardLogger(str(tmp_path), name="tb")
    csv_logger = loggers.CSVLogger(str(tmp_path), name="csv")
    namespace = {
        "lightning.pytorch": "learnscope.lightning_glue",
        "pytorch_lightning": "learnscope.lightning_glue.pytorch_lightning",
    }
    callbacks = all_callbacks(importlib.import_module(namespace[package]))
    run = pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        logger=[tb, csv_logger],
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        default_root_dir=str(tmp_path),
    )
    run.fit(classifier(pl.LightningModule), *loaders())
    assert run.global_step == 12 and all(not c.switched_off for c in callbacks)

    names = ProjectorReader(tmp_path / "tb").names("version_0")
    assert names == ["encoder/validate/step_000000006", "encoder/validate/step_000000012"]
    assert callbacks[1].findings[0].code == "zero-gradient"
    rows = csv_rows(csv_logger)
    assert logged_steps(rows, "learnscope/health/grad_norm/encoder") == [0, 5, 10, 11]  # 11: last
    if ModelAutocorrelation is not None:
        assert logged_steps(rows, "learnscope/autocorrelation/params/encoder/lag_1")


def test_csv_logger_gets_the_scalar_summaries_with_one_warning_per_callback(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    csv_logger = CSVLogger(str(tmp_path), name="csv")
    run = trainer(tmp_path, [csv_logger], all_callbacks(), max_steps=20, max_epochs=-1)
    run.fit(ZeroBranch(), *loaders())
    assert run.global_step == 20

    rows = csv_rows(csv_logger)
    assert logged_steps(rows, "learnscope/health/grad_norm/encoder") == [0, 5, 10, 15, 19]
    assert logged_steps(rows, "learnscope/health/weight_norm/head") == [0, 5, 10, 15, 19]
    assert logged_steps(rows, "learnscope/health/collapse/encoder/rankme")  # collapse metrics
    unshown = sorted(m for m in messages(learnscope_log) if "cannot show" in m)
    expected = [
        "learnscope: LoggerMetricsWriter(CSVLogger) cannot show embedding records; they are "
        "not written there",
        "learnscope: LoggerMetricsWriter(CSVLogger) cannot show findings records; they are not "
        "written there",  # no histogram by default
    ]
    if ModelAutocorrelation is not None:
        assert logged_steps(rows, "learnscope/autocorrelation/params/encoder/lag_1") == [
            4,
            8,
            12,
            16,
            20,
        ]
        expected.append(
            "learnscope: LoggerMetricsWriter(CSVLogger) cannot show autocorrelation charts; it "
            "gets the autocorrelation scalars only"
        )
    assert unshown == sorted(expected)


def test_without_any_logger_one_warning_and_findings_on_the_python_logger(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    callbacks = all_callbacks()[:2]
    run = trainer(tmp_path, False, callbacks, max_steps=10, max_epochs=-1)
    run.fit(ZeroBranch(), *loaders())
    logged = messages(learnscope_log)
    assert [m for m in logged if "no logger" in m] == [
        "learnscope: no logger to show embedding; add a TensorBoardLogger or WandbLogger"
    ]
    assert [m for m in logged if "zero-gradient" in m] == [
        "learnscope: zero-gradient branch: branch.weight, branch.bias got a gradient of exactly "
        "zero: the output of this part does not change the loss (multiplied by zero, detached, "
        "or dead activations) (step 5). Try: Check that this part's output reaches the loss (not "
        "detached, not multiplied by zero) and that its activations fire (dead ReLUs: lower the "
        "learning rate or use a leaky activation)."
    ]


# -- failures never stop training ------------------------------------------------------------


def switched_off_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.name == "learnscope" and "switched off" in r.getMessage()
    ]


def test_projector_folder_replaced_by_a_file_mid_run(
    lenient: None, tmp_path: Path, wandb_dir: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    """Every later snapshot of one writer fails (tests run as root, where chmod would not stop
    writes): each is skipped with a message, and that writer's scalars go on.

    Not the whole run directory: Lightning's own TensorBoardLogger then fails at the end of the
    fit, whatever learnscope does.
    """
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    wb = WandbLogger(project="t", save_dir=str(wandb_dir))

    def break_run_directory(log_dir: Path) -> None:
        shutil.rmtree(Path(tb.log_dir) / "projector")
        (Path(tb.log_dir) / "projector").write_text("not a directory")

    callbacks = all_callbacks()
    run = trainer(tmp_path, [tb, wb], [*callbacks, AfterFirstEpoch(break_run_directory)])
    run.fit(QuietZeroBranch(), *loaders())
    assert run.current_epoch == 2 and run.global_step == 12  # training finished

    assert switched_off_errors(learnscope_log) == []  # one failed record: skipped, not off
    (error,) = [r for r in learnscope_log.records if "failed in" in r.getMessage()]
    assert error.getMessage().startswith("learnscope: TensorBoardWriter(")
    assert "failed in write_embedding on encoder/validate at step 12" in error.getMessage()
    assert "record is skipped" in error.getMessage() and error.exc_info is not None
    events = EventAccumulator(tb.log_dir, size_guidance={"scalars": 0})
    events.Reload()
    steps = [e.step for e in events.Scalars("~learnscope/health/grad_norm/encoder")]
    assert steps == [0, 5, 10, 11]  # the same writer's scalars went on after the failure
    wb.experiment.finish()
    history = wandb_history(wandb_runs(wandb_dir)[0])
    tables = [
        h["trainer/global_step"] for h in history if "~learnscope/embeddings/encoder/validate" in h
    ]
    assert tables == [6, 12]  # the other writer went on
    assert [
        h["trainer/global_step"] for h in history if "~learnscope/health/grad_norm/encoder" in h
    ] == [
        0,
        5,
        10,
        11,  # the fit's last step
    ]


def test_wandb_run_finished_early(
    lenient: None, tmp_path: Path, wandb_dir: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    wb = WandbLogger(project="t", save_dir=str(wandb_dir))
    callbacks = all_callbacks()
    finish = AfterFirstEpoch(lambda log_dir: wb.experiment.finish())
    run = trainer(tmp_path, [tb, wb], [*callbacks, finish], log_every_n_steps=1000)
    run.fit(QuietZeroBranch(), *loaders())
    assert run.current_epoch == 2 and run.global_step == 12

    errors = switched_off_errors(learnscope_log)
    assert errors and all(
        "WandbWriter(" in r.getMessage() or "WandbPageWriter(" in r.getMessage() for r in errors
    )
    assert all("its wandb run has finished" in r.getMessage() for r in errors)  # permanent
    assert len(errors) == len({r.getMessage() for r in errors})  # once per callback's writers
    assert all(r.exc_info is not None for r in errors)
    names = ProjectorReader(tmp_path / "tb").names("version_0")
    assert names == [f"encoder/validate/step_{s:09d}" for s in (6, 12)]  # TensorBoard went on


def test_metadata_fn_raising_mid_run_switches_the_projector_off(
    lenient: None, tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    calls = []

    def flaky(batch: Any) -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 7:  # 2 sanity-check batches, 3 in epoch 0, the second one of epoch 1
            raise KeyError("label")
        return labels(batch)

    callbacks = [EmbeddingProjector(metadata_fn=flaky), TrainingHelper(check_every_n_steps=5)]
    run = trainer(tmp_path, TensorBoardLogger(str(tmp_path), name="tb"), callbacks)
    run.fit(ZeroBranch(), *loaders())
    assert run.current_epoch == 2

    (error,) = switched_off_errors(learnscope_log)
    assert "embedding projector of EmbeddingProjector failed" in error.getMessage()
    assert isinstance(error.exc_info[1], KeyError)
    assert callbacks[0].switched_off == {"embedding projector"}
    names = ProjectorReader(tmp_path / "tb").names("version_0")
    assert names == ["encoder/validate/step_000000006"]
    assert callbacks[1].findings and not callbacks[1].switched_off  # the helper went on


# -- bad input -----------------------------------------------------------------------------


def test_non_finite_rows_are_dropped_and_an_all_non_finite_snapshot_is_skipped(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    x, y = blobs(48, seed=1).tensors
    x = x.clone()
    x[::10, 0] = float("nan")  # samples 0, 10, 20, 30, 40
    x[5, 1] = float("inf")
    val = DataLoader(TensorDataset(x, y), batch_size=16)
    callbacks = [EmbeddingProjector(metadata_fn=labels), EmbeddingProjector("probe")]
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    run = trainer(tmp_path, tb, callbacks, max_epochs=1)
    model = NanProbe()
    run.fit(model, loaders()[0], val)

    reader = ProjectorReader(tmp_path / "tb")
    assert reader.names("version_0") == ["encoder/validate/step_000000006"]  # no probe snapshot
    kept = [i for i in range(48) if i % 10 and i != 5]
    tensor = reader.tensor("version_0", "encoder/validate/step_000000006")
    assert tensor.shape == (42, 8) and np.isfinite(tensor).all()
    _, rows = parse_metadata(reader.metadata("version_0", "encoder/validate/step_000000006"))
    assert [int(r[0]) for r in rows] == y[kept].tolist()
    assert messages(learnscope_log) == [
        "learnscope: 6 embedding rows of 'encoder' with NaN or Inf were left out of the snapshot "
        "at step 6 (42 rows kept)",
        "learnscope: every captured embedding row of 'probe' is NaN or Inf; the snapshot at "
        "step 6 is skipped",
    ]
    events = EventAccumulator(tb.log_dir, size_guidance={"tensors": 0})
    events.Reload()
    (text,) = events.Tensors("~learnscope/findings/text_summary")
    assert "non-finite-output" in text.tensor_proto.string_val[0].decode()


class Cast(nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_embeddings(tmp_path: Path, dtype: torch.dtype) -> None:
    class HalfEmbedding(TinyClassifier):
        def __init__(self) -> None:
            super().__init__()
            self.cast = Cast(dtype)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.cast(self.encoder(x)).float())

    projector = EmbeddingProjector("cast", metadata_fn=labels)
    helper = TrainingHelper(check_every_n_steps=1, embedding_module="cast", head_modules=[])
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    model = HalfEmbedding()
    trainer(tmp_path, tb, [projector, helper], max_epochs=1).fit(model, *loaders())

    assert not projector.switched_off and not helper.switched_off
    with torch.no_grad():
        expected = model.encoder(blobs(48, seed=1).tensors[0]).to(dtype).float().numpy()
    tensor = ProjectorReader(tmp_path / "tb").tensor("version_0", "cast/validate/step_000000006")
    np.testing.assert_array_equal(tensor, expected)
    events = EventAccumulator(tb.log_dir, size_guidance={"scalars": 0})
    events.Reload()
    assert events.Scalars("~learnscope/health/collapse/cast/rankme")


def test_awkward_labels_and_a_tag_with_path_separators(tmp_path: Path, wandb_dir: Path) -> None:
    def names(batch: Any) -> dict[str, Any]:
        return {"label": batch[1], "name": [f"naïve\t{int(v)}\nÅ ✓" for v in batch[1]]}

    tag = "../../escape/..\\enc"
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    wb = WandbLogger(project="t", save_dir=str(wandb_dir))
    projector = EmbeddingProjector(metadata_fn=names, tag=tag)
    before = set(tmp_path.parent.iterdir())
    trainer(tmp_path, [tb, wb], [projector], max_epochs=1).fit(TinyClassifier(), *loaders())
    wb.experiment.finish()

    assert set(tmp_path.parent.iterdir()) == before  # nothing written next to tmp_path
    run_dir = Path(tb.log_dir).resolve()
    projector_files = [
        p for p in tmp_path.rglob("*") if "projector" in p.parts or p.suffix == ".tsv"
    ]
    assert projector_files and all(run_dir in p.resolve().parents for p in projector_files)
    reader = ProjectorReader(tmp_path / "tb")
    (name,) = reader.names("version_0")
    header, rows = parse_metadata(reader.metadata("version_0", name))
    y = blobs(48, seed=1).tensors[1]
    assert header == ["label", "name"]
    assert [r[1] for r in rows] == [f"naïve {int(v)} Å ✓" for v in y]

    (wandb_run,) = wandb_runs(wandb_dir)
    assert all(wandb_run in p.parents for p in wandb_run.rglob("*.table.json"))
    records = wandb_records(wandb_run)
    assert any(r.WhichOneof("record_type") == "history" for r in records)


def test_evaluation_epochs_without_batches(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    empty = DataLoader(TensorDataset(torch.zeros(0, 6), torch.zeros(0, dtype=torch.long)))
    train, val = loaders()
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    projector = EmbeddingProjector(stages=("validate", "test"))
    run = trainer(tmp_path, tb, [projector], max_epochs=1)
    run.fit(TinyClassifier(), train, empty)
    run.test(TinyClassifier(), empty)
    run = trainer(tmp_path, tb, [projector], max_epochs=1, limit_val_batches=0)
    run.fit(TinyClassifier(), train, val)
    assert run.global_step == 6 and not projector.switched_off
    assert not (Path(tb.log_dir) / "projector_config.pbtxt").exists()
    assert messages(learnscope_log) == []


def test_more_rows_than_max_points_keep_the_same_rows_every_epoch(tmp_path: Path) -> None:
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    projector = EmbeddingProjector(metadata_fn=labels, max_points=20)
    trainer(tmp_path, tb, [projector], max_epochs=2).fit(TinyClassifier(), *loaders())

    reader = ProjectorReader(tmp_path / "tb")
    y = blobs(48, seed=1).tensors[1]
    chosen = []
    for name in reader.names("version_0"):
        header, rows = parse_metadata(reader.metadata("version_0", name))
        assert header == ["label", "row"] and len(rows) == 20
        numbers = [int(r[1]) for r in rows]
        assert [int(r[0]) for r in rows] == y[numbers].tolist()
        chosen.append(numbers)
    assert len(chosen) == 2 and chosen[0] == chosen[1] and chosen[0] == sorted(set(chosen[0]))
    assert chosen[0][-1] > 30  # spread over the epoch, not the first 20 rows
