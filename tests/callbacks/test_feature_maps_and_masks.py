"""CNN feature maps and padded tokens, in real ``Trainer.fit`` runs of both embedding callbacks.

The projector is read back the way TensorBoard's projector plugin serves it, TrainingHelper's
collapse metrics from the TensorBoard event file; the references are float64 numpy formulas on
the tensors the model itself saw.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from learnscope.collapse.metrics import collapse_metrics
from learnscope.lightning_glue import EmbeddingProjector, TrainingHelper
from tests.kit.models import trainer
from tests.kit.readers import projector_snapshot
from tests.kit.references import cosine_spread, effective_rank


def scalars(logdir: str, tag: str) -> dict[int, float]:
    events = EventAccumulator(logdir, size_guidance={"scalars": 0})
    events.Reload()
    return {s.step: s.value for s in events.Scalars(tag)}


# -- a small CNN -------------------------------------------------------------------------------


def images(n: int, seed: int) -> TensorDataset:
    """``(image [3, 8, 8], label)``: a class pattern plus noise."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 3
    patterns = torch.randn(3, 3, 8, 8, generator=torch.Generator().manual_seed(99))
    return TensorDataset(patterns[labels] + torch.randn(n, 3, 8, 8, generator=g), labels)


def image_loaders() -> tuple[DataLoader, DataLoader]:
    return (
        DataLoader(images(48, seed=0), batch_size=16, shuffle=True),
        DataLoader(images(24, seed=1), batch_size=8),
    )


