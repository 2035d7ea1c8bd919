"""UnusedParameters: parameters that get no gradient during a first round of optimizer steps."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from torch import nn

from learnscope.health import (
    GradientRound,
    ddp_unused_parameter_advice,
    unused_parameter_findings,
)
from learnscope.model.parameter_shards import parameter_shards
from learnscope.records import Finding


class UnusedParameters:
    """Unused parameters, judged once per fit over a first round of optimizer steps.

    The round is the first step, or with several optimizers (a GAN trained with manual
    optimization) the first step of every optimizer: each step sees the gradients of its own
    parameters only. Parameters that start training later (fine-tuning) get a round of their
    own. Under DDP (without ``find_unused_parameters``) the second step then fails with
    "Expected to have finished reduction in the prior iteration", which names no parameter:
    :meth:`advice` names them and the two ways out.

    Example:
        >>> import torch
        >>> linear = torch.nn.Linear
        >>> model = torch.nn.ModuleDict({"used": linear(2, 1), "idle": linear(2, 1)})
        >>> sgd = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> model["used"](torch.ones(1, 2)).sum().backward()
        >>> unused = UnusedParameters()
        >>> [(f.code, f.subject) for f in unused.observe(model, sgd, [sgd], step=0)]
        [('unused-parameter', 'idle')]
        >>> unused.complete, unused.state_dict()["unused_names"]
        (True, ['idle.weight', 'idle.bias'])
    """

    def __init__(self) -> None:
        self._round = GradientRound()  # which parameters get a gradient in the round
        self._names: list[str] = []  # parameters without a gradient in that round

    @property
    def complete(self) -> bool:
        """Whether the round under way is over."""
        return self._round.complete

    def restart(self) -> None:
        """A new fit: a new first round."""
        self._round, self._names = GradientRound(), []

    def follow(self, added: Collection[str]) -> None:
        """Parameters started training: after the first round, they get a round of their own."""
        if added and self._round.complete:
            self._round = GradientRound(names=added)

    def observe(
        self, model: nn.Module, optimizer: Any, optimizers: Sequence[Any], step: int
    ) -> list[Finding]:
        """Note the gradients before ``optimizer`` steps; the findings when the round is over."""
        named = parameter_shards(model)
        unused = self._round.observe(named, optimizer, optimizers)
        if unused is None:
            return []
        if self._round.names is not None:  # a round of parameters that started training later
            named = [shard for shard in named if shard.name in self._round.names]
        self._names = [n for n in self._names if n not in unused] + unused
        seen = None if len(optimizers) <= 1 else self._round.seen
        late = self._round.names is not None
        return unused_parameter_findings(named, step, seen=seen, newly_trainable=late)

    def advice(self, exception: BaseException, model: nn.Module) -> str | None:
        """When DDP stopped because of unused parameters: their names and the ways out."""
        names = self._names
        seen = self._round.seen
        if not self._round.complete and seen:  # stopped before every optimizer stepped
            names = [s.name for s in parameter_shards(model) if s.requires_grad]
            judged = self._round.names
            names = [n for n in names if n not in seen and (judged is None or n in judged)]
        return ddp_unused_parameter_advice(exception, names)

    def state_dict(self) -> dict[str, Any]:
        """Whether the first round is over, and the unused parameters it found."""
        return {"unused_checked": self._round.complete, "unused_names": list(self._names)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s keys (absent ones: a round not yet done)."""
        self._round = GradientRound()
        self._round.complete = bool(state.get("unused_checked", False))
        self._names = list(state.get("unused_names", []))
