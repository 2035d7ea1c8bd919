"""EmbeddingProjector in real ``Trainer.fit`` runs, read back from TensorBoard and wandb."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

from learnscope.lightning_glue import EmbeddingProjector
from tests.kit.models import Collect, TinyClassifier, Tokens, blobs, loaders, trainer
from tests.kit.readers import (
    ProjectorReader,
    parse_metadata,
    wandb_history,
    wandb_run_dir,
    wandb_table,
)


def labels(batch: Any) -> dict[str, Any]:
    return {"label": batch[1]}


def tb_names(logdir: Path) -> list[str]:
    reader = ProjectorReader(logdir)
    runs = reader.runs()
    return reader.names(runs[0]) if runs else []


def test_fit_with_tensorboard_and_wandb(tmp_path: Path, wandb_dir: Path) -> None:
    torch.manual_seed(0)
    model = TinyClassifier()
    images = lambda batch: batch[0][:, None, None, :].expand(-1, 3, 6, 6).sigmoid()  # noqa: E731
    projector = EmbeddingProjector("encoder", metadata_fn=labels, images_fn=images)
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    wb = WandbLogger(project="t", save_dir=str(wandb_dir))
    fit = trainer(tmp_path, [tb, wb], [projector], max_epochs=2)
    train, val = loaders()
    fit.fit(model, train, val)
    steps = [len(train) * (epoch + 1) for epoch in range(2)]

    reader = ProjectorReader(tmp_path / "tb")
    (run,) = reader.runs()
    names = reader.names(run)
    assert names == [f"encoder/validate/step_{s:09d}" for s in steps]  # no sanity-check snapshot
    x_val, y_val = blobs(48, seed=1).tensors
    with torch.no_grad():
        expected = model.encoder(x_val).numpy()
    np.testing.assert_allclose(reader.tensor(run, names[-1]), expected, rtol=1e-5, atol=1e-6)
    header, rows = parse_metadata(reader.metadata(run, names[-1]))
    assert header is None and [int(r[0]) for r in rows] == y_val.tolist()
    assert reader.info(run)["embeddings"][-1]["sprite"]["singleImageDim"] == [6, 6]

    wb.experiment.finish()
    run_dir = wandb_run_dir(wandb_dir)
    logged = [h for h in wandb_history(run_dir) if "~learnscope/embeddings/encoder/validate" in h]
    assert [h["trainer/global_step"] for h in logged] == steps
    table = wandb_table(run_dir, logged[-1]["~learnscope/embeddings/encoder/validate"])
    assert table["columns"] == ["embedding", "step", "stage", "label", "image"]
    np.testing.assert_allclose([r[0] for r in table["data"]], expected, rtol=1e-5, atol=1e-6)
    assert [r[3] for r in table["data"]] == y_val.tolist()


def test_unknown_module_fails_at_setup_with_available_names(tmp_path: Path) -> None:
    fit = trainer(tmp_path, False, [EmbeddingProjector("encodr")])
    with pytest.raises(ValueError, match=r"no sub-module 'encodr'; available: encoder, encoder\.0"):
        fit.fit(TinyClassifier(), *loaders())


def test_wrong_metadata_length_fails_in_the_sanity_check(tmp_path: Path) -> None:
    projector = EmbeddingProjector(metadata_fn=lambda batch: {"label": batch[1][:-1]})
    fit = trainer(tmp_path, TensorBoardLogger(str(tmp_path)), [projector])
    with pytest.raises(
        ValueError, match="'label' has 15 values but the batch has 16 embedding rows"
    ):
        fit.fit(TinyClassifier(), *loaders())
    assert fit.global_step == 0


def test_wrong_number_of_ids_names_ids_fn_in_the_sanity_check(tmp_path: Path) -> None:
    projector = EmbeddingProjector(ids_fn=lambda batch: list(range(len(batch[1]) - 1)))
    fit = trainer(tmp_path, TensorBoardLogger(str(tmp_path)), [projector])
    with pytest.raises(ValueError, match="ids_fn gave 15 ids but the batch has 16 embedding rows"):
        fit.fit(TinyClassifier(), *loaders())
    assert fit.global_step == 0


def test_metadata_error_during_training_is_logged_once_and_training_finishes(
    lenient: None, tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    projector = EmbeddingProjector(metadata_fn=lambda batch: {"label": batch[1][:-1]})
    fit = trainer(tmp_path, TensorBoardLogger(str(tmp_path)), [projector], num_sanity_val_steps=0)
    fit.fit(TinyClassifier(), *loaders())

    assert fit.current_epoch == 2  # both epochs ran
    errors = [r for r in learnscope_log.records if "switched off" in r.getMessage()]
    assert len(errors) == 1 and errors[0].exc_info is not None
    assert "15 values" in str(errors[0].exc_info[1])
    assert tb_names(tmp_path) == []


def test_non_tensor_output_needs_select(tmp_path: Path) -> None:
    class PairEncoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(6, 8)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, str]:
            return self.net(x), "extra"

    class PairModel(TinyClassifier):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = PairEncoder()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.encoder(x)[0])

    model = PairModel()
    fit = trainer(tmp_path, False, [EmbeddingProjector("encoder")])
    with pytest.raises(TypeError, match="gave a tuple with items") as raised:
        fit.fit(model, *loaders())
    message = str(raised.value)
    assert "[0] (a tensor of shape (16, 8)), [1] (a str 'extra'), not a tensor" in message
    assert "Pass select=" in message and "select=lambda out: out[0]" in message

    projector = EmbeddingProjector("encoder", select=lambda out: out[0], metadata_fn=labels)
    trainer(tmp_path, TensorBoardLogger(str(tmp_path), name="sel"), [projector], max_epochs=1).fit(
        model, *loaders()
    )
    assert tb_names(tmp_path / "sel") == ["encoder/validate/step_000000006"]


def test_token_outputs_give_one_row_per_token_with_position(tmp_path: Path) -> None:
    projector = EmbeddingProjector(metadata_fn=labels, max_points=30)
    fit = trainer(tmp_path, TensorBoardLogger(str(tmp_path), name="tok"), [projector], max_epochs=1)
    fit.fit(Tokens(3), *loaders())  # [B, 3, 8] from the encoder

    reader = ProjectorReader(tmp_path / "tok")
    (run,) = reader.runs()
    (name,) = reader.names(run)
    assert reader.tensor(run, name).shape == (30, 8)
    header, rows = parse_metadata(reader.metadata(run, name))
    assert header == ["label", "position", "row"]  # 144 token rows, 30 kept: row numbers shown
    y = blobs(48, seed=1).tensors[1]
    row_numbers = [int(r[2]) for r in rows]
    assert row_numbers == sorted(row_numbers) and len(set(row_numbers)) == 30
    assert row_numbers[-1] > 100  # spread over the epoch, not the first 30 rows
    pairs = zip(rows, row_numbers, strict=True)
    assert all(r[:2] == [str(int(y[n // 3])), str(n % 3)] for r, n in pairs)


def test_train_stage_capture_and_max_points(tmp_path: Path) -> None:
    projector = EmbeddingProjector(
        stages=("train", "validate"), every_n_train_steps=4, max_points=20, metadata_fn=labels
    )
    fit = trainer(tmp_path, TensorBoardLogger(str(tmp_path), name="tr"), [projector])
    fit.fit(TinyClassifier(), *loaders())

    reader = ProjectorReader(tmp_path / "tr")
    (run,) = reader.runs()
    names = reader.names(run)
    train_names = [n for n in names if "/train/" in n]
    assert train_names == [f"encoder/train/step_{s:09d}" for s in (0, 4, 8)]
    assert all(reader.tensor(run, n).shape == (16, 8) for n in train_names)  # one batch
    val_names = [n for n in names if "/validate/" in n]
    assert [reader.tensor(run, n).shape for n in val_names] == [(20, 8), (20, 8)]


def test_every_n_epochs(tmp_path: Path) -> None:
    projector = EmbeddingProjector(every_n_epochs=2, tag="emb")
    fit = trainer(tmp_path, TensorBoardLogger(str(tmp_path), name="ev"), [projector], max_epochs=3)
    fit.fit(TinyClassifier(), *loaders())
    assert tb_names(tmp_path / "ev") == ["emb/validate/step_000000012"]


def test_second_forward_in_a_batch_is_not_captured(tmp_path: Path) -> None:
    class TwoPasses(TinyClassifier):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.encoder(batch[0] * 0)  # e.g. a second pass of a SAM-style optimiser
            super().validation_step(batch, batch_idx)

    class FirstPass(TinyClassifier):
        pass

    fit = trainer(
        tmp_path, TensorBoardLogger(str(tmp_path), name="two"), [EmbeddingProjector()], max_epochs=1
    )
    model = TwoPasses()
    fit.fit(model, *loaders())
    reader = ProjectorReader(tmp_path / "two")
    (run,) = reader.runs()
    np.testing.assert_allclose(
        reader.tensor(run, reader.names(run)[0]),
        model.encoder(torch.zeros(48, 6)).detach().numpy(),
        rtol=1e-5,
    )


def test_loggers_that_cannot_show_embeddings_are_named(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    fit = trainer(tmp_path, CSVLogger(str(tmp_path)), [EmbeddingProjector()], max_epochs=1)
    fit.fit(TinyClassifier(), *loaders())
    messages = [r.getMessage() for r in learnscope_log.records]
    assert messages == [
        "learnscope: LoggerMetricsWriter(CSVLogger) cannot show embedding records; "
        "they are not written there"
    ]


def test_no_logger_gets_one_warning(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    fit = trainer(tmp_path, False, [EmbeddingProjector()], max_epochs=2)
    fit.fit(TinyClassifier(), *loaders())
    messages = [r.getMessage() for r in learnscope_log.records]
    assert len(messages) == 1 and "no logger" in messages[0]


def test_captured_rows_hold_no_autograd_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from learnscope.embeddings.rows import EmbeddingRows

    seen: list[torch.Tensor] = []
    original = EmbeddingRows.add

    def spy(self: EmbeddingRows, vectors: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        seen.append(vectors)
        original(self, vectors, *args, **kwargs)

    monkeypatch.setattr(EmbeddingRows, "add", spy)
    projector = EmbeddingProjector(stages="train", every_n_train_steps=1)
    # a logger with a writer: without one no row is captured (nothing would read it)
    trainer(tmp_path, Collect(), [projector], max_epochs=1).fit(TinyClassifier(), *loaders())
    assert len(seen) == 6
    assert all(not v.requires_grad and v.grad_fn is None for v in seen)


def test_bad_arguments_fail_in_init() -> None:
    with pytest.raises(ValueError, match="stages"):
        EmbeddingProjector(stages=("valid",))
    with pytest.raises(ValueError, match="every_n_train_steps"):
        EmbeddingProjector(stages=("train",))
    with pytest.raises(ValueError, match="max_points"):
        EmbeddingProjector(max_points=0)


def test_each_lightning_package_has_its_projector(tmp_path: Path) -> None:
    import lightning.pytorch
    import pytorch_lightning

    from learnscope.lightning_glue.pytorch_lightning import EmbeddingProjector as ForPL

    assert isinstance(EmbeddingProjector(), lightning.pytorch.Callback)
    assert isinstance(ForPL(), pytorch_lightning.Callback)
    assert ForPL("encoder", tag="t").state_key == EmbeddingProjector("encoder", tag="t").state_key
