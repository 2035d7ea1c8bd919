"""A new user's first fit: few scalars by default, one summary line at the end, checks that say
when they are off, and errors from the user's functions that name the function."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from learnscope import EmbeddingSnapshot
from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from tests.kit.models import Backbone, TinyClassifier, loaders, trainer


def scalar_tags(log_dir: str | Path) -> list[str]:
    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    events.Reload()
    return sorted(events.Tags()["scalars"])


def histogram_tags(log_dir: str | Path) -> list[str]:
    events = EventAccumulator(str(log_dir), size_guidance={"histograms": 0})
    events.Reload()
    return sorted(events.Tags()["histograms"])


def learnscope_lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("learnscope") and r.levelno >= level
    ]


@pytest.fixture
def lightning_log(caplog: pytest.LogCaptureFixture) -> Any:
    """The records of Lightning's own logger (which shows INFO by default), as caplog's.

    Lightning's logger does not propagate to the root logger when it made its own handler.
    """
    logger = logging.getLogger("lightning.pytorch")
    added = not logger.propagate
    if added:
        logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="lightning.pytorch")
    yield caplog
    if added:
        logger.removeHandler(caplog.handler)


def summaries(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.endswith(".learnscope") and r.getMessage().startswith("learnscope wrote")
    ]


# --- few scalars by default -------------------------------------------------------------------


def autocorrelation_fit(tmp_path: Path, **kwargs: Any) -> list[str]:
    callbacks = [
        ModelAutocorrelation(analyze_every_n_steps=6, lags=(1, 2, 5), buffer_size=16, **kwargs),
        TrainingHelper(check_every_n_steps=6),
    ]
    logger = TensorBoardLogger(str(tmp_path), name="run")
    trainer(tmp_path, logger, callbacks, max_epochs=4).fit(TinyClassifier(), *loaders())
    return scalar_tags(logger.log_dir)


def test_default_writes_lag1_median_and_tau_only(tmp_path: Path) -> None:
    tags = autocorrelation_fit(tmp_path)
    ours = [t for t in tags if t.startswith("~learnscope/autocorrelation/")]
    assert ours and all(t.endswith(("/rho1_median", "/tau")) for t in ours), ours
    assert {t.rsplit("/", 1)[0] for t in ours} == {
        f"~learnscope/autocorrelation/{kind}/{group}"
        for kind in ("params", "grads")
        for group in ("encoder", "head")
    }
    assert not any("/lag_" in t or "_q25" in t or "_q75" in t for t in tags)


def test_all_scalars_writes_every_lag_and_quartile(tmp_path: Path) -> None:
    tags = autocorrelation_fit(tmp_path, all_scalars=True)
    for kind in ("params", "grads"):
        for group in ("encoder", "head"):
            base = f"~learnscope/autocorrelation/{kind}/{group}"
            wanted = {f"{base}/lag_{k}" for k in (1, 2, 5)}
            wanted |= {f"{base}/rho1_median", f"{base}/rho1_q25", f"{base}/rho1_q75"}
            assert wanted <= set(tags), sorted(wanted - set(tags))


def test_demo_writes_few_learnscope_scalars_and_no_unnamed_histogram(tmp_path: Path) -> None:
    from learnscope.lightning_glue.demo import run_demo

    runs = run_demo(tmp_path / "runs", epochs=3)
    tags = scalar_tags(runs.tensorboard)
    ours = [
        t for t in tags if t.startswith(("~learnscope/autocorrelation/", "~learnscope/health/"))
    ]
    users = [t for t in tags if t.startswith(("train/", "val/"))]
    assert users == ["train/loss", "val/accuracy", "val/loss"]
    assert 0 < len(ours) <= 20, ours  # was 46 of 50
    assert not any("/lag_" in t or "_q25" in t for t in ours)
    assert "~learnscope/health/grad_norm" not in histogram_tags(runs.tensorboard)


# --- the summary at the end of a fit ----------------------------------------------------------


def three_callbacks() -> list[Any]:
    return [
        TrainingHelper(check_every_n_steps=6),
        ModelAutocorrelation(analyze_every_n_steps=6, lags=(1, 2), buffer_size=8),
        EmbeddingProjector("encoder", metadata_fn=lambda batch: {"label": batch[1]}),
    ]


def test_one_summary_at_the_end_of_a_fit(tmp_path: Path, lightning_log: Any) -> None:
    logger = TensorBoardLogger(str(tmp_path / "logs"), name="run")
    fit = trainer(tmp_path, logger, three_callbacks(), max_epochs=3)
    fit.fit(TinyClassifier(), *loaders())

    (line,) = summaries(lightning_log)
    assert "3 embedding snapshots" in line  # one per epoch
    analyses = int(re.search(r"(\d+) autocorrelation analyses", line)[1])
    assert analyses == 3  # 18 steps, one analysis every 6 once more than 2 steps are held
    assert "0 findings" in line
    assert f"tensorboard --logdir {tmp_path / 'logs'}" in line
    assert "learnscope tab" in line
    assert f"learnscope export {tmp_path / 'logs'} --html" in line


def test_summary_names_the_wandb_run(tmp_path: Path, wandb_dir: Path, lightning_log: Any) -> None:
    from lightning.pytorch.loggers import WandbLogger

    wandb_logger = WandbLogger(project="t", save_dir=str(wandb_dir))
    fit = trainer(tmp_path, [wandb_logger], three_callbacks(), max_epochs=1)
    fit.fit(TinyClassifier(), *loaders())
    (line,) = summaries(lightning_log)
    run = wandb_logger.experiment
    assert f"the offline W&B run {run.name or run.id} (upload: wandb sync " in line
    assert str(Path(run.dir).parent) in line
    assert "1 embedding snapshot," in line and "tensorboard --logdir" not in line


def test_no_summary_under_fast_dev_run(tmp_path: Path, lightning_log: Any) -> None:
    logger = TensorBoardLogger(str(tmp_path / "logs"), name="run")
    trainer(tmp_path, logger, three_callbacks(), fast_dev_run=2).fit(TinyClassifier(), *loaders())
    assert summaries(lightning_log) == []


# --- checks that are off say so ---------------------------------------------------------------


def test_missing_encoder_warns_once_with_the_names_to_use(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    helper = TrainingHelper(check_every_n_steps=5)
    run = trainer(tmp_path, False, [helper], max_epochs=1)
    run.fit(Backbone(), *loaders())
    run.validate(Backbone(), loaders()[1])
    (line,) = learnscope_lines(learnscope_log, logging.WARNING)
    assert "no sub-module 'encoder'" in line and "collapse" in line
    assert "the modules with parameters are 'backbone', 'head'" in line
    assert "TrainingHelper(embedding_module=...)" in line and "embedding_module=None" in line
    assert "[batch, dim], [nodes, dim] or [batch, tokens, dim]" in line
    assert "embedding_module='backbone'" not in line  # no guess given as the answer


def test_explicit_none_stays_quiet(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    run = trainer(tmp_path, False, [TrainingHelper(embedding_module=None)], max_epochs=1)
    run.fit(Backbone(), *loaders())
    assert learnscope_lines(learnscope_log, logging.WARNING) == []


# --- errors from the user's functions ---------------------------------------------------------


def projector_error(tmp_path: Path, **kwargs: Any) -> str:
    projector = EmbeddingProjector("encoder", **kwargs)
    fit = trainer(tmp_path, False, [projector])
    with pytest.raises((TypeError, ValueError)) as error:
        fit.fit(TinyClassifier(), *loaders())
    return str(error.value)


def test_metadata_fn_returning_a_list_is_named(tmp_path: Path) -> None:
    message = projector_error(tmp_path, metadata_fn=lambda batch: [batch[1]])
    assert "metadata_fn" in message and "got a list" in message
    assert "batch of type list" in message
    assert "dict of column name to values" in message


def test_metadata_column_of_one_value_is_named(tmp_path: Path) -> None:
    message = projector_error(tmp_path, metadata_fn=lambda batch: {"n": torch.tensor(3)})
    assert "metadata_fn" in message and "'n'" in message
    assert "0-d tensor" in message and "one value per" in message


def test_ids_fn_returning_a_string_is_named(tmp_path: Path) -> None:
    message = projector_error(tmp_path, ids_fn=lambda batch: "abc")
    assert "ids_fn" in message and "got a str" in message and "batch of type list" in message
    assert "one id per" in message


def test_images_fn_returning_a_list_is_named(tmp_path: Path) -> None:
    message = projector_error(tmp_path, images_fn=lambda batch: [batch[0]])
    assert "images_fn" in message and "got a list" in message and "[B, C, H, W]" in message


def test_select_returning_a_tuple_is_named(tmp_path: Path) -> None:
    message = projector_error(tmp_path, select=lambda out: (out,))
    assert "select" in message and "gave a tuple" in message and "tensor" in message


def test_a_function_that_raises_is_named(tmp_path: Path) -> None:
    def labels(batch: Any) -> dict[str, Any]:
        return {"label": batch["label"]}

    with pytest.raises(TypeError) as error:
        trainer(tmp_path, False, [EmbeddingProjector(metadata_fn=labels)]).fit(
            TinyClassifier(), *loaders()
        )
    notes = "\n".join(getattr(error.value, "__notes__", []))
    assert "metadata_fn" in notes and "batch of type list" in notes


def test_snapshot_step_must_be_an_int() -> None:
    with pytest.raises(TypeError, match=r"step must be an int .*got str '5'"):
        EmbeddingSnapshot("enc", "5", torch.zeros(2, 2))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="metadata column 'n' is a 0-d tensor"):
        EmbeddingSnapshot("enc", 5, torch.zeros(2, 2), {"n": torch.tensor(3)})


def test_select_of_training_helper_is_named(tmp_path: Path) -> None:
    helper = TrainingHelper(check_every_n_steps=1, select=lambda out: out.tolist())
    with pytest.raises(TypeError, match="select"):
        trainer(tmp_path, False, [helper], max_steps=2).fit(TinyClassifier(), loaders()[0])


def test_training_helper_functions_are_named(tmp_path: Path) -> None:
    helper = TrainingHelper(check_every_n_steps=1, edge_index_fn=lambda batch: [[0, 1], [1, 0]])
    with pytest.raises(TypeError) as error:
        trainer(tmp_path, False, [helper], max_steps=2).fit(TinyClassifier(), loaders()[0])
    message = str(error.value)
    assert "edge_index_fn got a list of 2 items from a batch of type list" in message
    assert "[2, E]" in message

    def needs_a_dict(batch: Any) -> str | None:
        return None if batch["x"].abs().max() < 100 else "huge"

    helper = TrainingHelper(check_every_n_steps=1, input_checks=[needs_a_dict])
    with pytest.raises(TypeError) as raised:
        trainer(tmp_path, False, [helper], max_steps=2).fit(TinyClassifier(), loaders()[0])
    assert "inside the input check needs_a_dict, called with a batch of type list" in "\n".join(
        raised.value.__notes__
    )


def test_mask_fn_that_raises_is_named(tmp_path: Path) -> None:
    projector = EmbeddingProjector("encoder", mask_fn=lambda batch: batch["mask"])
    with pytest.raises(TypeError) as error:
        trainer(tmp_path, False, [projector]).fit(TinyClassifier(), *loaders())
    notes = "\n".join(error.value.__notes__)
    assert "EmbeddingProjector: raised inside mask_fn, called with a batch of type list" in notes
