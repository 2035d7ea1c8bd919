"""Sequence-first outputs (PyTorch's default ``batch_first=False``) give the batch's rows.

``nn.TransformerEncoder`` and ``nn.LSTM`` default to ``[tokens, batch, dim]`` outputs, with
PyTorch's padding mask ``src_key_padding_mask`` (true = padding) in the batch. Real
``Trainer.fit`` runs of both embedding callbacks; the references are the model's own outputs,
transposed and unpadded with numpy, and float64 collapse formulas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch import nn
from torch.utils.data import DataLoader

from learnscope.lightning_glue import EmbeddingProjector, TrainingHelper
from tests.kit.models import trainer
from tests.kit.readers import projector_snapshot, read_events
from tests.kit.references import cosine_spread, effective_rank

VOCAB, DIM, LENGTH = 50, 32, 16


def sequences(n: int, seed: int) -> list[dict[str, Any]]:
    """Token sequences of 4 to 16 tokens, padded to 16 with PyTorch's padding mask."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for index in range(n):
        length = int(torch.randint(4, LENGTH + 1, (), generator=g))
        padding = torch.arange(LENGTH) >= length
        tokens = torch.randint(1, VOCAB, (LENGTH,), generator=g).masked_fill(padding, 0)
        out.append(
            {"tokens": tokens, "src_key_padding_mask": padding, "label": index % 3, "id": index}
        )
    return out


def loaders(batch_size: int = 12) -> tuple[DataLoader, DataLoader]:
    return (
        DataLoader(sequences(36, seed=0), batch_size=batch_size),
        DataLoader(sequences(36, seed=1), batch_size=batch_size),
    )


class SequenceFirst(nn.Module):
    """Wraps a sequence-first module and says nothing about its layout (rule 2: the batch)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor, src_key_padding_mask: torch.Tensor) -> torch.Tensor:
        return self.inner(x, src_key_padding_mask=src_key_padding_mask)


class Tagger(pl.LightningModule):
    """``embed`` then ``encoder``, a sequence-first transformer (or LSTM): ``[S, B, E]``."""

    def __init__(self, kind: str = "transformer") -> None:
        super().__init__()
        self.kind = kind
        self.embed = nn.Embedding(VOCAB, DIM)
        if kind == "lstm":
            self.encoder: nn.Module = nn.LSTM(DIM, DIM)
        else:
            layer = nn.TransformerEncoderLayer(DIM, 4, 64, dropout=0.0)
            encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
            self.encoder = SequenceFirst(encoder) if kind == "wrapped" else encoder
        self.head = nn.Linear(DIM, 3)
        self.seen: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # step -> (states, padding)

    def states(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        x = self.embed(batch["tokens"]).transpose(0, 1)  # [S, B, E]
        if self.kind == "lstm":
            return self.encoder(x)[0]
        return self.encoder(x, src_key_padding_mask=batch["src_key_padding_mask"])

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        states = self.states(batch)
        self.seen[self.global_step] = (states.detach().clone(), batch["src_key_padding_mask"])
        return nn.functional.cross_entropy(self.head(states[0]), batch["label"])

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.states(batch)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def label_and_id(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {"label": batch["label"], "sample": batch["id"]}


def expected_rows(model: Tagger, batch_size: int) -> tuple[np.ndarray, list[list[int]]]:
    """The real tokens' states of the validation set, and their (label, sample, position)."""
    model.eval()
    vectors, rows = [], []
    with torch.no_grad():
        for batch in loaders(batch_size)[1]:
            states = model.states(batch).transpose(0, 1).numpy()  # [B, S, E]
            real = ~batch["src_key_padding_mask"].numpy()
            vectors.append(states[real])
            for sample, position in zip(*np.nonzero(real), strict=True):
                rows.append([int(batch["label"][sample]), int(batch["id"][sample]), position])
    return np.concatenate(vectors), rows


def fit(tmp_path: Path, model: Tagger, callbacks: list[Any], batch_size: int = 12) -> Path:
    torch.manual_seed(0)
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    trainer(tmp_path, tb, callbacks, max_epochs=1).fit(model, *loaders(batch_size))
    return Path(tb.log_dir)


