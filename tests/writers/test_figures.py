"""The pictures drawn with matplotlib: ACF against lag, PCA scatter, and life without matplotlib.

Each picture is drawn for real (Agg); positions are checked through the figure's own data
transform, so a band or a point is looked for exactly where the data puts it.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from learnscope.autocorrelation.analysis import summarize
from learnscope.embeddings.scatter_frame import frame_limits
from learnscope.plugins.pipeline import figures
from learnscope.plugins.pipeline.drawing import Drawing, figure_pixels
from learnscope.plugins.pipeline.figures import (
    BAND_COLOUR,
    COLOURS,
    acf_figure,
    acf_images,
    scatter_figure,
)
from learnscope.plugins.pipeline.pictures import snapshot_pictures
from learnscope.records import AutocorrelationSummary, EmbeddingSnapshot, GroupAutocorrelation

LAG = np.arange(21)


def rgb(colour: str) -> np.ndarray:
    return np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)], np.float64)


def pixel_at(figure: Any, pixels: np.ndarray, x: float, y: float, axes: int = 0) -> np.ndarray:
    """The pixel at data point ``(x, y)`` of the figure's axes (display y grows upwards)."""
    px, py = figure.axes[axes].transData.transform((x, y))
    return pixels[pixels.shape[0] - 1 - int(py), int(px)].astype(np.float64)


def legend_texts(figure: Any) -> list[str]:
    legend = figure.axes[0].get_legend()
    return [] if legend is None else [t.get_text() for t in legend.get_texts()]


def groups(num_steps: int | None = 128) -> list[GroupAutocorrelation]:
    return [
        GroupAutocorrelation("encoder", "params", 0.9**LAG, 0.9, 0.85, 0.95, 9.5, 0, num_steps),
        GroupAutocorrelation("head", "params", (-0.5) ** LAG, -0.5, -0.6, -0.4, None, 3, num_steps),
        GroupAutocorrelation("frozen", "params", np.full(21, np.nan), *[np.nan] * 3, None),
    ]


def test_acf_figure_has_the_groups_in_order_and_the_white_noise_band_where_it_belongs() -> None:
    figure = acf_figure(groups(), "mean ACF of parameters, step 99")
    texts = legend_texts(figure)
    assert [t.split()[0] for t in texts] == ["encoder", "head", "frozen", "white", "τ:"]
    assert texts[0] == "encoder  τ=9.5" and texts[1].startswith("head  r₁=-0.50")
    assert "3 NaN/Inf left out" in texts[1] and texts[2] == "frozen  constant"
    assert "T=128" in texts[3]
    assert texts[4] == "τ: steps per independent value"  # what tau counts, where one is shown
    ax = figure.axes[0]
    assert ax.get_ylim() == (-1.0, 1.0) and ax.get_xlim() == (0.0, 20.0)
    assert all(float(t).is_integer() for t in ax.get_xticks())  # round lags
    assert ax.get_title() == "mean ACF of parameters, step 99"

    pixels = figure_pixels(figure)
    assert pixels.shape[1:] == (figures.WIDTH, 3) and pixels.dtype == np.uint8
    half = 1.96 / math.sqrt(128)
    x = 13.5  # between two round ticks, where no grid line runs and both lines are near 0
    inside = pixel_at(figure, pixels, x, 0.6 * half)
    above = pixel_at(figure, pixels, x, 1.6 * half)
    below = pixel_at(figure, pixels, x, -0.6 * half)
    np.testing.assert_allclose(inside, rgb(BAND_COLOUR), atol=2)
    np.testing.assert_allclose(below, rgb(BAND_COLOUR), atol=2)
    np.testing.assert_allclose(above, 255, atol=2)  # white outside the band
    # The encoder's line passes through its lag-5 marker, in its colour.
    np.testing.assert_allclose(pixel_at(figure, pixels, 5, 0.9**5), rgb(COLOURS[0]), atol=2)


