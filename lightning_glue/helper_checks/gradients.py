"""The gradient checks of a check step, and the loss of that step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from learnscope.health import (
    gradient_findings,
    gradient_scope,
    gradient_statistics,
    head_findings,
    health_scalars,
)
from learnscope.lightning_glue.helper_checks.arguments import HelperSettings
from learnscope.lightning_glue.helper_checks.modules import resolve_heads
from learnscope.lightning_glue.helper_checks.report import CheckReport
from learnscope.model.parameter_names import clean_parameter_name
from learnscope.model.parameter_shards import groups_under, parameter_shards
from learnscope.records import Histogram
from learnscope.tags import HEALTH

_GRAD_SCALER: type = getattr(torch.amp, "GradScaler", None) or torch.cuda.amp.GradScaler


def loss_scaler(trainer: Any) -> Any:
    """The precision plugin's enabled gradient scaler (``"16-mixed"``), or ``None``.

    Only a ``GradScaler`` scales the loss and skips steps with non-finite gradients;
    ``"16-true"`` and ``"bf16-mixed"`` have none.

    Example:
        >>> loss_scaler(object()) is None
        True
    """
    scaler = getattr(getattr(trainer, "precision_plugin", None), "scaler", None)
    return scaler if isinstance(scaler, _GRAD_SCALER) and scaler.is_enabled() else None


class StepLoss:
    """The loss of a check step: the mean of its micro-batch losses, as ``training_step`` gave them.

    Each micro-batch counts at its first backward (for ``LBFGS``, the closure evaluated first).
    Lightning divides the loss by ``accumulate_grad_batches`` before the backward in automatic
    optimization; :meth:`value` undoes that, and a gradient scaler's factor. In manual
    optimization it is the first loss passed to ``manual_backward`` in the batch.

    Example:
        >>> import torch
        >>> loss = StepLoss()
        >>> loss.start_step()
        >>> for micro_batch in (torch.tensor(1.0), torch.tensor(3.0)):
        ...     loss.start_batch()
        ...     loss.take(micro_batch)
        ...     loss.take(torch.tensor(99.0))  # a second backward of the batch
        >>> loss.value(trainer=None, model=None)
        tensor(2.)
    """

    def __init__(self) -> None:
        self._parts: list[torch.Tensor] = []  # the check step's micro-batch losses
        self._taken = False  # this batch's loss is in _parts

    def start_step(self) -> None:
        """The first micro-batch of a check step."""
        self._parts = []

    def start_batch(self, keep: bool = True) -> None:
        """Any training batch; ``keep``: it belongs to a check step, keep its first loss."""
        self._taken = not keep

    def take(self, loss: torch.Tensor) -> None:
        """A backward's loss: kept when it is the first of a batch that keeps one."""
        if not self._taken:
            self._taken = True
            self._parts.append(loss.detach())

    def clear(self) -> None:
        """Drop the losses kept."""
        self._parts = []

    def value(self, trainer: Any, model: Any) -> torch.Tensor | None:
        """The step's loss, emptying the parts; ``None`` when none was kept.

        Args:
            trainer: The trainer, for ``accumulate_grad_batches`` (what Lightning divided each
                loss by in automatic optimization) and its gradient scaler.
            model: The LightningModule, for ``automatic_optimization``.
        """
        parts, self._parts = self._parts, []
        if not parts:
            return None
        device = parts[0].device
        losses = torch.stack([part.float().mean().to(device) for part in parts])
        if getattr(model, "automatic_optimization", True):
            losses = losses * getattr(trainer, "accumulate_grad_batches", 1)  # Lightning divided
        loss = losses.mean()
        scaler = loss_scaler(trainer)
        return loss if scaler is None else loss / scaler.get_scale()


