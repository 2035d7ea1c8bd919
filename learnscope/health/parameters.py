"""Parameters by name: which have a gradient, unused parameters and DDP's error about them."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from learnscope.model.parameter_names import owner_module
from learnscope.model.parameter_shards import ParameterShard, parameter_shards
from learnscope.model.ranks import sum_over_ranks
from learnscope.records import Finding

Parameters = nn.Module | Iterable[tuple[str, Tensor]] | Iterable[ParameterShard]

_MAX_NAMES = 8  # parameter names spelled out in one message


def _within(name: str, module: str) -> bool:
    """Whether parameter ``name`` belongs to ``module`` (``""`` is the whole model)."""
    return not module or name.startswith(module + ".")


def _name_list(names: Sequence[str]) -> str:
    """Names joined by commas, the first few only."""
    shown = ", ".join(names[:_MAX_NAMES])
    more = len(names) - _MAX_NAMES
    return f"{shown} and {more} more" if more > 0 else shown


def _by_owner(names: Iterable[str]) -> dict[str, list[str]]:
    """Parameter names grouped by the module that owns them, in order."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(owner_module(name), []).append(name)
    return groups


def _subject(module: str) -> str:
    return module or "root"


def has_gradient(shards: Sequence[ParameterShard]) -> list[bool]:
    """Whether each parameter has a gradient: on any rank when sharded (one all-reduce).

    Unsharded, whether its ``grad`` is set, with no communication. When any shard is sharded,
    every rank must call this at the same point.

    Example:
        >>> import torch
        >>> layer = torch.nn.Linear(2, 1)
        >>> layer(torch.ones(1, 2)).sum().backward()
        >>> has_gradient(parameter_shards(layer))
        [True, True]
    """
    local = [shard.holder.grad is not None for shard in shards]
    if not any(shard.sharded for shard in shards):
        return local
    device = shards[0].device
    flags = sum_over_ranks(torch.tensor(local, dtype=torch.float32, device=device))
    return [bool(flag > 0) for flag in flags.tolist()]


def unused_parameter_names(named_parameters: Parameters) -> list[str]:
    """Names of the parameters that require a gradient but have none (after a backward).

    Sharded parameters (FSDP) are named by their original names and judged over every rank
    (a collective: every rank must call it).

    Example:
        >>> import torch
        >>> layers = {"used": torch.nn.Linear(2, 1), "spare": torch.nn.Linear(2, 1)}
        >>> model = torch.nn.ModuleDict(layers)
        >>> model["used"](torch.ones(1, 2)).sum().backward()
        >>> unused_parameter_names(model.named_parameters())
        ['spare.weight', 'spare.bias']
    """
    shards = [shard for shard in parameter_shards(named_parameters) if shard.requires_grad]
    flags = has_gradient(shards)
    return [shard.name for shard, has in zip(shards, flags, strict=True) if not has]


def unused_parameter_findings(
    named_parameters: Parameters,
    step: int,
    *,
    seen: Collection[str] | None = None,
    newly_trainable: bool = False,
) -> list[Finding]:
    """Report parameters that require a gradient but got none, one finding per module.

    Call it after the first backward, before the gradients are cleared; or pass the names that
    got a gradient during a first round of steps (see :class:`GradientRound`) as ``seen``.

    Args:
        named_parameters: ``(name, parameter)`` pairs, such as ``model.named_parameters()``,
            the model, or its shards (FSDP: original names).
        step: The training step.
        seen: Names of the parameters that got a gradient; by default, those whose ``grad`` is
            set now.
        newly_trainable: The parameters started training during the fit (fine-tuning): the
            message says that the first round is theirs.

    Returns:
        One ``unused-parameter`` finding per module owning such parameters.

    Example:
        >>> import torch
        >>> layers = {"used": torch.nn.Linear(2, 1), "spare": torch.nn.Linear(2, 1)}
        >>> model = torch.nn.ModuleDict(layers)
        >>> model["used"](torch.ones(1, 2)).sum().backward()
        >>> [(f.code, f.subject) for f in unused_parameter_findings(model.named_parameters(), 0)]
        [('unused-parameter', 'spare')]
    """
    if seen is None:
        unused = unused_parameter_names(named_parameters)
        when = "in the first backward"
    else:
        shards = parameter_shards(named_parameters)
        unused = [s.name for s in shards if s.requires_grad and s.name not in seen]
        when = "in a first round of steps of every optimizer"
    if newly_trainable:
        when += " after becoming trainable"
    return [
        Finding(
            "unused-parameter",
            _subject(module),
            f"{_name_list(names)} got no gradient {when}: the module is not used in forward, "
            "or its output does not reach the loss (remove it, or freeze it with "
            "requires_grad_(False))",
            step,
        )
        for module, names in _by_owner(unused).items()
    ]