def test_acf_figure_without_the_number_of_steps_has_no_band() -> None:
    figure = acf_figure(groups(num_steps=None)[:1], "t")
    assert legend_texts(figure) == ["encoder  τ=9.5", "τ: steps per independent value"]
    pixels = figure_pixels(figure)
    np.testing.assert_allclose(pixel_at(figure, pixels, 13.5, 0.1), 255, atol=2)


def test_acf_images_of_a_real_summary_one_per_kind_with_its_band() -> None:
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(96, 8, generator=g)
    summary = summarize(
        {"params": noise.cumsum(0), "grads": noise},
        torch.tensor([0, 0, 1, 1, 2, 2, 3, 3]),
        ["embed", "encoder", "decoder", "head"],
        step=95,
        lags=(1, 2, 5),
    )
    assert {grp.num_steps for grp in summary.groups} == {96}
    with Drawing() as drawing:  # as a run's writers draw
        images = acf_images(summary, "ac", drawing)
        assert [(i.tag, i.step, i.pixels.shape[1:]) for i in images] == [
            ("ac/params/acf", 95, (figures.WIDTH, 3)),
            ("ac/grads/acf", 95, (figures.WIDTH, 3)),
        ]
        assert not np.array_equal(images[0].pixels, images[1].pixels)
    alone = acf_images(summary, "ac")  # outside a drawing: drawn, the same pixels
    assert all(np.array_equal(a.pixels, b.pixels) for a, b in zip(alone, images, strict=True))


def snapshot(vectors: np.ndarray, step: int, labels: list[int]) -> EmbeddingSnapshot:
    return EmbeddingSnapshot(
        "encoder", step, torch.as_tensor(vectors), {"digit": labels}, stage="validate"
    )


def test_scatter_axes_stay_fixed_per_tag_and_points_outside_are_counted_on_the_edge() -> None:
    from learnscope.embeddings.aligned_views import AlignedViews

    rng = np.random.default_rng(0)
    labels = [i % 3 for i in range(300)]
    first = rng.normal(size=(300, 8))
    later = first * 40.0  # a much larger spread, and a few points far out
    later[:3] *= 6.0
    views = AlignedViews()
    keys = torch.arange(300)
    (image_1,) = snapshot_pictures(views.add(snapshot(first, 10, labels), keys))
    limits = views.limits["encoder/validate"]
    (image_2,) = snapshot_pictures(views.add(snapshot(later, 20, labels), keys))
    assert views.limits["encoder/validate"] == limits  # not grown
    assert image_1 is not None and image_2 is not None
    assert image_1.pixels.shape == image_2.pixels.shape == (441, figures.WIDTH, 3)

    # The same frame drawn for both: same axes box and limits, whatever the spread.
    xy_1 = rng.normal(size=(300, 2))
    xy_1 /= np.sqrt((xy_1**2).sum(1).mean())
    xy_2 = xy_1.copy()
    xy_2[:4] = [[9.0, 0.0], [-7.0, 1.0], [0.5, 12.0], [30.0, -30.0]]
    frame = frame_limits(xy_1, keep=1.0)  # holds every point of the first
    one = scatter_figure(xy_1, labels, "a", frame, "digit")
    two = scatter_figure(xy_2, labels, "b", frame, "digit")
    for figure in (one, two):
        ax = figure.axes[0]
        assert (*ax.get_xlim(), *ax.get_ylim()) == frame
        assert all(float(t * 2).is_integer() for t in ax.get_xticks())  # round ticks
    assert one.axes[0].get_position().bounds == two.axes[0].get_position().bounds
    assert "outside" not in one.axes[0].get_title()
    assert two.axes[0].get_title() == "b\n4 points outside: × on the edge"
    assert legend_texts(two)[-1] == "4 outside" and legend_texts(two)[0] == "0"
    edge = two.axes[0].collections[-1].get_offsets()  # the × markers, drawn last
    assert len(edge) == 4
    assert all(np.isclose(np.abs(p), frame[1]).any() for p in np.asarray(edge))


