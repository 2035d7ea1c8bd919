"""One forward hook per encoder, shared by the callbacks that read it; the projector's views."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from learnscope.embeddings.aligned_pca import AlignedPCA
from learnscope.lightning_glue import EmbeddingProjector, TrainingHelper
from learnscope.lightning_glue.encoder_capture import CapturedOutput, EncoderCapture
from tests.kit.models import TinyClassifier, blobs, loaders, trainer
from tests.kit.readers import ProjectorReader


class CountingSelect:
    """``select`` that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, output: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return output


class HooksSeen(pl.Callback):
    """The number of forward hooks on the encoder at every validation batch."""

    def __init__(self) -> None:
        self.hooks: list[int] = []

    def on_validation_batch_start(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        self.hooks.append(len(pl_module.encoder._forward_hooks))


def test_two_projectors_on_one_encoder_share_one_hook_and_one_select(tmp_path: Path) -> None:
    torch.manual_seed(0)
    select = CountingSelect()
    seen = HooksSeen()
    projectors = [EmbeddingProjector("encoder", select=select, tag=tag) for tag in ("a", "b")]
    model = TinyClassifier()
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    fit = trainer(tmp_path, tb, [*projectors, seen], max_epochs=1)
    fit.fit(model, *loaders())

    batches = len(seen.hooks)  # the sanity check's 2 and the epoch's 3
    assert batches == 5
    assert seen.hooks == [1] * batches  # one hook for both projectors
    assert select.calls == batches  # select applied once per captured batch, not once each
    assert len(model.encoder._forward_hooks) == 0  # left when the fit ended

    reader = ProjectorReader(tmp_path / "tb")
    (run,) = reader.runs()
    assert reader.names(run) == ["a/validate/step_000000006", "b/validate/step_000000006"]
    with torch.no_grad():
        expected = model.encoder(blobs(48, seed=1).tensors[0]).numpy()
    for name in reader.names(run):
        np.testing.assert_allclose(reader.tensor(run, name), expected, rtol=1e-5, atol=1e-6)


class TrainHooksSeen(HooksSeen):
    """The number of forward hooks on the encoder at every training and validation batch."""

    def on_train_batch_start(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        self.hooks.append(len(pl_module.encoder._forward_hooks))


def test_the_projector_and_the_helper_share_one_hook_and_one_select(tmp_path: Path) -> None:
    torch.manual_seed(0)
    select = CountingSelect()
    seen = TrainHooksSeen()
    projector = EmbeddingProjector("encoder", select=select)
    helper = TrainingHelper(check_every_n_steps=1, select=select)
    model = TinyClassifier()
    fit = trainer(tmp_path, TensorBoardLogger(str(tmp_path), name="tb"), [projector, helper, seen])
    fit.fit(model, *loaders())

    assert len(seen.hooks) == 20  # 12 training, 2 + 3 + 3 validation batches
    assert set(seen.hooks) == {1}  # one hook for both callbacks, at every batch
    # select runs once per batch a callback captured: every training batch (the helper checks
    # every step) and every validation batch (the projector), never twice for one batch
    assert select.calls == 20
    assert len(model.encoder._forward_hooks) == 0


def test_the_capture_gives_the_first_forward_to_each_armed_owner() -> None:
    encoder = torch.nn.Linear(3, 2)
    got: dict[str, list[CapturedOutput]] = {"a": [], "b": []}
    capture = EncoderCapture.of(encoder)
    capture.join("a", got["a"].append)
    capture.join("b", got["b"].append)
    assert len(encoder._forward_hooks) == 1
    capture.arm("a")
    capture.arm("b")
    first = encoder(torch.ones(4, 3))
    encoder(torch.ones(5, 3))  # a second forward in the batch: not taken
    assert len(got["a"]) == len(got["b"]) == 1 and got["a"][0] is got["b"][0]
    assert torch.equal(got["a"][0].output, first)
    capture.arm("b")
    encoder(torch.ones(6, 3))
    assert [len(got["a"]), len(got["b"])] == [1, 2]
    capture.arm("a")
    capture.disarm("a")
    encoder(torch.ones(7, 3))
    assert len(got["a"]) == 1
    capture.leave("a")
    assert len(encoder._forward_hooks) == 1
    capture.leave("b")
    assert len(encoder._forward_hooks) == 0
    assert EncoderCapture.of(torch.nn.Linear(3, 2)) is not capture


def test_select_runs_once_per_function_and_its_error_reaches_every_caller() -> None:
    captured = CapturedOutput((torch.zeros(2, 3), torch.ones(2, 4)))
    first, second = CountingSelect(), CountingSelect()
    assert captured.selected(first) is captured.selected(first)
    assert captured.selected(second) is captured.output
    assert (first.calls, second.calls) == (1, 1)

    def broken(output: Any) -> Any:
        raise KeyError("last_hidden_state")

    for _ in range(2):
        with pytest.raises(KeyError, match="last_hidden_state"):
            captured.selected(broken)


def test_a_checkpoint_taken_while_a_view_is_computed_holds_whole_views(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The writer thread computes a view; ``state_dict`` on the training thread meanwhile holds
    the views published by the last snapshot written, and does not wait for the view."""
    from learnscope.embeddings.batch_rows import batch_rows
    from learnscope.embeddings.rows import EmbeddingRows
    from learnscope.plugins import Writers

    computed, release = threading.Event(), threading.Event()
    fit_transform = AlignedPCA.fit_transform

    def slow_fit(self: AlignedPCA, *args: Any, **kwargs: Any) -> torch.Tensor:
        coords = fit_transform(self, *args, **kwargs)
        computed.set()
        assert release.wait(10)
        return coords

    monkeypatch.setattr(AlignedPCA, "fit_transform", slow_fit)
    projector = EmbeddingProjector("encoder", aligned_pca=True)
    vectors = torch.randn(40, 5, generator=torch.Generator().manual_seed(0))
    rows = EmbeddingRows(3, "validate", max_points=100)
    rows.add(*batch_rows(vectors, {"label": [0, 1] * 20}))
    writer = threading.Thread(target=projector._jobs.write, args=(rows, Writers([])))
    writer.start()
    try:
        assert computed.wait(10)
        state = projector.state_dict()  # while the writer is inside the PCA
    finally:
        release.set()
        writer.join(10)
    assert set(state["pca"]["views"]) == set(state["limits"]) == set()
    after = projector.state_dict()
    assert set(after["pca"]["views"]) == set(after["limits"]) == {"encoder/validate"}
