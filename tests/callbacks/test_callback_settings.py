"""Each callback's settings are held once: one frozen object, made from its arguments, only read.

The object's fields are the constructor's arguments (names, order, defaults), so the run
record (made from it) shows every argument as given; the callbacks' public attributes are
read-only views of it; the parts of a callback read it, and TrainingHelper reads the settings
of the projector beside it without copying anything onto itself or its parts.
"""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch import Callback

from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from learnscope.lightning_glue.autocorrelation_settings import AutocorrelationSettings
from learnscope.lightning_glue.encoder_capture import CapturedOutput
from learnscope.lightning_glue.helper_checks import HelperSettings
from learnscope.lightning_glue.output_capture import OutputCapture, OutputReading
from learnscope.lightning_glue.projector_settings import ProjectorSettings
from learnscope.records.run import json_setting
from tests.kit.models import Backbone, loaders, trainer

KINDS = [
    (EmbeddingProjector, ProjectorSettings),
    (TrainingHelper, HelperSettings),
    (ModelAutocorrelation, AutocorrelationSettings),
]


def first_row(out: Any) -> Any:
    """A ``select`` that gives the output itself (a named function, for the record)."""
    return out


# The fit's own arguments, given to any callback and held by the base for the fit's one writer
# session (the write limits): not a setting of what the callback watches.
FIT_ARGUMENTS = ("write_limits",)


