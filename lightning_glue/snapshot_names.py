"""Which name a snapshot gets, so that an evaluation run never replaces another snapshot.

A snapshot is named ``<tag>/<stage>/step_<N>``. Inside ``fit`` ``N`` is the trainer's global
step. A ``validate``, ``test`` or ``predict`` call outside ``fit`` keeps the global step the fit
ended at, whatever checkpoint it evaluates; so there:

* ``N`` is the step of the weights evaluated: the ``global_step`` of the checkpoint last loaded
  into the model by such a call (``ckpt_path=``; the model keeps those weights for later calls
  until ``fit`` trains it again), else the trainer's global step;
* when that name was already written by this callback into the same log directory (the fit's
  own snapshot at that step, or an earlier evaluation of the same checkpoint), the stage becomes
  ``<stage>-2``, ``<stage>-3``, ... (the first free one), and the log says so.

So ``trainer.validate(model, ckpt_path=<epoch 0 checkpoint>)`` after ``fit`` writes
``encoder/validate-2/step_000000010`` beside the fit's ``encoder/validate/step_000000010``.

The model a checkpoint was loaded into is known by a weak reference, which a pickled or copied
callback leaves out: the copy forgets that checkpoint, as it would for another model.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("learnscope")


class SnapshotNames:
    """The step and stage label of each snapshot of one callback, and the names it wrote.

    Example:
        >>> from types import SimpleNamespace
        >>> trainer = SimpleNamespace(global_step=30, log_dir="runs/v0", state=SimpleNamespace())
        >>> class Model: ...
        >>> names, model = SnapshotNames(), Model()
        >>> trainer.state.fn = "fit"
        >>> names.start_call(trainer, model)
        >>> names.choose(trainer, "encoder", "validate")
        (30, 'validate')
        >>> trainer.state.fn = "validate"  # trainer.validate(model, ckpt_path=...) after fit
        >>> names.start_call(trainer, model)
        >>> names.checkpoint_loaded(trainer, {"global_step": 30})
        >>> names.choose(trainer, "encoder", "validate")
        (30, 'validate-2')
        >>> import pickle
        >>> pickle.loads(pickle.dumps(names)).evaluating_checkpoint
        False
    """

    def __init__(self) -> None:
        self._log_dir: str | None = None  # where the names below were written
        self._written: set[tuple[str, str, int]] = set()  # (tag, stage label, step)
        self._checkpoint_step: int | None = None  # of the checkpoint loaded into the model
        self._model: weakref.ref[Any] | None = None  # the model it was loaded into

    def __getstate__(self) -> dict[str, Any]:
        """The names without the model a checkpoint was loaded into (a weak reference).

        A copy so forgets that checkpoint at its next call, as for another model.
        """
        return {**self.__dict__, "_checkpoint_step": None, "_model": None}

    def start_call(self, trainer: Any, pl_module: Any) -> None:
        """At ``setup`` of every trainer call: forget a checkpoint that the model no longer holds.

        ``fit`` trains the model away from any checkpoint, and another model holds its own
        weights.
        """
        if _in_fit(trainer) or self._model is None or self._model() is not pl_module:
            self._checkpoint_step, self._model = None, weakref.ref(pl_module)
        log_dir = _log_dir(trainer)
        if log_dir != self._log_dir:  # another run directory: its names are its own
            self._log_dir, self._written = log_dir, set()

    @property
    def evaluating_checkpoint(self) -> bool:
        """Whether an evaluation outside ``fit`` loaded a checkpoint into the model."""
        return self._checkpoint_step is not None

    def checkpoint_loaded(self, trainer: Any, checkpoint: Mapping[str, Any]) -> None:
        """Remember the step of a checkpoint that an evaluation call outside ``fit`` loaded."""
        step = checkpoint.get("global_step")
        if not _in_fit(trainer) and isinstance(step, int):
            self._checkpoint_step = step

    def choose(self, trainer: Any, tag: str, stage: str) -> tuple[int, str]:
        """The step and stage label of the next snapshot of ``stage``, and remember the name.

        Inside ``fit`` it is the global step and ``stage``. Outside ``fit`` it is the step of
        the weights evaluated, and a stage label that no snapshot of ``tag`` at that step has.
        """
        if _in_fit(trainer):
            step, label = int(trainer.global_step), stage
        else:
            step = self._checkpoint_step
            step = int(trainer.global_step) if step is None else step
            label, number = stage, 1
            while (tag, label, step) in self._written:
                number += 1
                label = f"{stage}-{number}"
            if label != stage:
                log.warning(
                    "learnscope: %s/%s at step %d was written before in this run; this %s "
                    "run's snapshot is %s/%s",
                    tag,
                    stage,
                    step,
                    stage,
                    tag,
                    label,
                )
        self._written.add((tag, label, step))
        return step, label


def _in_fit(trainer: Any) -> bool:
    fn = getattr(getattr(trainer, "state", None), "fn", None)
    return str(getattr(fn, "value", fn)) == "fit"


def _log_dir(trainer: Any) -> str | None:
    try:
        return trainer.log_dir
    except Exception:  # a logger without a directory
        return None