def test_scatter_legend_colours_and_numeric_labels() -> None:
    xy = np.array([[-1.0, -1.0], [1.0, 1.0]] + [[0.0, 0.0]] * 10)
    labels = ["cat", "ant"] + [f"x{i:02d}" for i in range(10)]  # 12 labels: 10 and "other"
    figure = scatter_figure(xy, labels, "t", (-2.0, 2.0, -2.0, 2.0), "kind")
    texts = legend_texts(figure)
    assert texts[:2] == ["ant", "cat"] and texts[-1] == "other" and len(texts) == 11
    assert figure.axes[0].get_legend().get_title().get_text() == "kind"
    pixels = figure_pixels(figure)
    # "ant", first in sorted order, at (1, 1), at alpha 0.85 over the white or the grid (#ececec)
    over_white, over_grid = (0.85 * rgb(COLOURS[0]) + 0.15 * back for back in (255, 236))
    shown = pixel_at(figure, pixels, 1.0, 1.0)
    assert (over_grid - 3 <= shown).all() and (shown <= over_white + 3).all(), shown

    values = np.linspace(0.0, 1.0, 50).tolist()  # not categories: a colour bar
    numeric = scatter_figure(np.random.default_rng(1).normal(size=(50, 2)), values, "n")
    assert len(numeric.axes) == 2 and numeric.axes[1].get_xlabel() == "label"  # under the plot
    assert numeric.axes[0].get_legend() is None


def test_without_matplotlib_pictures_are_skipped_with_one_warning_and_the_rest_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, learnscope_log: pytest.LogCaptureFixture
) -> None:
    import wandb

    from learnscope.embeddings.aligned_views import AlignedViews
    from learnscope.plugins import Writers
    from learnscope.plugins.tensorboard import projector_files
    from learnscope.plugins.tensorboard.writer import TensorBoardWriter
    from learnscope.plugins.wandb.autocorrelation import autocorrelation_log

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    with pytest.raises(ImportError):
        import matplotlib  # noqa: F401

    summary = AutocorrelationSummary(9, (1, 2), tuple(groups()[:2]))
    assert acf_images(summary) == []
    writers = Writers([TensorBoardWriter(tmp_path)])  # the pipeline of a run: says it once
    writers.write_autocorrelation(summary)
    vectors = np.random.default_rng(0).normal(size=(20, 4))
    thumbs = torch.rand(20, 3, 4, 4)
    with_images = EmbeddingSnapshot("enc", 3, torch.as_tensor(vectors), images=thumbs)
    writers.write_embedding(with_images)
    writers.write_autocorrelation(summary)  # said once, not again
    writers.close()
    logged = autocorrelation_log(wandb, summary, "step")
    projected = AlignedViews().add_pca(snapshot(vectors, 5, [i % 2 for i in range(20)]))
    pictures = snapshot_pictures(projected)

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert "~learnscope/autocorrelation/params/encoder/lag_1" in events.Tags()["scalars"]
    assert events.Tags()["images"] == []
    (entry,) = projector_files.read_config(tmp_path).embeddings
    assert entry.tensor_path and not entry.sprite.image_path  # the vectors, no thumbnails
    assert "~learnscope/autocorrelation/params/acf_lines" in logged
    assert "~learnscope/autocorrelation/params/acf" not in logged
    assert pictures == [] and "pca_x" in projected.metadata_columns()
    warnings = [r.getMessage() for r in learnscope_log.records]
    assert len(warnings) == 1, warnings
    assert "pictures are skipped" in warnings[0]
    assert "pip install 'learnscope[tensorboard]'" in warnings[0]


# CSS pixels: how wide TensorBoard 2.21's Images tab shows a picture, at 1280, 1400 and 1920 px
# windows alike (tests/views/test_images_fit_cards.py measures it in a real TensorBoard).
CARD = 350


