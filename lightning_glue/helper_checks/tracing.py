"""NonFiniteTrace: name the first module whose output is not finite, in the step after a check."""

from __future__ import annotations

from torch import nn

from learnscope.health import NonFiniteOutputTracer
from learnscope.records import Finding


class NonFiniteTrace:
    """Forward hooks armed for the training step after a check found a non-finite value.

    When a check finds a non-finite gradient or loss it calls :meth:`request`; the next
    training batch arms hooks on every module (:meth:`arm_if_requested`), and after the
    forward (at the first backward, or at the batch's end) :meth:`finish` removes them and
    names the first module whose output was not finite.

    Example:
        >>> import torch
        >>> model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
        >>> trace = NonFiniteTrace()
        >>> trace.attach(model)
        >>> trace.request()
        >>> trace.arm_if_requested()
        >>> _ = model(torch.tensor([[float("nan"), 0.0]]))
        >>> [(f.code, f.subject) for f in trace.finish(step=3)]
        [('non-finite-output', '0')]
    """

    def __init__(self) -> None:
        self._tracer: NonFiniteOutputTracer | None = None
        self.requested = False  # a check asked for the hooks in the next batch
        self.armed = False  # the hooks are on now

    def attach(self, model: nn.Module) -> None:
        """Trace ``model``'s modules (the hooks are armed only on request)."""
        self._tracer = NonFiniteOutputTracer(model)

    def request(self) -> None:
        """Arm the hooks for the next training batch."""
        self.requested = True

    def arm_if_requested(self) -> None:
        """At a batch's start: arm the hooks if a check asked for it."""
        if self.requested and self._tracer is not None:
            self.requested = False
            self._tracer.arm()
            self.armed = True

    def finish(self, step: int) -> list[Finding]:
        """Remove the hooks; the module they found not finite, as an error finding."""
        if not self.armed or self._tracer is None:
            return []
        self.armed = False
        found = self._tracer.disarm()
        if found is None:
            return []
        module, message = found
        return [Finding("non-finite-output", module, message, step, severity="error")]

    def disarm(self) -> None:
        """Remove the hooks, finding nothing."""
        self.armed = False
        if self._tracer is not None:
            self._tracer.disarm()
