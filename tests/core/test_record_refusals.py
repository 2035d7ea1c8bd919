"""Every record refuses, when it is made, what no writer can write: each error names the record's
field and what it needs. What is clearly meant (a list of numbers for an array) is accepted."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from learnscope.records import (
    AlignedView,
    AutocorrelationSummary,
    CallbackSettings,
    EmbeddingSnapshot,
    GroupAutocorrelation,
    Histogram,
    RenderedImage,
    RunEnd,
    RunError,
    RunStart,
    ViewFrame,
)

FRAME = ViewFrame(1.0, (-2.5, 2.5, -2.5, 2.5))
ACF = np.array([1.0, 0.5, 0.25])


def group(**changes: Any) -> GroupAutocorrelation:
    given = {
        "group": "encoder",
        "kind": "params",
        "mean_acf": ACF,
        "rho1_median": 0.5,
        "rho1_q25": 0.4,
        "rho1_q75": 0.6,
        "tau": 3.0,
    }
    return GroupAutocorrelation(**{**given, **changes})


def snapshot(**changes: Any) -> EmbeddingSnapshot:
    return EmbeddingSnapshot(
        **{"tag": "encoder", "step": 3, "vectors": np.zeros((2, 4)), **changes}
    )


REFUSED: dict[str, tuple[Callable[[], object], type[Exception], str]] = {
    # Histogram
    "histogram of complex values": (
        lambda: Histogram("h", 0, np.array([1 + 2j])),
        ValueError,
        r"values of Histogram 'h' must be real numbers, got complex128",
    ),
    "histogram of a complex tensor": (
        lambda: Histogram("h", 0, torch.tensor([1 + 2j])),
        ValueError,
        r"values of Histogram 'h' must be real numbers, got complex64",
    ),
    "histogram of text": (
        lambda: Histogram("h", 0, ["0.5", "1"]),
        TypeError,
        r"values of Histogram 'h' must be real numbers, got <U3",
    ),
    "histogram of booleans": (
        lambda: Histogram("h", 0, np.array([True, False])),
        TypeError,
        r"must be real numbers, got booleans",
    ),
    "histogram of no array": (
        lambda: Histogram("h", 0, None),
        TypeError,
        r"values of Histogram 'h' must be an array of real numbers .* got NoneType",
    ),
    "histogram of a ragged list": (
        lambda: Histogram("h", 0, [[1, 2], [3]]),
        ValueError,
        r"values of Histogram 'h' must be a rectangular array",
    ),
    "histogram without a tag": (lambda: Histogram("", 0, [1.0]), ValueError, r"Histogram tag"),
    "histogram at a float step": (
        lambda: Histogram("h", 1.0, [1.0]),
        TypeError,
        r"step of Histogram 'h' must be an int of at least 0 \(the trainer's global step\)",
    ),
    "histogram at a negative step": (
        lambda: Histogram("h", -1, [1.0]),
        ValueError,
        r"step of Histogram 'h' must be an int of at least 0",
    ),
    # RenderedImage
    "image of no pixel": (
        lambda: RenderedImage("chart", 0, np.zeros((0, 0, 3), np.uint8)),
        ValueError,
        r"pixels of RenderedImage 'chart' must be \[H, W, 3 or 4\] with H and W at least 1, "
        r"got \(0, 0, 3\)",
    ),
    "image of no row": (
        lambda: RenderedImage("chart", 0, np.zeros((0, 5, 4), np.uint8)),
        ValueError,
        r"H and W at least 1",
    ),
    "image given as a list": (
        lambda: RenderedImage("chart", 0, [[[0, 0, 0]]]),
        TypeError,
        r"pixels of RenderedImage 'chart' must be a numpy uint8 array .* got list",
    ),
    "image of floats": (
        lambda: RenderedImage("chart", 0, np.zeros((4, 5, 3))),
        TypeError,
        r"pixels of RenderedImage 'chart' must be uint8 \(0-255\), got float64",
    ),
    "image without channels": (
        lambda: RenderedImage("chart", 0, np.zeros((4, 5), np.uint8)),
        ValueError,
        r"got \(4, 5\)",
    ),
    "image of two channels": (
        lambda: RenderedImage("chart", 0, np.zeros((4, 5, 2), np.uint8)),
        ValueError,
        r"got \(4, 5, 2\)",
    ),
    "image without a tag": (
        lambda: RenderedImage(None, 0, np.zeros((1, 1, 3), np.uint8)),
        TypeError,
        r"RenderedImage tag must be a non-empty string, got NoneType",
    ),
    # GroupAutocorrelation
    "complex ACF": (
        lambda: group(mean_acf=ACF * 1j),
        ValueError,
        r"mean_acf of GroupAutocorrelation params/encoder must be real numbers, got complex",
    ),
    "ACF of two rows": (
        lambda: group(mean_acf=np.ones((2, 3))),
        ValueError,
        r"mean_acf .* must be a non-empty 1-D array .* got shape \(2, 3\)",
    ),
    "empty ACF": (lambda: group(mean_acf=[]), ValueError, r"non-empty 1-D array"),
    "complex median": (
        lambda: group(rho1_median=0.5 + 0j),
        TypeError,
        r"rho1_median of GroupAutocorrelation params/encoder must be a real number, got complex",
    ),
    "median as text": (
        lambda: group(rho1_q25="0.4"),
        TypeError,
        r"rho1_q25 .* must be a real number, got str",
    ),
    "tau of zero": (lambda: group(tau=0.0), ValueError, r"tau .* must be a positive number"),
    "infinite tau": (lambda: group(tau=np.inf), ValueError, r"tau .* must be a positive number"),
    "one step": (lambda: group(num_steps=1), ValueError, r"num_steps .* at least 2"),
    "a fraction of an element": (
        lambda: group(non_finite_elements=1.5),
        TypeError,
        r"non_finite_elements .* must be an int of at least 0, got float 1.5",
    ),
    "empty kind": (lambda: group(kind=""), ValueError, r"GroupAutocorrelation kind"),
    "group by number": (
        lambda: group(group=3),
        TypeError,
        r"GroupAutocorrelation group of 'params' must be a non-empty string, got int 3",
    ),
    # AutocorrelationSummary
    "lag of a fraction": (
        lambda: AutocorrelationSummary(5, (1.5,), (group(),)),
        TypeError,
        r"each lag of an AutocorrelationSummary must be an int of at least 0, got float 1.5",
    ),
    "lags as text": (
        lambda: AutocorrelationSummary(5, "12", (group(),)),
        TypeError,
        r"lags must be a sequence of ints, got str",
    ),
    "group as a mapping": (
        lambda: AutocorrelationSummary(5, (1,), ({"group": "encoder"},)),
        TypeError,
        r"groups of an AutocorrelationSummary must be GroupAutocorrelation, got dict",
    ),
    "summary at a negative step": (
        lambda: AutocorrelationSummary(-1, (1,), (group(),)),
        ValueError,
        r"AutocorrelationSummary step must be an int of at least 0",
    ),
    "all_scalars as text": (
        lambda: AutocorrelationSummary(5, (1,), (group(),), all_scalars="no"),
        TypeError,
        r"all_scalars must be True or False",
    ),
    # ViewFrame
    "complex spread": (
        lambda: ViewFrame(1j, (-1, 1, -1, 1)),
        TypeError,
        r"ViewFrame spread must be a real number, got complex",
    ),
    "negative spread": (
        lambda: ViewFrame(-1.0, (-1, 1, -1, 1)),
        ValueError,
        r"ViewFrame spread is a distance, at least 0",
    ),
    "spread of NaN": (
        lambda: ViewFrame(np.nan, (-1, 1, -1, 1)),
        ValueError,
        r"ViewFrame spread must be finite",
    ),
    "frame upside down": (
        lambda: ViewFrame(1.0, (1, -1, -1, 1)),
        ValueError,
        r"ViewFrame limits must be \(xmin, xmax, ymin, ymax\) with xmin < xmax",
    ),
    "frame of three limits": (
        lambda: ViewFrame(1.0, (-1, 1, -1)),
        ValueError,
        r"ViewFrame limits must be \(xmin, xmax, ymin, ymax\)",
    ),
    "infinite frame": (
        lambda: ViewFrame(1.0, (-np.inf, 1, -1, 1)),
        ValueError,
        r"each ViewFrame limit must be finite",
    ),
    # AlignedView
    "complex coordinates": (
        lambda: AlignedView(np.zeros((3, 2), complex), FRAME),
        ValueError,
        r"coordinates of the aligned pca view must be real numbers, got complex128",
    ),
    "coordinates of one column": (
        lambda: AlignedView(np.zeros((3, 1)), FRAME),
        ValueError,
        r"coordinates of the aligned pca view must be \[N, 2 or 3\], got \(3, 1\)",
    ),
    "frame as a tuple": (
        lambda: AlignedView(np.zeros((3, 2)), (1.0, (-1, 1, -1, 1))),
        TypeError,
        r"the frame of the aligned pca view must be a ViewFrame, got tuple",
    ),
    "projection by number": (
        lambda: AlignedView(np.zeros((3, 2)), FRAME, 3),
        ValueError,
        r"a projection is named by a word, such as 'umap', not 3",
    ),
    "fitted on no point": (
        lambda: AlignedView(np.zeros((3, 2)), FRAME, "umap", 0),
        ValueError,
        r"fitted of the aligned umap view must be an int of at least 1",
    ),
    # EmbeddingSnapshot
    "metadata column as text": (
        lambda: snapshot(metadata={"label": "ab"}),
        TypeError,
        r"metadata column 'label' is str 'ab': a column holds one value per row",
    ),
    "metadata column as a mapping": (
        lambda: snapshot(metadata={"label": {0: "a", 1: "b"}}),
        TypeError,
        r"metadata column 'label' is dict",
    ),
    "thumbnails of no pixel": (
        lambda: snapshot(images=np.zeros((2, 3, 0, 0))),
        ValueError,
        r"images must have shape \[N=2, C in \(1, 3, 4\), H >= 1, W >= 1\], got \(2, 3, 0, 0\)",
    ),
    "aligned view as an array": (
        lambda: snapshot(aligned=np.zeros((2, 2))),
        TypeError,
        r"aligned and projections of 'encoder' are AlignedView .* got ndarray",
    ),
    "snapshot at a negative step": (
        lambda: snapshot(step=-1),
        ValueError,
        r"step must be at least 0 \(the trainer's global step\), got -1 for 'encoder'",
    ),
    "empty stage": (lambda: snapshot(stage=""), ValueError, r"stage of 'encoder' \(or None\)"),
    "stage by number": (
        lambda: snapshot(stage=1),
        TypeError,
        r"stage of 'encoder' \(or None\) must be a non-empty string",
    ),
    "negative rows dropped": (
        lambda: snapshot(dropped=-1),
        ValueError,
        r"dropped of 'encoder' must be an int of at least 0",
    ),
    # CallbackSettings, RunStart, RunError, RunEnd
    "setting that is no JSON": (
        lambda: CallbackSettings("TrainingHelper", {"input_checks": [object()]}),
        TypeError,
        r"setting 'input_checks' of TrainingHelper holds an object, not a JSON value .* "
        r"json_setting\(value\) makes one",
    ),
    "setting of a set": (
        lambda: CallbackSettings("EmbeddingProjector", {"stages": {"validate"}}),
        TypeError,
        r"setting 'stages' of EmbeddingProjector holds a set",
    ),
    "settings as a list": (
        lambda: CallbackSettings("TrainingHelper", [("n", 1)]),
        TypeError,
        r"settings of TrainingHelper must be a mapping",
    ),
    "setting named by a number": (
        lambda: CallbackSettings("TrainingHelper", {1: 1}),
        TypeError,
        r"settings of TrainingHelper are named by text, got 1",
    ),
    "callback without a name": (lambda: CallbackSettings(""), ValueError, r"CallbackSettings"),
    "callback as a mapping": (
        lambda: RunStart(({"name": "TrainingHelper"},)),
        TypeError,
        r"callbacks of a RunStart must be CallbackSettings, got dict",
    ),
    "start time as text": (
        lambda: RunStart((), "now"),
        TypeError,
        r"RunStart time must be a real number, got str",
    ),
    "start time of NaN": (
        lambda: RunStart((), np.nan),
        ValueError,
        r"RunStart time must be finite",
    ),
    "nested hyper-parameters": (
        lambda: RunStart(hyperparameters={"optimizer": {"lr": 0.1}}),
        TypeError,
        r"RunStart hyperparameters\['optimizer'\] is dict .* flat_hyperparameters",
    ),
    "hyper-parameter of NaN": (
        lambda: RunStart(hyperparameters={"dropout": np.nan}),
        TypeError,
        r"RunStart hyperparameters\['dropout'\] is float nan",
    ),
    "hyper-parameters named by numbers": (
        lambda: RunStart(hyperparameters={1: 0.1}),
        TypeError,
        r"RunStart hyperparameters are named by text, got 1",
    ),
    "error without a type": (
        lambda: RunError(None, "bad"),
        TypeError,
        r"RunError type must be a non-empty string",
    ),
    "error message as an exception": (
        lambda: RunError("ValueError", ValueError("bad")),
        TypeError,
        r"RunError message must be text \(str\(exception\)\), got ValueError",
    ),
    "end at a negative step": (
        lambda: RunEnd(-1),
        ValueError,
        r"RunEnd step must be an int of at least 0",
    ),
    "end at a step of text": (lambda: RunEnd("5"), TypeError, r"RunEnd step must be an int"),
    "error given as text": (
        lambda: RunEnd(5, "failed", "ValueError: bad"),
        TypeError,
        r"the error of a RunEnd is a RunError \(RunError.of\(exception\)\), got str",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_each_record_refuses_what_no_writer_can_write(case: str) -> None:
    make, error, message = REFUSED[case]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused before numpy casts with a ComplexWarning
        with pytest.raises(error, match=message):
            make()


def test_a_list_of_numbers_is_an_array_where_that_is_unambiguous() -> None:
    assert Histogram("h", 0, [1, 2.5]).values.tolist() == [1.0, 2.5]
    assert Histogram("h", 0, [[1, 2], [3, 4]]).values.shape == (4,)  # any shape, read flat
    assert Histogram("h", np.int64(2), torch.tensor([0.5])).step == 2
    assert Histogram("h", 0, []).finite_values().size == 0  # no values: the writers skip it
    assert group(mean_acf=[1, 0.5]).mean_acf.dtype == np.float64
    assert group(rho1_median=np.float32(0.5), tau=np.float64(2.0)).tau == 2.0
    assert AutocorrelationSummary(5, [np.int64(1)], [group()]).lags == (1,)
    assert AlignedView([[0, 1], [2, 3]], FRAME).coords.dtype == np.float32
    assert ViewFrame(0, [-1, 1, -1, 1]) == ViewFrame(0.0, (-1.0, 1.0, -1.0, 1.0))
    assert snapshot(vectors=[[1, 2], [3, 4]]).dim == 2
    assert RunEnd(np.int64(4)).step == 4
    settings = {"lags": (1, 2), "n": np.int64(3), "fn": "builtins.len", "nested": {"a": None}}
    assert CallbackSettings("ModelAutocorrelation", settings).settings == settings


def test_a_rendered_image_keeps_its_pixels() -> None:
    pixels = np.zeros((1, 1, 4), np.uint8)
    assert RenderedImage("chart", 0, pixels).pixels is pixels