def as_called(kind: type, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments of ``kind(**kwargs)`` with their defaults, as JSON values, in order."""
    bound = inspect.signature(kind.__init__).bind(None, **kwargs)
    bound.apply_defaults()
    arguments = list(bound.arguments.items())[1:]
    return {name: json_setting(value) for name, value in arguments if name not in FIT_ARGUMENTS}


@pytest.mark.parametrize(("callback", "settings"), KINDS)
def test_the_settings_fields_are_the_constructors_arguments(callback: type, settings: type) -> None:
    """A new argument without its field (or another default) would leave the record: fail."""
    parameters = list(inspect.signature(callback.__init__).parameters.values())[1:]
    parameters = [p for p in parameters if p.name not in FIT_ARGUMENTS]
    fields = [f for f in dataclasses.fields(settings) if f.init]
    assert [f.name for f in fields] == [p.name for p in parameters]
    assert [f.default for f in fields] == [p.default for p in parameters]
    made = callback()
    assert isinstance(made.settings, settings) and made.settings == settings()


@pytest.mark.parametrize(
    ("kind", "kwargs"),
    [
        (
            EmbeddingProjector,
            {
                "module": "backbone",
                "mask_fn": "math.sqrt",
                "stages": "validate",
                "tag": None,
            },
        ),
        (TrainingHelper, {"input_checks": [len], "head_modules": ("head",), "spatial": "mean"}),
        (ModelAutocorrelation, {"buffer_size": 8, "lags": [5, 1, 1], "all_scalars": 1}),
    ],
)
def test_the_record_shows_the_arguments_as_given(kind: type, kwargs: dict[str, Any]) -> None:
    made = kind(**kwargs)
    record = made.learnscope_settings()
    assert record.name == kind.__name__
    assert dict(record.settings) == as_called(kind, kwargs)
    assert pickle.loads(pickle.dumps(made)).learnscope_settings() == record


def test_public_attributes_read_the_settings_and_cannot_be_set() -> None:
    projector = EmbeddingProjector("backbone", mask_fn="math.sqrt", stages="validate")
    assert projector.tag == "backbone" and projector.settings.tag is None
    assert projector.stages == ("validate",) and projector.settings.stages == "validate"
    import math

    assert projector.mask_fn is math.sqrt and projector.settings.mask_fn == "math.sqrt"
    assert projector.aligned_pca is False and projector.ids_fn is None
    autocorrelation = ModelAutocorrelation(buffer_size=8, lags=[5, 1, 1], all_scalars=1)
    assert autocorrelation.lags == (1, 5) and autocorrelation.all_scalars is True
    helper = TrainingHelper(head_modules=("head",), collapse_thresholds=None)
    assert helper.head_modules == ["head"] and helper.collapse_thresholds == {}
    for callback, name in (
        (projector, "max_points"),
        (autocorrelation, "lags"),
        (helper, "select"),
    ):
        with pytest.raises(AttributeError):
            setattr(callback, name, 1)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(callback.settings, name, 1)


def test_bad_settings_fail_when_the_callback_is_made() -> None:
    with pytest.raises(ValueError, match="ids_fn must be a function or 'dataset_index', got 3"):
        EmbeddingProjector(ids_fn=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown collapse_thresholds"):
        TrainingHelper(collapse_thresholds={"rankme": 1.0})
    with pytest.raises(ValueError, match="lags must be in 0..7"):
        ModelAutocorrelation(buffer_size=8, lags=(8,))


def test_both_callbacks_read_an_output_by_one_rule() -> None:
    """The projector's and the helper's readings of the same arguments give the same rows."""
    output = CapturedOutput((torch.randn(2, 5, 8), None))
    batch = {"attention_mask": torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])}
    projector = ProjectorSettings("encoder", select=lambda out: out[0]).reading
    helper = HelperSettings(select=projector.select).reading("encoder")
    layouts = [reading.layout(output, batch) for reading in (projector, helper)]
    assert torch.equal(layouts[0].rows, layouts[1].rows)
    masks = [projector.mask(batch, layouts[0]), helper.mask(batch, layouts[1])]
    assert masks[0] is not None and torch.equal(masks[0], masks[1]) and int(masks[0].sum()) == 8
    assert (projector.owner, helper.owner) == (
        "EmbeddingProjector: module 'encoder'",
        "TrainingHelper: module 'encoder'",
    )


def test_one_module_one_hook_for_both_captures() -> None:
    encoder = torch.nn.Linear(3, 4)
    taken: dict[str, list[Any]] = {"projector": [], "helper": []}
    captures = {name: OutputCapture() for name in taken}
    for name, capture in captures.items():
        capture.attach(OutputReading(name, "encoder"), encoder, receive=taken[name].append)
    assert len(encoder._forward_hooks) == 1
    for capture in captures.values():
        capture.batch_started()
    captures["helper"].arm()
    encoder(torch.ones(2, 3))
    for capture in captures.values():
        capture.batch_ended()
    assert (len(taken["projector"]), len(taken["helper"])) == (0, 1)
    for capture in captures.values():
        capture.detach()
    assert len(encoder._forward_hooks) == 0 and not captures["helper"].attached


class SeeReading(Callback):
    """Keeps how the helper reads its module, at the first training batch."""

    def __init__(self, helper: TrainingHelper) -> None:
        self.helper = helper
        self.readings: list[OutputReading | None] = []

    def on_train_batch_start(self, *args: Any) -> None:
        self.readings.append(self.helper._collapse._output.reading)


def test_the_helper_reads_the_projectors_settings_and_copies_nothing(tmp_path: Path) -> None:
    helper = TrainingHelper(check_every_n_steps=2, mask_fn=None)
    projector = EmbeddingProjector("backbone", select=first_row, spatial=None)
    before = (dataclasses.asdict(helper.settings), dataclasses.asdict(projector.settings))
    seen = SeeReading(helper)
    run = trainer(tmp_path, False, [helper, projector, seen], max_epochs=1, limit_train_batches=2)
    run.fit(Backbone(), *loaders())
    reading = seen.readings[0]
    assert reading.module == "backbone" and reading.select is first_row
    assert reading.spatial is None and reading.mask_fn is None  # its own mask_fn: None
    assert helper.select is None and helper.mask_fn is None  # nothing copied onto the helper
    assert helper._collapse.settings is helper.settings is helper._gradients.settings
    assert projector._reader.settings is projector.settings
    after = (dataclasses.asdict(helper.settings), dataclasses.asdict(projector.settings))
    assert after == before
