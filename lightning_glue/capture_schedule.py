"""Which batches of which stage :class:`EmbeddingProjector` captures, and when it writes.

* ``"train"``: one batch every ``every_n_train_steps`` global steps, written at its end;
* ``"validate"``: every batch of the epochs whose number plus one is a multiple of
  ``every_n_epochs``, written at the epoch's end;
* ``"test"`` and ``"predict"``: every batch, written at the epoch's end.

Nothing is captured in Lightning's sanity-check validation, which checks the user's functions
on real batches instead (``select`` and ``spatial`` always; the others when ``"validate"`` is
captured).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

STAGES = ("train", "validate", "test", "predict")


class BatchPlan(NamedTuple):
    """What happens to one batch.

    Attributes:
        stage: The batch's stage.
        loader: Its ``dataloader_idx``.
        checking: A sanity-check batch: the output is checked, nothing is captured.
        check_functions: ... and the other user functions are called on the batch.
        due: The batch is captured (decided alike on every rank).
    """

    stage: str
    loader: int
    checking: bool
    check_functions: bool
    due: bool


@dataclasses.dataclass(frozen=True)
class CaptureSchedule:
    """The stages captured, and how often.

    Args:
        stages: Which of ``"train"``, ``"validate"``, ``"test"``, ``"predict"`` to capture.
        every_n_epochs: Capture evaluation epochs whose number plus one is a multiple of this.
        every_n_train_steps: Capture a training batch at every multiple of this global step.

    Raises:
        ValueError: Unknown stages, none, or ``"train"`` without ``every_n_train_steps``.

    Example:
        >>> from types import SimpleNamespace
        >>> schedule = CaptureSchedule(("validate",), every_n_epochs=2)
        >>> at = SimpleNamespace(sanity_checking=False, current_epoch=1, global_step=7)
        >>> schedule.batch(at, "validate").due, schedule.batch(at, "train").due
        (True, False)
        >>> schedule.epoch_due(SimpleNamespace(sanity_checking=False, current_epoch=2), "validate")
        False
    """

    stages: Sequence[str]
    every_n_epochs: int = 1
    every_n_train_steps: int | None = None

    def __post_init__(self) -> None:
        stages = self.stages
        stages = (stages,) if isinstance(stages, str) else tuple(stages)  # type: ignore[misc]
        object.__setattr__(self, "stages", stages)
        unknown = [s for s in stages if s not in STAGES]
        if unknown or not stages:
            raise ValueError(f"stages must be a non-empty subset of {STAGES}, got {stages}")
        if self.every_n_epochs < 1:
            raise ValueError("every_n_epochs and max_points must be at least 1")
        n = self.every_n_train_steps
        if "train" in stages and (n is None or n < 1):
            raise ValueError("capturing the 'train' stage needs every_n_train_steps >= 1")

    def batch(self, trainer: Any, stage: str, dataloader_idx: int = 0) -> BatchPlan:
        """The plan of a batch of ``stage`` starting now."""
        if stage == "train":
            n = self.every_n_train_steps
            capture = n is not None and trainer.global_step % n == 0
        else:
            capture = stage != "validate" or self._epoch_due(trainer)
        checking = bool(trainer.sanity_checking)
        due = capture and not checking and stage in self.stages
        return BatchPlan(
            stage, dataloader_idx, checking, checking and "validate" in self.stages, due
        )

    def epoch_due(self, trainer: Any, stage: str) -> bool:
        """Whether the evaluation epoch of ``stage`` ending now was captured."""
        if stage == "validate":
            return not trainer.sanity_checking and stage in self.stages and self._epoch_due(trainer)
        return stage in self.stages

    def _epoch_due(self, trainer: Any) -> bool:
        return (trainer.current_epoch + 1) % self.every_n_epochs == 0
