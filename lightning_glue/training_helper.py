"""TrainingHelper: tell the user, early and once, when training looks unhealthy."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from typing_extensions import override

from learnscope.collapse import EmbeddingRowBuffer
from learnscope.health import (
    FindingLog,
    NonFiniteOutputTracer,
    collapse_findings,
    ddp_unused_parameter_advice,
    gradient_findings,
    gradient_statistics,
    head_findings,
    health_scalars,
    unused_parameter_findings,
    unused_parameter_names,
)
from learnscope.lightning_glue.base import LearnscopeCallback
from learnscope.plugins import Writers
from learnscope.records import Finding, Histogram

log = logging.getLogger("learnscope")

_GRADIENTS = "gradient checks"
_COLLAPSE = "embedding collapse"
_INPUTS = "input checks"
_TRACE = "non-finite output tracing"
_DEFAULT_EMBEDDING_MODULE = "encoder"


class TrainingHelper(LearnscopeCallback):
    """A guide to good practice: findings about unhealthy training, in the logs and dashboards.

    What it checks:

    * **Unused parameters**: after the first backward, parameters that require a gradient and got
      none, one finding per module, reported once per run. Under DDP (without
      ``find_unused_parameters``) the second step then fails with "Expected to have finished
      reduction in the prior iteration", which names no parameter: TrainingHelper logs their
      names and the two ways out (remove them, or ``strategy="ddp_find_unused_parameters_true"``).
    * **Gradients**, on check steps (every ``check_every_n_steps`` global steps), in
      ``on_before_optimizer_step``: non-finite, zero and tiny gradients, named (tiny means under
      ``small_grad_threshold`` times the median gradient per element over the parameters; see
      :mod:`learnscope.health`). Zero and tiny gradients are not judged on step 0, where a
      zero-initialised layer (ReZero, adaLN-zero) rightly gives zero gradients upstream. The
      norms of all parameters and gradients come from fused calls and reach the host in one
      transfer. Under float16 mixed precision, non-finite gradients are
      the gradient scaler's business and are not reported; a non-finite loss still is.
    * **Non-finite values**: when a check finds a non-finite gradient or loss, forward hooks on
      every module are armed for the next training step only, to name the first module whose
      output is not finite.
    * **Head versus encoder**: the weights of each head module against the embedding module's
      (root mean square per element), reported above ``max_head_to_encoder_ratio``.
    * **Embedding collapse**: from a check step on, a forward hook on ``embedding_module`` copies
      the detached output of each training batch into an
      :class:`~learnscope.collapse.EmbeddingRowBuffer` until it holds
      ``embedding_rows_per_dim`` times the dimension (at most ``max_embedding_rows``: 4096 rows
      of dimension 256 in float32 cost 4 MiB); the metrics are then computed and judged, and the
      buffer starts again at the next check step. Outputs ``[batch, tokens, dim]`` count each
      token as a row. With ``edge_index_fn``, also oversmoothing.
    * **Inputs**: each of ``input_checks``, a callable ``batch -> str | None`` such as
      :class:`~learnscope.health.CoordinateRangeCheck`, runs on the first batch of each check
      step; a returned message is an ``input-range`` finding about the check's ``subject``
      attribute (or its name).

    Findings go to the ``learnscope`` logger at warning level, each (code, subject) at most once
    per ``warn_every_n_steps`` (unused parameters once), and to every logger's dashboard as the
    full findings table. On check steps the dashboards also get a histogram of the gradient norm
    of every parameter (``health/grad_norm``) and scalars: per-group gradient and weight norms
    (``health/grad_norm/<group>``, ``health/weight_norm/<group>``, groups being module-name
    prefixes of ``group_depth`` parts), ``health/head_weight_ratio/<head>``, and the collapse
    metrics (``health/collapse/<module>/<metric>``).

    Nothing here synchronises with the device on ordinary steps: the hooks return at once unless
    a check is running. Check steps are decided from ``trainer.global_step``; everything runs on
    rank zero only. A diagnostic that fails is logged once with its traceback and switched off;
    training goes on. The findings table and the warning times are saved in checkpoints.

    Args:
        check_every_n_steps: Global steps between checks.
        small_grad_threshold: Ratio to the median gradient per element under which a gradient is
            tiny.
        embedding_module: Dotted name of the encoder whose output is checked for collapse and
            compared with the heads; ``None`` switches these checks off. A name the model lacks
            fails at ``setup`` with the available names, except the default ``"encoder"``,
            which then switches these checks off with one info message.
        head_modules: Dotted names of the output heads; by default the siblings of
            ``embedding_module`` that hold parameters (for ``"encoder"``: the other top-level
            children).
        input_checks: Callables ``batch -> str | None``, run on check steps.
        histograms: Whether to write the gradient-norm histogram.
        warn_every_n_steps: Fewest steps between two warnings about the same (code, subject).
        edge_index_fn: ``batch -> edge_index`` ``[2, E]`` between the rows the embedding module
            gives for that batch (for PyTorch Geometric: ``lambda batch: batch.edge_index``);
            adds oversmoothing checks.
        select: Picks the embedding tensor from the module's output (tuple, dict, dataclass).
        group_depth: Module-name parts that make a group for the per-group norms.
        max_head_to_encoder_ratio: Largest healthy ratio of head to encoder weights.
        embedding_rows_per_dim: Rows per embedding dimension collected before judging collapse.
        max_embedding_rows: Cap on those rows.

    Raises:
        ValueError: For bad arguments; unknown module names fail at ``setup``.

    Example:
        >>> from learnscope.health import CoordinateRangeCheck
        >>> helper = TrainingHelper(check_every_n_steps=100, input_checks=[CoordinateRangeCheck()])
        >>> helper.findings
        []
    """

    def __init__(
        self,
        check_every_n_steps: int = 50,
        small_grad_threshold: float = 1e-3,
        embedding_module: str | None = _DEFAULT_EMBEDDING_MODULE,
        head_modules: Sequence[str] | None = None,
        input_checks: Sequence[Callable[[Any], str | None]] = (),
        histograms: bool = True,
        warn_every_n_steps: int = 1000,
        edge_index_fn: Callable[[Any], torch.Tensor] | None = None,
        *,
        select: Callable[[Any], torch.Tensor] | None = None,
        group_depth: int = 1,
        max_head_to_encoder_ratio: float = 100.0,
        embedding_rows_per_dim: float = 8.0,
        max_embedding_rows: int = 4096,
    ) -> None:
        super().__init__()
        if check_every_n_steps < 1 or group_depth < 1:
            raise ValueError("check_every_n_steps and group_depth must be at least 1")
        if not 0 < small_grad_threshold < 1:
            raise ValueError(f"small_grad_threshold must be in (0, 1), got {small_grad_threshold}")
        if max_head_to_encoder_ratio <= 1 or embedding_rows_per_dim < 1 or max_embedding_rows < 2:
            raise ValueError(
                "need max_head_to_encoder_ratio > 1, embedding_rows_per_dim >= 1 and "
                "max_embedding_rows >= 2"
            )
        not_callable = [c for c in (*input_checks, edge_index_fn, select) if c and not callable(c)]
        if not_callable:
            raise ValueError(
                f"input_checks, edge_index_fn and select must be callables: {not_callable}"
            )
        self.check_every_n_steps = check_every_n_steps
        self.small_grad_threshold = small_grad_threshold
        self.embedding_module = embedding_module
        self.head_modules = None if head_modules is None else list(head_modules)
        self.input_checks = list(input_checks)
        self.histograms = histograms
        self.edge_index_fn = edge_index_fn
        self.select = select
        self.group_depth = group_depth
        self.max_head_to_encoder_ratio = max_head_to_encoder_ratio
        self.embedding_rows_per_dim = embedding_rows_per_dim
        self.max_embedding_rows = max_embedding_rows
        self._log = FindingLog(warn_every_n_steps)
        self._encoder: str | None = None  # resolved at setup
        self._heads: list[str] = []
        self._hook: torch.utils.hooks.RemovableHandle | None = None
        self._tracer: NonFiniteOutputTracer | None = None
        self._trace_next_step = False
        self._unused_checked = False
        self._unused_names: list[str] = []  # parameters without a gradient after the first backward
        self._check = False  # this batch belongs to a check step
        self._checked_step = -1  # the last step whose gradients were checked
        self._batch_step = 0  # trainer.global_step when the batch started
        self._in_train_batch = False
        self._collecting = False
        self._took_batch = False
        self._batch: Any = None
        self._buffer: EmbeddingRowBuffer | None = None
        self._loss: torch.Tensor | None = None
        self._new_findings = False

    @property
    def findings(self) -> list[Finding]:
        """Every finding so far, one per (code, subject), as in the dashboards' table.

        Example:
            >>> TrainingHelper().findings
            []
        """
        return self._log.findings

    # -- setup ---------------------------------------------------------------------------

    @override
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Resolve the module names (failing on unknown ones) and attach the hooks."""
        self._detach()
        self._encoder = self._resolve_encoder(pl_module)
        self._heads = self._resolve_heads(pl_module)
        self._tracer = NonFiniteOutputTracer(pl_module)
        if self._encoder is not None:
            target = pl_module.get_submodule(self._encoder)
            self._hook = target.register_forward_hook(self._on_embedding)

    def _module_names(self, pl_module: Any) -> list[str]:
        return [name for name, _ in pl_module.named_modules() if name]

    def _unknown(self, pl_module: Any, what: str, name: str) -> ValueError:
        names = ", ".join(self._module_names(pl_module)) or "(none)"
        return ValueError(
            f"TrainingHelper: {type(pl_module).__name__} has no sub-module {name!r} "
            f"({what}); available: {names}"
        )

    def _resolve_encoder(self, pl_module: Any) -> str | None:
        name = self.embedding_module
        if name is None:
            return None
        if name in self._module_names(pl_module):
            return name
        if name == _DEFAULT_EMBEDDING_MODULE:
            log.info(
                "learnscope: %s has no sub-module 'encoder'; TrainingHelper's embedding-collapse "
                "and head checks are off (pass embedding_module= to turn them on)",
                type(pl_module).__name__,
            )
            return None
        raise self._unknown(pl_module, "embedding_module", name)

    def _resolve_heads(self, pl_module: Any) -> list[str]:
        known = set(self._module_names(pl_module))
        if self.head_modules is not None:
            for name in self.head_modules:
                if name not in known:
                    raise self._unknown(pl_module, "head_modules", name)
            return [] if self._encoder is None else list(self.head_modules)
        if self._encoder is None:
            return []
        parent, _, own = self._encoder.rpartition(".")
        siblings = pl_module.get_submodule(parent).named_children()
        prefix = f"{parent}." if parent else ""
        return [
            prefix + child
            for child, module in siblings
            if child != own and any(p.requires_grad for p in module.parameters())
        ]

    @override
    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Detach the hooks and flush the writers."""
        self._detach()
        self._dashboards(trainer).flush()

    @override
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Detach the hooks; name the unused parameters when DDP stopped because of them.

        Lightning's ``teardown`` does not detach the hooks after an exception.
        """
        self._detach()
        if trainer.is_global_zero:
            advice = ddp_unused_parameter_advice(exception, self._unused_names)
            if advice is not None:
                log.error("learnscope: %s", advice)

    def _detach(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._tracer is not None:
            self._tracer.disarm()
        self._collecting = self._in_train_batch = False
        self._batch = self._loss = None

    # -- every training batch --------------------------------------------------------------

    @override
    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        """Decide whether this is a check step; start checks that look at the batch."""
        step = self._batch_step = trainer.global_step
        self._check = trainer.is_global_zero and step % self.check_every_n_steps == 0
        if self._trace_next_step and self._tracer is not None and self.is_on(_TRACE):
            self._trace_next_step = False
            self._tracer.arm()
        if not self._check and not self._collecting:
            return
        if self._check and step != self._checked_step:
            self._check_inputs(batch, step)
            if self._encoder is not None and self.is_on(_COLLAPSE) and not self._collecting:
                self._collecting = True
                if self._buffer is not None:
                    self._buffer.reset()
        if self._collecting:
            self._in_train_batch = True
            self._took_batch = False
            self._batch = batch

    def _on_embedding(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not self._in_train_batch or self._took_batch:
            return  # the common case: no collection running, or a second forward in the batch
        self._took_batch = True
        with self.guard(_COLLAPSE):
            value = self.select(output) if self.select is not None else output
            if not isinstance(value, torch.Tensor) or value.ndim < 2:
                raise TypeError(
                    f"TrainingHelper: module {self._encoder!r} gave "
                    f"{type(value).__name__} {tuple(getattr(value, 'shape', ()))}, not a tensor "
                    "[rows, dim] or [batch, ..., dim]; pass select= to pick the embedding"
                )
            rows = value.detach()
            if self._buffer is None:
                dim = rows.shape[-1]
                wanted = int(self.embedding_rows_per_dim * dim)
                self._buffer = EmbeddingRowBuffer(max(2, min(wanted, self.max_embedding_rows)))
            edges = self.edge_index_fn(self._batch) if self.edge_index_fn is not None else None
            self._buffer.append(rows, edges)
        if not self.is_on(_COLLAPSE):
            self._collecting = False

    @override
    def on_before_backward(self, trainer: Any, pl_module: Any, loss: torch.Tensor) -> None:
        """Keep the loss of a check step; name a non-finite module when tracing."""
        if self._check:
            self._loss = loss.detach()
        self._finish_trace()

    @override
    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        """Report unused parameters after the first backward; check gradients on check steps."""
        step = trainer.global_step
        if not self._unused_checked and trainer.is_global_zero:
            self._unused_checked = True
            with self.guard(_GRADIENTS):
                parameters = list(pl_module.named_parameters())
                self._unused_names = unused_parameter_names(parameters)
                self._report(unused_parameter_findings(parameters, step))
        if not self._check or step == self._checked_step or not self.is_on(_GRADIENTS):
            return
        self._checked_step = step
        loss, self._loss = self._loss, None
        with self.guard(_GRADIENTS):
            self._check_gradients(trainer, pl_module, step, loss)

    def _check_gradients(
        self, trainer: Any, pl_module: Any, step: int, loss: torch.Tensor | None
    ) -> None:
        stats = gradient_statistics(pl_module.named_parameters(), loss)
        scaled = str(getattr(trainer, "precision", "")).startswith("16")
        findings = gradient_findings(
            stats,
            step,
            small_grad_threshold=self.small_grad_threshold,
            check_nonfinite=not scaled,
            check_small=step > 0,
        )
        if any(f.code in ("non-finite-gradient", "non-finite-loss") for f in findings):
            self._trace_next_step = True
        scalars = health_scalars(stats, self.group_depth)
        if self._encoder is not None and self._heads:
            head, ratios = head_findings(
                stats, self._encoder, self._heads, step, max_ratio=self.max_head_to_encoder_ratio
            )
            findings += head
            scalars.update(ratios)
        self._report(findings)
        writers = self._dashboards(trainer)
        writers.write_scalars(scalars, step)
        if self.histograms:
            graded = stats.grad_norms[stats.has_grad]
            writers.write_histogram(Histogram("health/grad_norm", step, graded))

    def _check_inputs(self, batch: Any, step: int) -> None:
        if not self.input_checks or not self.is_on(_INPUTS):
            return
        with self.guard(_INPUTS):
            for check in self.input_checks:
                message = check(batch)
                if message:
                    subject = getattr(check, "subject", None) or getattr(
                        check, "__name__", type(check).__name__
                    )
                    self._report([Finding("input-range", str(subject), message, step)])

    @override
    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Name a non-finite module when tracing; judge collapse once enough rows are in."""
        step = self._batch_step
        self._finish_trace()
        self._in_train_batch = False
        self._batch = None
        buffer = self._buffer
        if self._collecting and buffer is not None and buffer.is_full:
            self._collecting = False
            with self.guard(_COLLAPSE):
                self._judge_collapse(trainer, buffer, step)
        if self._new_findings:
            self._new_findings = False
            self._dashboards(trainer).write_findings(self.findings, step)

    @override
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        """Write the findings table once more, so a healthy run says so in the dashboards."""
        self._dashboards(trainer).write_findings(self.findings, trainer.global_step)

    def _finish_trace(self) -> None:
        """Remove the tracing hooks (after the forward, before the optimizer changes anything)."""
        if self._tracer is None or not self._tracer.armed:
            return
        with self.guard(_TRACE):
            found = self._tracer.disarm()
            if found is not None:
                module, message = found
                step = self._batch_step
                self._report(
                    [Finding("non-finite-output", module, message, step, severity="error")]
                )

    def _judge_collapse(self, trainer: Any, buffer: EmbeddingRowBuffer, step: int) -> None:
        rows = buffer.rows()
        finite_rows = int(torch.isfinite(rows).all(dim=1).sum())
        if finite_rows < 2:  # a non-finite embedding is reported by the gradient checks
            buffer.reset()
            return
        metrics = buffer.compute()
        num_rows, dim = finite_rows, rows.shape[1]
        buffer.reset()
        module = self._encoder or ""
        self._report(collapse_findings(metrics, module, step, num_rows=num_rows, dim=dim))
        scalars = {f"health/collapse/{module}/{key}": value for key, value in metrics.items()}
        self._dashboards(trainer).write_scalars(scalars, step)

    # -- findings --------------------------------------------------------------------------

    def _dashboards(self, trainer: Any) -> Writers:
        """The writers; a logger that cannot show histograms or the findings table is named once.

        Without any logger nothing is said: the findings are on the ``learnscope`` logger.
        """
        shown = ("write_histogram", "write_findings") if self.histograms else ("write_findings",)
        return self.writers(trainer, shown, warn_without_logger=False)

    def _report(self, findings: Sequence[Finding]) -> None:
        for finding in findings:
            if self._log.add(finding):
                self._new_findings = True
                log.warning(
                    "learnscope: %s %s: %s (step %d)",
                    finding.code,
                    finding.subject,
                    finding.message,
                    finding.step,
                )

    @override
    def state_dict(self) -> dict[str, Any]:
        """The findings table and when each finding was last warned about."""
        return {
            "findings": self._log.state_dict(),
            "unused_checked": self._unused_checked,
            "unused_names": list(self._unused_names),
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the findings, so a resumed run does not warn again too soon."""
        self._log.load_state_dict(state_dict.get("findings", {}))
        self._unused_checked = bool(state_dict.get("unused_checked", False))
        self._unused_names = list(state_dict.get("unused_names", []))