class SmallCNN(pl.LightningModule):
    """``features`` ([B, 16, 4, 4] maps), ``avgpool`` ([B, 16, 1, 1]), then a linear head."""

    def __init__(self, channels_last: bool = False) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1),
            nn.ReLU(),
        )
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(16, 3)
        self.channels_last = channels_last
        self.seen: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # step -> (maps, pooled)
        self.layouts: set[bool] = set()  # whether the maps were channels_last (not contiguous)
        if channels_last:
            self.to(memory_format=torch.channels_last)

    def maps(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        maps = self.features(x)
        return maps, self.avgpool(maps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.maps(x)[1].flatten(1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        maps, pooled = self.maps(x)
        self.seen[self.global_step] = (maps.detach().clone(), pooled.detach().clone())
        layout = maps.is_contiguous(memory_format=torch.channels_last) and not maps.is_contiguous()
        self.layouts.add(layout)
        return nn.functional.cross_entropy(self.head(pooled.flatten(1)), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def val_maps(model: SmallCNN) -> torch.Tensor:
    """The trained model's ``features`` maps of the validation set, ``[24, 16, 4, 4]``."""
    model.eval()
    with torch.no_grad():
        return model.maps(images(24, seed=1).tensors[0])[0].contiguous()


class Order(pl.Callback):
    """Records whether the sanity check and the training batches started."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_sanity_check_start(self, trainer: Any, pl_module: Any) -> None:
        self.seen.append("sanity check")

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, idx: int) -> None:
        self.seen.append("training batch")


FORMATS = pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "nhwc"])


@FORMATS
def test_pooled_cnn_features_give_one_row_per_image(tmp_path: Path, channels_last: bool) -> None:
    torch.manual_seed(0)
    model = SmallCNN(channels_last)
    projector = EmbeddingProjector("avgpool", metadata_fn=lambda batch: {"label": batch[1]})
    helper = TrainingHelper(check_every_n_steps=1, embedding_module="avgpool")
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    trainer(tmp_path, tb, [projector, helper], max_epochs=1).fit(model, *image_loaders())
    assert model.layouts == {channels_last}  # the maps really were in that memory format

    vectors, header, rows = projector_snapshot(tmp_path / "tb", "avgpool/validate/step_000000003")
    expected = val_maps(model).double().numpy().mean(axis=(2, 3))
    assert vectors.shape == (24, 16)  # one 16-channel row per image
    np.testing.assert_allclose(vectors, expected, rtol=1e-5, atol=1e-6)
    assert header is None  # a single column, 'label': no 'position'
    assert [int(r[0]) for r in rows] == images(24, seed=1).tensors[1].tolist()

    ranks = scalars(tb.log_dir, "~learnscope/health/collapse/avgpool/effective_rank")
    assert sorted(ranks) == [0, 1, 2]
    for step, value in ranks.items():
        reference = effective_rank(model.seen[step][1].flatten(1).numpy())
        assert reference > 3  # the reading of the channels as tokens of dimension 1 gave 1.0
        assert value == pytest.approx(reference, rel=1e-5)


@pytest.mark.parametrize("spatial", ["mean", "max", "pixels"])
@FORMATS
def test_spatial_modes_give_the_expected_rows(
    tmp_path: Path, spatial: str, channels_last: bool
) -> None:
    torch.manual_seed(0)
    model = SmallCNN(channels_last)
    projector = EmbeddingProjector(
        "features", spatial=spatial, metadata_fn=lambda batch: {"label": batch[1]}
    )
    helper = TrainingHelper(check_every_n_steps=1, embedding_module="features", spatial=spatial)
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    trainer(tmp_path, tb, [projector, helper], max_epochs=1).fit(model, *image_loaders())
    assert model.layouts == {channels_last}

    def reference(maps: torch.Tensor) -> np.ndarray:
        m = maps.double().numpy()  # [B, C, H, W], read through its strides
        if spatial == "mean":
            return m.mean(axis=(2, 3))
        if spatial == "max":
            return m.max(axis=(2, 3))
        return m.transpose(0, 2, 3, 1).reshape(-1, m.shape[1])  # [B * H * W, C], row-major

    vectors, header, rows = projector_snapshot(tmp_path / "tb", "features/validate/step_000000003")
    np.testing.assert_allclose(vectors, reference(val_maps(model)), rtol=1e-5, atol=1e-6)
    labels = images(24, seed=1).tensors[1]
    if spatial == "pixels":
        assert vectors.shape == (24 * 16, 16)
        assert header == ["label", "position"]
        assert [int(r[0]) for r in rows] == labels.repeat_interleave(16).tolist()
        assert [int(r[1]) for r in rows] == list(range(16)) * 24  # h * W + w
    else:
        assert vectors.shape == (24, 16) and header is None
        assert [int(r[0]) for r in rows] == labels.tolist()

    ranks = scalars(tb.log_dir, "~learnscope/health/collapse/features/effective_rank")
    assert sorted(ranks) == [0, 1, 2]
    for step, value in ranks.items():
        rows_seen = reference(model.seen[step][0])[:128]  # 8 rows per dimension are kept
        assert value == pytest.approx(effective_rank(rows_seen), rel=1e-5)


@pytest.mark.parametrize("stages", ["validate", "train"])
@FORMATS
def test_feature_map_without_spatial_fails_in_the_sanity_check(
    tmp_path: Path, stages: str, channels_last: bool
) -> None:
    projector = EmbeddingProjector("features", stages=stages, every_n_train_steps=1)
    order = Order()
    fit = trainer(tmp_path, TensorBoardLogger(str(tmp_path)), [projector, order])
    with pytest.raises(
        ValueError, match=r"shape \(8, 16, 4, 4\).*spatial='mean'.*'max'.*'pixels'"
    ) as raised:
        fit.fit(SmallCNN(channels_last), *image_loaders())
    assert order.seen == ["sanity check"]  # it failed there, before the first training batch
    assert "select=" in str(raised.value)  # says how to permute a [B, H, W, C] output


def test_training_helper_raises_the_spatial_error_at_its_first_capture(
    lenient: None, tmp_path: Path
) -> None:
    helper = TrainingHelper(check_every_n_steps=5, embedding_module="features")
    fit = trainer(tmp_path, False, [helper], max_steps=6, max_epochs=-1)
    with pytest.raises(ValueError, match=r"shape \(16, 16, 4, 4\).*'mean'.*'max'.*'pixels'"):
        fit.fit(SmallCNN(), image_loaders()[0])
    assert fit.global_step == 0  # not swallowed into "switched off", even outside strict mode


def test_bad_spatial_and_mask_fn_fail_in_init() -> None:
    for make in (EmbeddingProjector, TrainingHelper):
        with pytest.raises(ValueError, match=r"spatial must be None, 'mean', 'max' or 'pixels'"):
            make(spatial="avg")
        with pytest.raises(ValueError, match="mask_fn must be a function, a key of the batch"):
            make(mask_fn=3)


def test_spatial_on_a_token_output_is_refused(tmp_path: Path) -> None:
    class Tokens(SmallCNN):
        def __init__(self) -> None:
            super().__init__()
            self.tokens = nn.Identity()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            maps = self.maps(x)[0]
            return self.head(self.tokens(maps.flatten(2).transpose(1, 2)).mean(1))

    projector = EmbeddingProjector("tokens", spatial="mean")
    with pytest.raises(ValueError, match=r"spatial='mean' applies to feature maps .*\(8, 16, 16\)"):
        trainer(tmp_path, False, [projector]).fit(Tokens(), *image_loaders())


# -- a tiny BERT on padded batches -------------------------------------------------------------

VOCAB, HIDDEN = 40, 16


def sentences(n: int, seed: int) -> list[dict[str, Any]]:
    """Token sequences of 3 to 12 tokens (0 is padding, never a token), labelled by parity."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 13, (n,), generator=g).tolist()
    out = []
    for length in lengths:
        ids = torch.randint(1, VOCAB, (length,), generator=g)
        out.append({"input_ids": ids, "label": int(ids[0]) % 2})
    return out


def pad(samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Pad to the longest sequence of the batch, as a Hugging Face collator does."""
    longest = max(len(s["input_ids"]) for s in samples)
    ids = torch.zeros(len(samples), longest, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, sample in enumerate(samples):
        ids[i, : len(sample["input_ids"])] = sample["input_ids"]
        mask[i, : len(sample["input_ids"])] = 1
    labels = torch.tensor([s["label"] for s in samples])
    return {"input_ids": ids, "attention_mask": mask, "label": labels}


def text_loaders() -> tuple[DataLoader, DataLoader]:
    return (
        DataLoader(sentences(24, seed=0), batch_size=8, shuffle=True, collate_fn=pad),
        DataLoader(sentences(16, seed=1), batch_size=8, collate_fn=pad),
    )


class TinyBert(pl.LightningModule):
    """``encoder``: a one-layer BERT built from a config (no download); ``head`` on [CLS]."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import BertConfig, BertModel

        config = BertConfig(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=16,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        self.encoder = BertModel(config, add_pooling_layer=False)
        self.head = nn.Linear(HIDDEN, 2)
        self.seen: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # step -> (states, mask)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        out = self.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        return out.last_hidden_state

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        states = self(batch)
        self.seen[self.global_step] = (states.detach().clone(), batch["attention_mask"].clone())
        return nn.functional.cross_entropy(self.head(states[:, 0]), batch["label"])

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log(
            "val_loss", nn.functional.cross_entropy(self.head(self(batch)[:, 0]), batch["label"])
        )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def last_hidden_state(out: Any) -> torch.Tensor:
    return out.last_hidden_state


def label(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {"label": batch["label"]}


def test_padding_positions_are_left_out_by_the_attention_mask(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = TinyBert()
    real = EmbeddingProjector("encoder", select=last_hidden_state, metadata_fn=label)  # default
    padded = EmbeddingProjector(
        "encoder", select=last_hidden_state, metadata_fn=label, mask_fn=None, tag="padded"
    )
    helper = TrainingHelper(check_every_n_steps=1, select=last_hidden_state)
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    trainer(tmp_path, tb, [real, padded, helper], max_epochs=1).fit(model, *text_loaders())

    model.eval()
    expected, positions, labels, all_rows = [], [], [], 0
    with torch.no_grad():
        for batch in text_loaders()[1]:
            states, mask = model(batch), batch["attention_mask"].bool()
            expected.append(states[mask])
            positions += mask.nonzero()[:, 1].tolist()
            labels += batch["label"][:, None].expand_as(mask)[mask].tolist()
            all_rows += mask.numel()
    expected_rows = torch.cat(expected).numpy()
    assert all_rows > len(expected_rows)  # the batches hold padding

    vectors, header, rows = projector_snapshot(tmp_path / "tb", "encoder/validate/step_000000003")
    assert vectors.shape == (len(expected_rows), HIDDEN)  # one row per real token
    np.testing.assert_allclose(vectors, expected_rows, rtol=1e-5, atol=1e-5)
    assert header == ["label", "position"]
    assert [int(r[1]) for r in rows] == positions and [int(r[0]) for r in rows] == labels

    everything, header, _ = projector_snapshot(tmp_path / "tb", "padded/validate/step_000000003")
    assert everything.shape == (all_rows, HIDDEN) and header == ["label", "position"]

    ranks = scalars(tb.log_dir, "~learnscope/health/collapse/encoder/effective_rank")
    spreads = scalars(tb.log_dir, "~learnscope/health/collapse/encoder/cosine_spread")
    assert sorted(ranks) == sorted(spreads) == [0, 1, 2]
    for step in ranks:
        states, mask = model.seen[step]
        unpadded = states[mask.bool()].numpy()
        assert ranks[step] == pytest.approx(effective_rank(unpadded), rel=1e-5)
        assert spreads[step] == pytest.approx(cosine_spread(unpadded), rel=1e-5, abs=1e-6)
        assert ranks[step] != pytest.approx(effective_rank(states.flatten(0, 1).numpy()), rel=1e-3)


def test_a_callable_or_named_mask(tmp_path: Path) -> None:
    """A mask from a function, and one named by its key, give the same rows as the default."""
    torch.manual_seed(0)
    model = TinyBert()
    by_function = EmbeddingProjector(
        "encoder",
        select=last_hidden_state,
        mask_fn=lambda batch: batch["input_ids"] != 0,
        tag="function",
    )
    by_key = EmbeddingProjector(
        "encoder", select=last_hidden_state, mask_fn="attention_mask", tag="key"
    )
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    trainer(tmp_path, tb, [by_function, by_key], max_epochs=1).fit(model, *text_loaders())
    a, header_a, rows_a = projector_snapshot(tmp_path / "tb", "function/validate/step_000000003")
    b, header_b, rows_b = projector_snapshot(tmp_path / "tb", "key/validate/step_000000003")
    real_tokens = sum(len(s["input_ids"]) for s in sentences(16, seed=1))
    assert a.shape == b.shape == (real_tokens, HIDDEN)
    np.testing.assert_array_equal(a, b)
    positions = [str(p) for s in sentences(16, seed=1) for p in range(len(s["input_ids"]))]
    assert header_a is None and header_b is None  # one column, 'position'
    assert [r[0] for r in rows_a] == [r[0] for r in rows_b] == positions


def test_a_mask_of_the_wrong_shape_fails_in_the_sanity_check(tmp_path: Path) -> None:
    projector = EmbeddingProjector(
        "encoder", select=last_hidden_state, mask_fn=lambda b: b["attention_mask"][:, 1:]
    )
    fit = trainer(tmp_path, False, [projector])
    with pytest.raises(
        ValueError, match=r"mask of shape \(8, \d+\) .* embedding of shape \(8, \d+, 16\)"
    ):
        fit.fit(TinyBert(), *text_loaders())
    assert fit.global_step == 0


def test_a_missing_named_mask_fails_in_the_sanity_check(tmp_path: Path) -> None:
    projector = EmbeddingProjector("encoder", select=last_hidden_state, mask_fn="input_mask")
    fit = trainer(tmp_path, False, [projector])
    with pytest.raises(ValueError, match=r"no 'input_mask'.*attention_mask, input_ids, label"):
        fit.fit(TinyBert(), *text_loaders())
    assert fit.global_step == 0


def test_training_helper_checks_the_mask_at_its_first_capture(
    lenient: None, tmp_path: Path
) -> None:
    helper = TrainingHelper(
        check_every_n_steps=5, select=last_hidden_state, mask_fn=lambda b: b["label"] > 0
    )
    fit = trainer(tmp_path, False, [helper], max_steps=6, max_epochs=-1)
    with pytest.raises(ValueError, match=r"mask of shape \(8,\) .*embedding of shape \(8, \d+"):
        fit.fit(TinyBert(), text_loaders()[0])
    assert fit.global_step == 0


# -- graph rows: a node mask with edge_index_fn --------------------------------------------------


class Nodes(pl.LightningModule):
    """Node features of a ring of 12 nodes per batch; ``encoder`` gives one row per node."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(6, 8), nn.Tanh())
        self.head = nn.Linear(8, 3)
        self.seen: dict[int, torch.Tensor] = {}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        rows = self.encoder(batch["x"])
        self.seen[self.global_step] = rows.detach().clone()
        return nn.functional.cross_entropy(self.head(rows), batch["y"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def ring_batches(count: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(3)
    source = torch.arange(12)
    ring = torch.stack(
        [torch.cat([source, (source + 1) % 12]), torch.cat([(source + 1) % 12, source])]
    )
    keep = torch.tensor([True, True, False, True, True, True, False, False, True, True, True, True])
    return [
        {
            "x": torch.randn(12, 6, generator=g),
            "y": torch.arange(12) % 3,
            "edges": ring,
            "keep": keep,
        }
        for _ in range(count)
    ]


def test_node_mask_with_edges_keeps_the_edges_between_kept_nodes(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Nodes()
    helper = TrainingHelper(
        check_every_n_steps=1, edge_index_fn=lambda b: b["edges"], mask_fn=lambda b: b["keep"]
    )
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    loader = DataLoader(ring_batches(3), batch_size=None)
    trainer(tmp_path, tb, [helper], max_epochs=1).fit(model, loader)

    batch = ring_batches(1)[0]
    kept = batch["keep"].nonzero()[:, 0].tolist()
    number = {node: i for i, node in enumerate(kept)}  # renumbered independently
    pairs = [(int(s), int(t)) for s, t in batch["edges"].t()]
    edges = torch.tensor([[number[s], number[t]] for s, t in pairs if s in number and t in number])
    rayleigh = scalars(tb.log_dir, "~learnscope/health/collapse/encoder/rayleigh_quotient")
    mad = scalars(tb.log_dir, "~learnscope/health/collapse/encoder/mad_global")
    assert sorted(rayleigh) == [0, 1, 2]
    for step in rayleigh:
        expected = collapse_metrics(model.seen[step][batch["keep"]], edges.t())
        assert rayleigh[step] == pytest.approx(expected["rayleigh_quotient"], rel=1e-5)
        assert mad[step] == pytest.approx(expected["mad_global"], rel=1e-5)


# -- LightningCLI's parser ----------------------------------------------------------------------


def test_spatial_and_mask_fn_round_trip_through_jsonargparse() -> None:
    """The class arguments as LightningCLI parses them, dumped as its saved config.yaml is."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(EmbeddingProjector, "projector")
    parser.add_class_arguments(TrainingHelper, "helper")
    defaults = parser.get_defaults()
    assert (defaults.projector.spatial, defaults.projector.mask_fn) == (None, "attention_mask")
    config = parser.parse_args(
        [
            "--projector.module=avgpool",
            "--projector.spatial=mean",
            "--projector.mask_fn=input_mask",
            "--helper.spatial=pixels",
            "--helper.mask_fn=null",
        ]
    )
    dumped = parser.dump(config, skip_none=False)  # as LightningCLI's SaveConfigCallback
    assert "Unable to serialize" not in dumped
    again = parser.parse_string(dumped)
    for part in ("projector", "helper"):
        for name in ("spatial", "mask_fn"):
            assert again[f"{part}.{name}"] == config[f"{part}.{name}"]
    made = parser.instantiate_classes(again)
    assert (made.projector.spatial, made.projector.mask_fn) == ("mean", "input_mask")
    assert (made.helper.spatial, made.helper.mask_fn) == ("pixels", None)
    with pytest.raises(Exception, match="spatial"):
        parser.parse_args(["--helper.spatial=avg"])
