"""Bad input to records, input checks and the wandb writer: one clear message, never garbage."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from learnscope import EmbeddingSnapshot
from learnscope.health.inputs import CoordinateRangeCheck
from learnscope.plugins.wandb.writer import WandbWriter
from tests.kit.readers import wandb_history, wandb_run_dir, wandb_table

NAN = float("nan")


# --- EmbeddingSnapshot ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("vectors", "error", "message"),
    [
        (torch.randn(3, 2, dtype=torch.complex64), ValueError, "must be real, got a complex"),
        (np.ones((3, 2), np.complex128), ValueError, "must be real, got a complex"),
        (torch.zeros(0, 3), ValueError, r"N >= 1 and D >= 1, got \(0, 3\)"),
        (torch.zeros(3, 0), ValueError, r"N >= 1 and D >= 1, got \(3, 0\)"),
        (torch.zeros(3), ValueError, r"shape \[N, D\]"),
        ([["a", "b"], ["c", "d"]], TypeError, "must be real numbers, got an array of dtype <U1"),
        ([[1.0], [1.0, 2.0]], ValueError, "must be a rectangular array of numbers"),
        (torch.ones(2, 2, dtype=torch.bool), TypeError, "must be numbers, got a bool"),
        ("vectors", TypeError, "must be a torch.Tensor, a numpy array or a list of lists"),
        (
            torch.tensor([[1.0, 2.0], [NAN, 0.0], [0.0, float("inf")]]),
            ValueError,
            r"NaN or Inf in 2 of 3 rows \(first: \[1, 2\]\)",
        ),
        (np.array([[1.0, 2.0], [3.0, -np.inf]]), ValueError, r"NaN or Inf in 1 of 2 rows"),
    ],
)
def test_bad_vectors_raise_one_clear_error(vectors: object, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        EmbeddingSnapshot("enc", 0, vectors)  # type: ignore[arg-type]


def test_list_vectors_and_iterator_metadata_are_converted() -> None:
    snapshot = EmbeddingSnapshot(
        "enc", 1, [[1, 2], [3, 4], [5, 6]], {"g": (i * i for i in range(3)), "t": iter("xyz")}
    )
    assert isinstance(snapshot.vectors, np.ndarray) and snapshot.vectors.shape == (3, 2)
    assert snapshot.vectors_numpy().tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    assert snapshot.metadata_columns() == {"g": [0, 1, 4], "t": ["x", "y", "z"]}
    half = snapshot.subsample(2)  # rows and their converted metadata stay together
    rows = [int(v[0] - 1) // 2 for v in half.vectors_numpy().tolist()]
    assert len(rows) == 2 and half.metadata_columns()["g"] == [r * r for r in rows]
    with pytest.raises(ValueError, match="'g' has 2 values but the embedding 'enc' has 3 rows"):
        EmbeddingSnapshot("enc", 1, torch.zeros(3, 2), {"g": (i for i in range(2))})
    with pytest.raises(TypeError, match="metadata must be a mapping"):
        EmbeddingSnapshot("enc", 1, torch.zeros(3, 2), [("g", [1, 2, 3])])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a metadata column must be a sequence of values"):
        EmbeddingSnapshot("enc", 1, torch.zeros(3, 2), {"g": 5})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("images", "message"),
    [
        (torch.full((2, 3, 4, 4), 200.0), r"got values from 200 to 200 \(0-255 values: divide"),
        (torch.linspace(-0.5, 0.5, 96).reshape(2, 3, 4, 4), "got values from -0.5 to 0.5$"),
        (torch.full((2, 1, 4, 4), NAN), "got only NaN"),
        (
            torch.zeros(2, 1, 4, 4).index_fill_(0, torch.tensor([1]), NAN),
            "got values from 0 to 0 and 16 NaN",
        ),
    ],
)
def test_images_out_of_range_are_refused_never_clipped(images: torch.Tensor, message: str) -> None:
    with pytest.raises(ValueError, match=rf"images of 'enc' must be floats in \[0, 1\], {message}"):
        EmbeddingSnapshot("enc", 0, torch.zeros(2, 2), images=images)


def test_images_in_range_or_uint8_pass_and_other_dtypes_are_refused() -> None:
    ok = EmbeddingSnapshot("enc", 0, torch.zeros(2, 2), images=torch.ones(2, 3, 2, 2))
    assert ok.images_uint8() is not None and int(ok.images_uint8().min()) == 255
    grey = torch.full((2, 1, 2, 2), 255, dtype=torch.uint8)
    assert EmbeddingSnapshot("enc", 0, torch.zeros(2, 2), images=grey).images is grey
    with pytest.raises(TypeError, match="floats in \\[0, 1\\] or uint8, got int64"):
        EmbeddingSnapshot("enc", 0, torch.zeros(2, 2), images=torch.zeros(2, 1, 2, 2).long())


# --- CoordinateRangeCheck -------------------------------------------------------------------


def test_coordinate_check_ignores_nan_and_says_when_everything_is_nan() -> None:
    fractional = torch.tensor([[0.1, NAN, 0.9], [0.2, 0.3, 0.4]])
    message = CoordinateRangeCheck()({"pos": fractional})
    assert message is not None and "(from 0.1 to 0.9)" in message
    cartesian = torch.tensor([[0.1, NAN, 7.5]])
    assert CoordinateRangeCheck()({"pos": cartesian}) is None
    assert CoordinateRangeCheck()({"pos": torch.full((4, 3), NAN)}) == (
        "every coordinate in 'pos' is NaN (12 values): the inputs carry no positions; check how "
        "the batch is built"
    )
    assert CoordinateRangeCheck()({"pos": torch.tensor([[0, 1], [1, 0]])}) is not None


# --- the wandb writer -----------------------------------------------------------------------


def test_wandb_renames_metadata_columns_that_clash_with_its_own(
    wandb_dir: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    import wandb

    run = wandb.init(project="t", dir=str(wandb_dir))
    writer = WandbWriter(run)
    metadata = {"step": [10, 11], "label": ["a", "b"], "stage": ["x", "y"], "embedding": [5, 6]}
    for step in (3, 4):
        writer.write_embedding(EmbeddingSnapshot("enc", step, torch.ones(2, 2), metadata))
    run.finish()

    run_dir = wandb_run_dir(wandb_dir)
    history = wandb_history(run_dir)
    table = wandb_table(run_dir, history[0]["~learnscope/embeddings/enc"])
    assert table["columns"] == [
        "embedding",
        "step",
        "stage",
        "metadata_step",
        "label",
        "metadata_stage",
        "metadata_embedding",
    ]
    assert table["data"] == [
        [[1.0, 1.0], 3, "", 10, "a", "x", 5],
        [[1.0, 1.0], 3, "", 11, "b", "y", 6],
    ]
    warnings = [r.getMessage() for r in learnscope_log.records if "renamed" in r.getMessage()]
    assert warnings == [
        "learnscope: metadata columns of enc clash with the wandb table's own columns and are "
        "renamed: 'step' -> 'metadata_step', 'stage' -> 'metadata_stage', "
        "'embedding' -> 'metadata_embedding'"
    ]  # once, not once per snapshot


# --- non-finite elements reach the dashboards -----------------------------------------------


def test_writers_show_the_non_finite_count_of_a_real_summary(
    tmp_path: Path, wandb_dir: Path
) -> None:
    import wandb
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from learnscope.autocorrelation.analysis import summarize
    from learnscope.plugins.tensorboard.writer import TensorBoardWriter

    history = torch.randn(200, 4, generator=torch.Generator().manual_seed(0)).cumsum(0)
    history[7, 1] = NAN
    history[9, 2] = float("inf")
    summary = summarize({"params": history}, torch.tensor([0, 0, 0, 1]), ["enc", "head"], step=5)
    name = "~learnscope/autocorrelation/params/enc/non_finite_elements"

    writer = TensorBoardWriter(tmp_path / "tb")
    writer.write_autocorrelation(summary)
    writer.close()
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars(name)] == [(5, 2.0)]
    assert (
        "~learnscope/autocorrelation/params/head/non_finite_elements"
        not in events.Tags()["scalars"]
    )
    lag_1 = events.Scalars("~learnscope/autocorrelation/params/enc/lag_1")[0].value
    assert 0.9 < lag_1 < 1.0  # the finite element's number, not NaN

    run = wandb.init(project="t", dir=str(wandb_dir))
    WandbWriter(run).write_autocorrelation(summary)
    run.finish()
    (logged,) = [h for h in wandb_history(wandb_run_dir(wandb_dir)) if name in h]
    assert logged[name] == 2.0 and logged["trainer/global_step"] == 5