def assert_legible_at_card_size(figure: Any) -> None:
    """Readable at ``CARD`` px wide: every text at least 14 px tall there, nothing cut off,
    the legend below the plot, the card's width (shown pixel for pixel, no sideways scrolling)."""
    from matplotlib.text import Text

    pixels = figure_pixels(figure)
    height, width = pixels.shape[:2]
    assert width == CARD, width
    renderer = figure.canvas.get_renderer()
    undrawn = set()  # labels of ticks beyond the axis's limits, which matplotlib leaves out
    for axis in [a for ax in figure.axes for a in (ax.xaxis, ax.yaxis)]:
        low, high = sorted(axis.get_view_interval())
        for tick in axis.get_major_ticks():
            if not low - 1e-9 <= tick.get_loc() <= high + 1e-9:
                undrawn |= {id(tick.label1), id(tick.label2)}
    texts = [
        t
        for t in figure.findobj(Text)
        if t.get_visible() and t.get_text().strip() and id(t) not in undrawn
    ]
    assert len(texts) > 8
    for text in texts:
        shown = text.get_fontsize() * figure.dpi / 72 * CARD / width
        assert shown >= 14, (text.get_text(), text.get_fontsize(), width)
        box = text.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= width and box.y0 >= 0 and box.y1 <= height, (
            text.get_text(),
            box,
        )
    under = figure.axes[0].xaxis.get_tightbbox(renderer).y0  # the x tick labels' and label's
    for other in figure.axes[1:]:  # a colour bar: under the plot
        assert other.get_tightbbox(renderer).y1 <= under + 1
    legend = figure.axes[0].get_legend()
    if legend is not None:
        box = legend.get_window_extent(renderer)
        assert box.y1 <= under + 1 and box.x0 >= 0 and box.x1 <= width, (box, under)


def test_acf_figure_is_legible_at_card_size() -> None:
    many = [
        GroupAutocorrelation(f"decoder.layers.{i}.mlp", "grads", 0.5**LAG, 0.5, 0.4, 0.6, 1.9)
        for i in range(7)
    ]
    for chosen in (groups(), groups()[:1], many + groups()):
        figure = acf_figure(chosen, "mean ACF of gradients, step 160")
        assert_legible_at_card_size(figure)
        assert len(legend_texts(figure)) == len(chosen) + 2  # the band's entry, tau's note


def test_a_tau_below_one_is_explained_in_the_legend() -> None:
    """tau < 1 (gradients that undo each other's steps) says so where it is shown."""
    anti = 0.6 * (-0.5) ** LAG
    anti[0] = 1.0
    below = GroupAutocorrelation("features", "grads", anti, 0.3, 0.2, 0.4, 0.136, 0, 256)
    above = GroupAutocorrelation("classifier", "grads", 0.5**LAG, 0.5, 0.4, 0.6, 2.5, 0, 256)
    none = GroupAutocorrelation("head", "grads", 0.5**LAG, 0.5, 0.4, 0.6, None, 0, 256)
    texts = legend_texts(acf_figure([below, above], "mean ACF of gradients, step 315"))
    assert texts[0] == "features  τ=0.136" and texts[1] == "classifier  τ=2.5"
    assert texts[-1] == (
        "τ: steps per independent value;\nτ < 1: each step partly undoes\n"
        "the last (anti-correlated)"
    )
    assert legend_texts(acf_figure([above], "t"))[-1] == "τ: steps per independent value"
    assert [t.split()[0] for t in legend_texts(acf_figure([none], "t"))] == ["head", "white"]
    assert_legible_at_card_size(acf_figure([below, above], "mean ACF of gradients, step 315"))


def test_scatter_figure_is_legible_at_card_size() -> None:
    rng = np.random.default_rng(0)
    xy = rng.normal(size=(300, 2))
    xy[:2] = [[30.0, 0.0], [0.0, -30.0]]
    frame = (-5.0, 5.0, -5.0, 5.0)
    title = "encoder/validate  step 160  spread 9.56"
    digits = [i % 10 for i in range(300)]
    names = [f"a_rather_long_class_name_{i % 12}" for i in range(300)]
    values = rng.uniform(0, 1, 300).tolist()
    for labels, name in ((digits, "label"), (names, "class"), (values, "dose"), (None, None)):
        figure = scatter_figure(xy, labels, title, frame, name)
        assert_legible_at_card_size(figure)
        assert "2 points outside" in figure.axes[0].get_title()