class GradientCheck:
    """Gradients of a check step, judged: non-finite, zero and tiny; heads against the encoder.

    Judged once per optimizer step on check steps, on the parameters of the optimizer that
    steps (with several optimizers each step sees its own). Zero and tiny gradients are not
    judged on an optimizer's first step, where a zero-initialised layer (ReZero, adaLN-zero)
    rightly gives zero gradients upstream; a bias whose gradient is zero or tiny beside
    healthy weights in its module is structurally zero (an ``info`` finding). Under a loss
    scaler non-finite gradients are the scaler's business and are not reported. The weights of
    each head module are compared with the embedding module's (root mean square per element,
    reported above ``max_ratio``). See :mod:`learnscope.health` for the statistics.

    Args:
        settings: The helper's settings: ``small_grad_threshold`` (ratio to the median gradient
            per element under which a gradient is tiny), ``group_depth`` (module-name parts
            that make a group for the per-group norms), ``max_head_to_encoder_ratio`` (largest
            healthy ratio of head to encoder weights) and ``histograms`` (whether to give the
            histogram of the gradient norms) are read here.

    Example:
        >>> import torch
        >>> from types import SimpleNamespace
        >>> linear = torch.nn.Linear
        >>> model = torch.nn.ModuleDict({"encoder": linear(2, 2), "head": linear(2, 1)})
        >>> sgd = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> model["head"](model["encoder"](torch.ones(1, 2))).sum().backward()
        >>> check = GradientCheck(HelperSettings())
        >>> check.encoder, check.heads = "encoder", ["head"]
        >>> trainer = SimpleNamespace(optimizers=[sgd], global_step=0)
        >>> report = check.check(trainer, model, sgd, loss=None, check_small=True)
        >>> report.findings, sorted(report.scalars)[:2]
        ([], ['~learnscope/health/grad_norm/encoder', '~learnscope/health/grad_norm/head'])
    """

    def __init__(self, settings: HelperSettings) -> None:
        self.settings = settings
        self.encoder: str | None = None  # set at setup, with the heads
        self.heads: list[str] = []
        self._stepped: set[int] = set()  # ids of the optimizers that stepped before

    def forget_optimizers(self) -> None:
        """Every optimizer's next step counts as its first (a new fit, new parameters)."""
        self._stepped = set()

    def follow(self, model: nn.Module, added: Sequence[str], head_modules: Any) -> None:
        """Parameters started or stopped training (fine-tuning).

        The first step after new ones is not judged for zero or tiny gradients; without
        ``head_modules`` the heads are the encoder's siblings that train now.
        """
        if added:
            self.forget_optimizers()
        if head_modules is None:
            self.heads = resolve_heads(model, self.encoder, None)

    def note_step(self, optimizer: Any) -> bool:
        """An optimizer is about to step; whether it is its first step."""
        first = id(optimizer) not in self._stepped
        self._stepped.add(id(optimizer))
        return first

    def check(
        self,
        trainer: Any,
        model: nn.Module,
        optimizer: Any,
        loss: torch.Tensor | None,
        check_small: bool,
    ) -> CheckReport | None:
        """Measure the gradients of ``optimizer``'s parameters at this step and judge them.

        With sharded parameters every rank calls it: the sums are added over the ranks, and
        rank zero reports. ``None`` when nothing trains. Non-finite gradients are not judged
        under a loss scaler.
        """
        step, settings = trainer.global_step, self.settings
        named = parameter_shards(model)
        under = groups_under(named)  # the groups of the whole model, whichever optimizer steps
        if len(trainer.optimizers) > 1:  # each step sees its own optimizer's gradients only
            own = {id(p) for group in optimizer.param_groups for p in group["params"]}
            named = [shard for shard in named if id(shard.holder) in own]
        if not any(shard.requires_grad for shard in named):
            return None  # nothing trains (yet): fine-tuning may make parameters trainable later
        stats = gradient_statistics(named, loss)
        check_nonfinite = loss_scaler(trainer) is None
        findings = gradient_findings(
            stats,
            step,
            small_grad_threshold=settings.small_grad_threshold,
            check_nonfinite=check_nonfinite,
            check_small=check_small,
        )
        scalars = health_scalars(stats, settings.group_depth, under)
        heads = [h for h in self.heads if _holds(stats.names, h)]
        if self.encoder is None or not _holds(stats.names, self.encoder):
            heads = []
        if heads:
            ratio = settings.max_head_to_encoder_ratio
            head, ratios = head_findings(stats, self.encoder, heads, step, max_ratio=ratio)
            findings += head
            scalars.update(ratios)
        histogram = None
        if settings.histograms:
            histogram = Histogram(f"{HEALTH}/grad_norm", step, stats.grad_norms[stats.has_grad])
        scope = gradient_scope(
            stats, check_nonfinite=check_nonfinite, check_small=check_small, heads=heads
        )
        return CheckReport(findings, scalars, histogram, scope)


def _holds(names: Sequence[str], module: str) -> bool:
    """Whether any of the parameter ``names`` (cleaned of wrappers' parts) belongs to ``module``."""
    prefix = clean_parameter_name(module) + "."
    return any(name.startswith(prefix) for name in names)
