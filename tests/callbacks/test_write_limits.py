"""The fit's write limits: given to the callbacks, shared by their writer session, never guessed.

The callbacks of one trainer share one writer session; it takes the ``write_limits`` of the
callbacks that give them. Equal limits, or limits given by one callback only, are one rule;
different limits are ambiguous and fail at ``setup``, naming both callbacks and both values.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning.pytorch.loggers import TensorBoardLogger

from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from learnscope.lightning_glue import session as writer_session
from learnscope.run_directory.write_limits import WriteLimits
from tests.kit.models import TinyClassifier, loaders, trainer

QUICK = WriteLimits(end_timeout_s=30, reserve_min_bytes=0)


class Seen(TrainingHelper):
    """A helper that keeps the limits of the session it joined."""

    limits: WriteLimits | None = None

    def on_train_start(self, trainer, pl_module) -> None:  # type: ignore[no-untyped-def]
        super().on_train_start(trainer, pl_module)
        session = writer_session.find(trainer)
        assert session is not None
        self.limits = session.limits
        writers = session.writers()
        assert writers.limits == QUICK  # the queue's end-of-fit wait
        assert all(w.reserve.limits == QUICK for w in writers.active)  # each writer's reserve


@pytest.mark.parametrize("also", [None, QUICK])
def test_the_session_takes_the_limits_one_callback_gives(
    tmp_path: Path, also: WriteLimits | None
) -> None:
    seen = Seen(check_every_n_steps=2, write_limits=also)
    callbacks = [EmbeddingProjector("encoder", write_limits=QUICK), seen]
    fit = trainer(tmp_path, TensorBoardLogger(str(tmp_path), name="tb"), callbacks, max_steps=2)
    fit.fit(TinyClassifier(), *loaders())
    assert seen.limits == QUICK


def test_two_callbacks_giving_different_limits_fail_at_setup_naming_both(
    tmp_path: Path,
) -> None:
    other = WriteLimits(end_timeout_s=600)
    callbacks = [
        EmbeddingProjector("encoder", tag="enc", write_limits=QUICK),
        ModelAutocorrelation(write_limits=other),
    ]
    fit = trainer(tmp_path, TensorBoardLogger(str(tmp_path), name="tb"), callbacks, max_steps=2)
    with pytest.raises(ValueError) as raised:
        fit.fit(TinyClassifier(), *loaders())
    said = str(raised.value)
    assert "EmbeddingProjector{'module': 'encoder', 'tag': 'enc'}" in said
    assert "ModelAutocorrelation gives write_limits=WriteLimits(end_timeout_s=600.0" in said
    assert f"write_limits={QUICK}" in said
    assert fit.global_step == 0  # nothing trained, nothing written
    assert not list((tmp_path / "tb").rglob("learnscope_record.jsonl"))


def test_a_callback_without_limits_leaves_the_defaults() -> None:
    assert TrainingHelper().write_limits is None
    assert writer_session.WriterSession([], True).limits == WriteLimits()
