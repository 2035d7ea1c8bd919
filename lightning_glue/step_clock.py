"""StepClock: where a callback's hook falls in the training step, from ``trainer.global_step``.

Lightning's hooks do not say which micro-batch of a step they belong to, nor whether an
``on_before_optimizer_step`` is the step's first: a closure optimizer such as ``LBFGS`` runs
that hook once per closure evaluation, ``accumulate_grad_batches`` runs several batches per
step (the optimizer hook only in the one that steps), and in manual optimization each
``optimizer.step()`` is a global step of its own. One rule answers all of them: a step is a
value of ``trainer.global_step``, which is the same on every rank. A callback feeds its clock
from its hooks and asks it the questions its checks need.
"""

from __future__ import annotations

from collections.abc import Hashable

_WHOLE_STEP = "any optimizer"


class StepClock:
    """Where the current hook falls in the training step, one answer for every callback.

    Feed it from the hooks: :meth:`start_batch` in ``on_train_batch_start``,
    :meth:`end_batch` in ``on_train_batch_end`` and :meth:`optimizer_call` in
    ``on_before_optimizer_step``, each with ``trainer.global_step``. It then answers:

    * ``batch_step``, the global step the current batch belongs to (the step its
      optimizer call will have: the batch started at it; 0 before any batch);
    * :meth:`is_check_step`, whether a step is a check step for a period;
    * ``first_micro_batch`` (the batch is the first of its step) and the value
      :meth:`end_batch` returns (the batch was the last: the global step moved on during it);
    * :meth:`optimizer_call`, whether a call is the first of its step (for one optimizer, or
      for any), so that ``LBFGS``'s later closure evaluations are told apart;
    * ``ended_unseen``, the step before this batch's ended without a batch end seeing it, so
      what a check gathered from it is incomplete.

    The answers are plain attributes (read on every step, so no property calls); only the
    clock's methods set them.

    Example:
        >>> clock = StepClock()
        >>> clock.start_batch(0)  # accumulate_grad_batches=2: two batches per step
        >>> clock.batch_step, clock.first_micro_batch, clock.is_check_step(5)
        (0, True, True)
        >>> clock.end_batch(0)  # the step goes on
        False
        >>> clock.start_batch(0)
        >>> clock.first_micro_batch
        False
        >>> clock.optimizer_call(0), clock.optimizer_call(0)  # LBFGS: a second evaluation
        (True, False)
        >>> clock.end_batch(1)  # the optimizer stepped: the step's last micro-batch
        True
        >>> clock.start_batch(1)
        >>> clock.start_batch(2)  # step 1's end went unseen
        >>> clock.ended_unseen, clock.is_check_step(5)
        (True, False)
    """

    def __init__(self) -> None:
        self.batch_step = 0  # global step when the current batch started
        self.first_micro_batch = False
        self.ended_unseen = False
        self._started = False  # a batch started since the clock was made or reset
        self._step_over = True  # the last batch end saw the global step move on
        self._calls: dict[Hashable, int] = {}  # optimizer key -> global step of its last call

    def reset(self) -> None:
        """Forget every step seen, as for a new fit.

        Example:
            >>> clock = StepClock()
            >>> clock.start_batch(3)
            >>> clock.reset()
            >>> clock.start_batch(3)
            >>> clock.first_micro_batch
            True
        """
        self.__init__()

    def start_batch(self, global_step: int) -> None:
        """A training batch starts at ``global_step`` (``on_train_batch_start``)."""
        first = not self._started or self.batch_step != global_step
        self.ended_unseen = first and self._started and not self._step_over
        self.first_micro_batch = first
        self.batch_step = global_step
        self._started = True
        self._step_over = False

    def end_batch(self, global_step: int) -> bool:
        """The batch ended at ``global_step``; whether it was the last micro-batch of its step.

        It was when the global step moved on during the batch (the optimizer stepped).
        """
        self._step_over = global_step != self.batch_step
        return self._step_over

    def is_check_step(self, every_n_steps: int, step: int | None = None, offset: int = 0) -> bool:
        """Whether ``step`` (by default the batch's) is a check step: ``step % every == offset``.

        Before any batch there is no batch step, so no check step by default.

        Example:
            >>> clock = StepClock()
            >>> clock.is_check_step(10), clock.is_check_step(10, step=19, offset=9)  # n - 1...
            (False, True)
        """
        if step is None:
            if not self._started:
                return False
            step = self.batch_step
        return step % every_n_steps == offset

    def optimizer_call(self, global_step: int, optimizer: Hashable = _WHOLE_STEP) -> bool:
        """Note an ``on_before_optimizer_step``; whether it is the first of ``global_step``.

        Args:
            global_step: ``trainer.global_step`` in the hook.
            optimizer: Whose first call it is, such as an optimizer's position or its history:
                each key has its own answer. By default the first call of any optimizer.

        Returns:
            ``False`` for a later call of the same step (a closure optimizer's later
            evaluations), ``True`` otherwise.

        Example:
            >>> clock = StepClock()
            >>> clock.optimizer_call(4, optimizer=0), clock.optimizer_call(4, optimizer=1)
            (True, True)
            >>> clock.optimizer_call(4, optimizer=0)
            False
        """
        first = self._calls.get(optimizer) != global_step
        self._calls[optimizer] = global_step
        return first
