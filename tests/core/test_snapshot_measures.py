"""A snapshot's measures: its ranks and the label silhouette of its views, and how the run
summary folds them (last and lowest per key, the newest snapshot's silhouettes).

The silhouette is checked against scikit-learn's ``silhouette_score`` on the same points, the
ranks against the kit's float64 numpy references (``tests/kit/references.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from sklearn.metrics import silhouette_score

from learnscope.embeddings.id_subsample import subsample_ids
from learnscope.embeddings.label_silhouette import MAX_POINTS, label_silhouette, mean_silhouette
from learnscope.lightning_glue.parts import Parts
from learnscope.plugins.pipeline.run_record_writer import snapshot_entry
from learnscope.plugins.pipeline.snapshot_job import measured
from learnscope.records import (
    AlignedView,
    EmbeddingRanks,
    EmbeddingSnapshot,
    LabelSilhouette,
    ViewFrame,
)
from learnscope.run_directory.summary import MAX_SEPARATORS, summarize_record
from tests.kit.references import effective_rank, rankme

FRAME = ViewFrame(1.0, (-3, 3, -3, 3))


def blobs_2d(n: int, labels: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, labels, n)
    return rng.normal(size=(labels, 2))[codes] * 3 + rng.normal(size=(n, 2)), codes


@pytest.mark.parametrize(("n", "labels"), [(3, 2), (60, 3), (900, 12), (1999, 1500)])
def test_the_silhouette_is_scikit_learns(n: int, labels: int) -> None:
    xy, codes = blobs_2d(n, labels, seed=n)
    if not 2 <= len(np.unique(codes)) < n:
        codes[:2] = [0, 1]
    assert mean_silhouette(xy, codes) == pytest.approx(silhouette_score(xy, codes), abs=1e-12)


def test_points_in_one_place_have_silhouette_0_as_in_scikit_learn() -> None:
    xy, codes = np.zeros((8, 2)), np.arange(8) % 2
    assert mean_silhouette(xy, codes) == silhouette_score(xy, codes) == 0.0


def test_more_points_than_measured_are_a_fixed_subsample_by_id() -> None:
    n = MAX_POINTS + 1000
    xy, codes = blobs_2d(n, 4, seed=1)
    umap = xy[:, ::-1] * np.array([1.0, -2.0])
    ids = [f"img-{i}" for i in range(n)]
    measured_once = label_silhouette(
        {"pca": xy, "umap": umap}, {"label": [f"c{c}" for c in codes]}, ids
    )
    assert measured_once is not None and measured_once.points == MAX_POINTS
    kept = set(subsample_ids(ids, MAX_POINTS))
    rows = np.array([i for i, name in enumerate(ids) if name in kept])
    assert measured_once.views["pca"] == pytest.approx(
        silhouette_score(xy[rows], codes[rows]), abs=1e-12
    )
    assert measured_once.views["umap"] == pytest.approx(
        silhouette_score(umap[rows], codes[rows]), abs=1e-12
    )
    order = np.random.default_rng(2).permutation(n)  # the same points, in another order
    again = label_silhouette(
        {"pca": xy[order]}, {"label": [f"c{c}" for c in codes[order]]}, [ids[i] for i in order]
    )
    assert again is not None
    assert again.views["pca"] == pytest.approx(measured_once.views["pca"], abs=1e-12)


@pytest.mark.parametrize(
    ("columns", "why"),
    [
        ({"label": ["a"] * 6}, "one label"),
        ({"label": list("abcdef")}, "every point its own label"),
        ({"digit": [0, 1] * 3}, "no column named label"),
        ({"label": [0.5, 1.25, 2.0, 0.1, 0.2, 0.3]}, "a numeric label column"),
    ],
)
def test_an_undefined_silhouette_gives_no_value(columns: dict[str, Any], why: str) -> None:
    xy, _ = blobs_2d(6, 2, seed=3)
    assert label_silhouette({"pca": xy}, columns, None) is None, why


def test_a_view_with_a_non_finite_point_is_left_out() -> None:
    xy, codes = blobs_2d(20, 2, seed=4)
    broken = xy.copy()
    broken[3, 1] = np.nan
    result = label_silhouette({"pca": xy, "umap": broken}, {"label": list(codes)}, None)
    assert result is not None and set(result.views) == {"pca"}
    assert label_silhouette({"umap": broken}, {"label": list(codes)}, None) is None


def snapshot(vectors: torch.Tensor, labels: Any, step: int = 3, **kwargs: Any) -> EmbeddingSnapshot:
    return EmbeddingSnapshot("enc", step, vectors, {"label": labels}, stage="validate", **kwargs)


def test_the_job_measures_ranks_by_the_numpy_formula_and_the_silhouette_of_each_view() -> None:
    g = torch.Generator().manual_seed(0)
    vectors = torch.randn(300, 16, generator=g) + 5.0  # an offset the effective rank ignores
    labels = torch.arange(300) % 3
    pca = AlignedView(vectors[:, :2].numpy() + labels[:, None].numpy() * 4, FRAME)
    umap = AlignedView(vectors[:, 2:4].numpy(), FRAME, "umap")
    made = measured(
        snapshot(vectors, labels, aligned=pca, projections=(umap,)), Parts("Test"), "enc"
    )
    assert made.ranks is not None and (made.ranks.rows, made.ranks.dim) == (300, 16)
    assert made.ranks.rankme == pytest.approx(rankme(vectors.numpy()), rel=1e-12)
    assert made.ranks.effective_rank == pytest.approx(effective_rank(vectors.numpy()), rel=1e-12)
    assert made.ranks.effective_rank > made.ranks.rankme  # the offset hides the spread
    assert made.silhouette is not None and made.silhouette.column == "label"
    for view in (pca, umap):
        expected = silhouette_score(view.coords.astype(np.float64), labels.numpy())
        assert made.silhouette.views[view.projection] == pytest.approx(expected, abs=1e-12)
    assert made.silhouette.views["pca"] > 0.5 > made.silhouette.views["umap"]
    entry = snapshot_entry(made)
    ranks = made.ranks
    assert entry["ranks"] == {
        "rankme": ranks.rankme,
        "effective_rank": ranks.effective_rank,
        "rows": 300,
        "dim": 16,
    }
    assert entry["silhouette"]["points"] == 300
    assert entry["silhouette"]["views"] == dict(made.silhouette.views)


def test_a_collapsed_embedding_has_a_low_rankme() -> None:
    g = torch.Generator().manual_seed(1)
    direction = torch.randn(1, 32, generator=g)
    collapsed = torch.randn(500, 1, generator=g) * direction + 1e-4 * torch.randn(500, 32)
    healthy = torch.randn(500, 32, generator=g)
    low = measured(snapshot(collapsed, [0, 1] * 250), Parts("Test"), "enc").ranks
    high = measured(snapshot(healthy, [0, 1] * 250), Parts("Test"), "enc").ranks
    assert low is not None and high is not None
    assert low.rankme < 1.1 and low.effective_rank < 1.1
    assert high.rankme > 25 and high.effective_rank > 25


def test_one_row_and_no_view_give_no_measure() -> None:
    made = measured(snapshot(torch.ones(1, 4), [0]), Parts("Test"), "enc")
    assert made.ranks is None and made.silhouette is None
    entry = snapshot_entry(made)
    assert "ranks" not in entry and "silhouette" not in entry
    no_view = measured(snapshot(torch.randn(10, 4), [0, 1] * 5), Parts("Test"), "enc")
    assert no_view.ranks is not None and no_view.silhouette is None


def test_measures_are_checked_where_they_are_made() -> None:
    with pytest.raises(ValueError, match="in \\[-1, 1\\]"):
        LabelSilhouette("label", 10, {"pca": 1.5})
    with pytest.raises(ValueError, match="rows of the ranks"):
        EmbeddingRanks(2.0, 1.5, 1, 4)
    with pytest.raises(TypeError, match="ranks of 'enc' must be EmbeddingRanks"):
        snapshot(torch.ones(2, 2), [0, 1], ranks={"rankme": 1.0})


def entry(step: int, rankme: float | None, silhouette: dict[str, Any] | None = None) -> dict:
    made: dict[str, Any] = {"kind": "snapshot", "key": "enc/validate", "step": step}
    if rankme is not None:
        made["ranks"] = {"rankme": rankme, "effective_rank": rankme / 2, "rows": 50, "dim": 8}
    if silhouette is not None:
        made["silhouette"] = {"column": "label", "points": 50, "views": silhouette}
    return made


def test_the_summary_holds_the_last_and_lowest_ranks_and_the_newest_silhouettes() -> None:
    flat = summarize_record(
        [
            entry(2, 6.0, {"pca": 0.1, "umap": 0.3}),
            entry(4, 2.5, {"pca": 0.2}),
            entry(8, 4.0, {"pca": 0.4, "umap": -0.25}),
            entry(6, 3.0, {"pca": 0.9}),  # written late, not the newest: counts for the lowest
        ]
    ).flat()
    base = "learnscope/{}/enc:validate/{}"
    assert flat[base.format("rankme", "last")] == 4.0
    assert flat[base.format("rankme", "lowest")] == 2.5
    assert flat[base.format("effective_rank", "last")] == 2.0
    assert flat[base.format("effective_rank", "lowest")] == 1.25
    assert flat[base.format("silhouette", "pca")] == 0.4
    assert flat[base.format("silhouette", "umap")] == -0.25
    assert flat["learnscope/snapshots/enc:validate/count"] == 4
    assert all(name.count("/") + name.count(".") <= MAX_SEPARATORS for name in flat)


def test_a_snapshot_at_the_same_step_written_later_is_the_newest() -> None:
    flat = summarize_record([entry(4, 5.0, {"pca": 0.5}), entry(4, 3.0, None)]).flat()
    assert flat["learnscope/rankme/enc:validate/last"] == 3.0
    assert not any(name.startswith("learnscope/silhouette/") for name in flat)


def test_the_newest_snapshot_without_ranks_has_no_last_but_the_lowest_stays() -> None:
    flat = summarize_record([entry(2, 5.0), entry(4, None)]).flat()
    assert flat["learnscope/rankme/enc:validate/lowest"] == 5.0
    assert "learnscope/rankme/enc:validate/last" not in flat


def test_an_older_record_without_the_fields_still_folds() -> None:
    old = [
        {"kind": "run", "format": 1, "time": 1.0},
        {"kind": "snapshot", "key": "enc/validate", "step": 3, "points": 4, "ids": None},
        {"kind": "end", "step": 3, "status": "finished"},
    ]
    summary = summarize_record(old)
    (key,) = summary.snapshots
    assert (key.count, key.rankme_last, key.rankme_lowest, key.silhouette) == (1, None, None, ())
    flat = summary.flat()
    assert flat["learnscope/snapshots/enc:validate/count"] == 1
    assert not any(n.startswith(("learnscope/rankme", "learnscope/silhouette")) for n in flat)


@pytest.mark.parametrize(
    "damage",
    [
        {"ranks": {"rankme": "high", "effective_rank": 1.0, "rows": 5, "dim": 2}},
        {"ranks": {"rankme": None, "effective_rank": 1.0, "rows": 5, "dim": 2}},
        {"ranks": {"rankme": 2.0, "effective_rank": 1.0, "rows": 1, "dim": 2}},
        {"ranks": [2.0, 1.0]},
        {"silhouette": {"column": "label", "points": 5, "views": {"pca": 2.0}}},
        {"silhouette": {"column": "label", "points": 5, "views": {"pca": None}}},
        {"silhouette": {"column": 3, "points": 5, "views": {"pca": 0.5}}},
        {"silhouette": {"column": "label", "points": 5, "views": [0.5]}},
    ],
)
def test_a_damaged_measure_is_skipped_and_the_snapshot_still_counts(
    damage: dict[str, Any],
) -> None:
    damaged = {**entry(9, None), **damage}
    summary = summarize_record([entry(2, 5.0, {"pca": 0.5}), damaged])
    (key,) = summary.snapshots
    assert (key.count, key.last_step) == (2, 9)
    assert key.rankme_lowest == 5.0  # the healthy snapshot's
    assert key.rankme_last is None and key.silhouette == ()  # the newest has none readable