class GradientRound:
    """Which parameters get a gradient during a first round of every optimizer's step.

    With several optimizers (a GAN in manual optimization), each ``optimizer.step()`` sees the
    gradients of its own parameters only: the generator's are not there yet when the
    discriminator steps first. Whether a parameter never gets a gradient is therefore judged over
    a round in which every optimizer stepped once. Call :meth:`observe` just before each
    optimizer step (after its backward); a step in which none of that optimizer's parameters has
    a gradient (a skipped step) does not count. With sharded parameters (FSDP) the names are
    the original ones and "has a gradient" is judged over every rank: every rank must call
    :meth:`observe`. A round of ``names`` judges only those parameters, such as the ones that
    fine-tuning made trainable after the first round.

    Args:
        names: The names of the parameters judged; ``None``: every trainable parameter.

    Example:
        >>> import torch
        >>> model = torch.nn.ModuleDict({"a": torch.nn.Linear(2, 1), "b": torch.nn.Linear(2, 1)})
        >>> first = torch.optim.SGD(model["a"].parameters(), lr=0.1)
        >>> second = torch.optim.SGD(model["b"].parameters(), lr=0.1)
        >>> round_ = GradientRound()
        >>> model["a"](torch.ones(1, 2)).sum().backward()
        >>> round_.observe(model.named_parameters(), first, [first, second]) is None
        True
        >>> model["b"](torch.ones(1, 2)).sum().backward()
        >>> round_.observe(model.named_parameters(), second, [first, second])
        []
        >>> round_.complete
        True
        >>> model.zero_grad(set_to_none=True)
        >>> model["a"](torch.ones(1, 2)).sum().backward()
        >>> both = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> GradientRound(names=["b.weight"]).observe(model.named_parameters(), both, [both])
        ['b.weight']
    """

    def __init__(self, names: Collection[str] | None = None) -> None:
        self.names = None if names is None else frozenset(names)
        self._seen: set[str] = set()
        self._stepped: set[int] = set()
        self.complete = False

    @property
    def seen(self) -> set[str]:
        """Names of the parameters that had a gradient at one of the steps observed so far.

        Example:
            >>> GradientRound().seen
            set()
        """
        return set(self._seen)

    def observe(
        self,
        named_parameters: Parameters,
        optimizer: Any,
        optimizers: Sequence[Any],
    ) -> list[str] | None:
        """Note which parameters have a gradient before ``optimizer`` steps.

        Args:
            named_parameters: The model's ``(name, parameter)`` pairs.
            optimizer: The optimizer about to step (anything with ``param_groups``).
            optimizers: All the optimizers that take part in a round.

        Returns:
            Once the round is complete (on the first call that completes it), the names of the
            parameters that require a gradient and never had one; ``None`` before and after.

        Example:
            >>> import torch
            >>> layer = torch.nn.Linear(2, 1)
            >>> optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
            >>> layer(torch.ones(1, 2)).sum().backward()
            >>> GradientRound().observe(layer.named_parameters(), optimizer, [optimizer])
            []
        """
        if self.complete:
            return None
        shards = [s for s in parameter_shards(named_parameters) if s.requires_grad]
        flags = has_gradient(shards)
        own = {id(p) for group in optimizer.param_groups for p in group["params"]}
        mine = [has for s, has in zip(shards, flags, strict=True) if id(s.holder) in own]
        if mine and not any(mine):
            return None  # no backward reached this optimizer: a skipped step
        self._stepped.add(id(optimizer))
        self._seen.update(s.name for s, has in zip(shards, flags, strict=True) if has)
        if not all(id(o) in self._stepped for o in optimizers):
            return None
        self.complete = True
        judged = [s.name for s in shards if self.names is None or s.name in self.names]
        return [name for name in judged if name not in self._seen]


_DDP_UNUSED_ERRORS = (
    "Expected to have finished reduction in the prior iteration",  # torch's DDP reducer
    "parameters that were not used in producing the loss",  # Lightning's rewording of it
)


def ddp_unused_parameter_advice(exception: BaseException, names: Sequence[str]) -> str | None:
    """What to do about DDP's error for parameters that got no gradient, naming them.

    DDP's error ("Expected to have finished reduction in the prior iteration ...") does not say
    which parameters; ``names`` (from :func:`unused_parameter_names` after the first backward)
    does.

    Args:
        exception: The exception that stopped training; its causes are looked at too.
        names: The parameters found without a gradient, if any.

    Returns:
        The message, or ``None`` when ``exception`` is not that DDP error.

    Example:
        >>> error = RuntimeError("Expected to have finished reduction in the prior iteration ...")
        >>> print(ddp_unused_parameter_advice(error, ["spare.weight"]))  # doctest: +ELLIPSIS
        DDP stopped because parameters got no gradient: spare.weight (...). Either remove them ...
        >>> ddp_unused_parameter_advice(ValueError("other"), ["spare.weight"]) is None
        True
    """
    seen: set[int] = set()
    error: BaseException | None = exception
    while error is not None and id(error) not in seen:
        if any(text in str(error) for text in _DDP_UNUSED_ERRORS):
            break
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    else:
        return None
    if names:
        which = (
            f"parameters got no gradient: {_name_list(list(names))} (found without a gradient "
            "after the first backward)"
        )
    else:
        which = (
            "some parameters got no gradient; all had one after the first backward, so they "
            "are skipped on some steps only (a branch taken now and then); set "
            "TORCH_DISTRIBUTED_DEBUG=INFO to have torch name them"
        )
    return (
        f"DDP stopped because {which}. Either remove them (or freeze them with "
        "requires_grad_(False), or make them take part in the loss), or let DDP look for unused "
        "parameters on every step, which costs some speed: "
        'Trainer(strategy="ddp_find_unused_parameters_true")'
    )