@pytest.mark.parametrize(("kind", "batch_size"), [("transformer", 12), ("transformer", 16)])
def test_a_sequence_first_transformer_gives_one_row_per_real_token(
    tmp_path: Path, kind: str, batch_size: int
) -> None:
    """[16, 12, 32] read as 12 sequences (and [16, 16, 32], where only the module can tell)."""
    torch.manual_seed(0)
    model = Tagger(kind)
    projector = EmbeddingProjector("encoder", metadata_fn=label_and_id)  # the default mask_fn
    helper = TrainingHelper(check_every_n_steps=1)
    run_dir = fit(tmp_path, model, [projector, helper], batch_size)

    vectors, rows = expected_rows(model, batch_size)
    assert len(vectors) < 36 * LENGTH  # the batches hold padding
    got, header, got_rows = projector_snapshot(tmp_path / "tb", "encoder/validate/step_000000003")
    assert header == ["label", "sample", "position"]
    assert [[int(v) for v in row] for row in got_rows] == rows
    np.testing.assert_allclose(got, vectors, rtol=1e-5, atol=1e-5)

    events = read_events(run_dir)
    ranks = {
        e.step: e.value
        for e in events.Scalars("~learnscope/health/collapse/encoder/effective_rank")
    }
    spreads = {
        e.step: e.value for e in events.Scalars("~learnscope/health/collapse/encoder/cosine_spread")
    }
    assert sorted(ranks) == sorted(spreads) == sorted(model.seen)
    for step, (states, padding) in model.seen.items():
        real = states.transpose(0, 1)[~padding].numpy()
        assert ranks[step] == pytest.approx(effective_rank(real), rel=1e-5)
        assert spreads[step] == pytest.approx(cosine_spread(real), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("kind", ["wrapped", "lstm"])
def test_a_module_that_does_not_say_its_layout_is_read_by_the_batchs_size(
    tmp_path: Path, kind: str
) -> None:
    """A wrapper of the transformer, or an LSTM's output picked by select: [16, 12, 32]."""
    torch.manual_seed(0)
    model = Tagger(kind)
    select = (lambda out: out[0]) if kind == "lstm" else None
    projector = EmbeddingProjector("encoder", select=select, metadata_fn=label_and_id)
    fit(tmp_path, model, [projector])
    vectors, rows = expected_rows(model, 12)
    got, _, got_rows = projector_snapshot(tmp_path / "tb", "encoder/validate/step_000000003")
    assert [[int(v) for v in row] for row in got_rows] == rows
    np.testing.assert_allclose(got, vectors, rtol=1e-5, atol=1e-5)


def test_a_select_that_puts_the_batch_first_and_masks_named_or_negated(tmp_path: Path) -> None:
    """The workaround of old (transpose in select) still holds; three ways to name the mask."""
    torch.manual_seed(0)
    model = Tagger()
    transposed = lambda out: out.transpose(0, 1)  # noqa: E731
    projectors = [
        EmbeddingProjector("encoder", select=transposed, mask_fn=mask_fn, tag=tag)
        for tag, mask_fn in [
            ("named", "src_key_padding_mask"),
            ("negated", lambda batch: ~batch["src_key_padding_mask"]),
            ("default", "attention_mask"),
        ]
    ]
    fit(tmp_path, model, projectors)
    vectors, rows = expected_rows(model, 12)
    for tag in ("named", "negated", "default"):
        got, header, got_rows = projector_snapshot(
            tmp_path / "tb", f"{tag}/validate/step_000000003"
        )
        assert header is None  # one column: position
        assert [int(row[0]) for row in got_rows] == [row[2] for row in rows]
        np.testing.assert_allclose(got, vectors, rtol=1e-5, atol=1e-5)


class Doubled(Tagger):
    """``probe`` gets ``[S, 2B, E]``: no axis of it is the batch's 12 sequences."""

    def __init__(self) -> None:
        super().__init__()
        self.probe = nn.Identity()

    def states(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.probe(torch.cat([super().states(batch)] * 2, dim=1))


def test_an_output_whose_batch_axis_is_not_the_batchs_is_refused(tmp_path: Path) -> None:
    message = (
        r"module 'probe' gave shape \(16, 24, 32\), whose first axis \(16\) is not the batch's: "
        r"the batch's tensors have 12 rows first\. Give select= .*out\.transpose\(0, 1\)"
    )
    projector = EmbeddingProjector("probe")
    with pytest.raises(ValueError, match=message):
        trainer(tmp_path, False, [projector]).fit(Doubled(), *loaders())

    helper = TrainingHelper(embedding_module="probe", check_every_n_steps=1)
    run = trainer(tmp_path, False, [helper], max_steps=2)
    with pytest.raises(ValueError, match=message):
        run.fit(Doubled(), loaders()[0])
    assert run.global_step == 0
