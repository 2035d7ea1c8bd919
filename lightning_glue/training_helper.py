"""TrainingHelper: tell the user, early and once, when training looks unhealthy."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import torch
from typing_extensions import override

from learnscope.collapse import CollapseThresholds, EmbeddingRowBuffer
from learnscope.embedding_layout import (
    DEFAULT_MASK,
    check_mask_fn,
    check_spatial,
    embedding_layout,
    keep_edges,
    row_mask,
)
from learnscope.embedding_rows import pyg_graphs
from learnscope.health import (
    FindingLog,
    GradientRound,
    NonFiniteOutputTracer,
    collapse_findings,
    ddp_unused_parameter_advice,
    gradient_findings,
    gradient_statistics,
    head_findings,
    health_scalars,
    unused_parameter_findings,
)
from learnscope.health.sharded import is_sharded, parameter_shards
from learnscope.lightning_glue.base import LearnscopeCallback
from learnscope.plugins.background import BackgroundWriters
from learnscope.records import Finding, Histogram
from learnscope.trainable import TrainableChange, TrainableWatch

log = logging.getLogger("learnscope")

_GRADIENTS = "gradient checks"
_COLLAPSE = "embedding collapse"
_INPUTS = "input checks"
_TRACE = "non-finite output tracing"
_DEFAULT_EMBEDDING_MODULE = "encoder"


class TrainingHelper(LearnscopeCallback):
    """A guide to good practice: findings about unhealthy training, in the logs and dashboards.

    What it checks:

    * **Unused parameters**: parameters that require a gradient and never got one during a first
      round of optimizer steps (the first step, or with several optimizers, as in a GAN trained
      with manual optimization, the first step of every optimizer: each step sees the gradients
      of its own parameters only), one finding per module, reported once per run. Under DDP
      (without ``find_unused_parameters``) the second step then fails with "Expected to have
      finished reduction in the prior iteration", which names no parameter: TrainingHelper logs
      their names and the two ways out (remove them, or
      ``strategy="ddp_find_unused_parameters_true"``).
    * **Gradients**, once per optimizer step on check steps (global steps that are multiples of
      ``check_every_n_steps``), in ``on_before_optimizer_step``: non-finite, zero and tiny
      gradients, named (tiny means under ``small_grad_threshold`` times the median gradient per
      element over the parameters; see :mod:`learnscope.health`). A closure optimizer such as
      ``LBFGS`` runs that hook once per closure evaluation: only the first, the step's own
      gradients, is checked. With several optimizers each step is judged on its own optimizer's
      parameters. Zero and tiny gradients are not judged on an optimizer's first step, where a
      zero-initialised layer (ReZero, adaLN-zero) rightly gives zero gradients upstream. A bias
      whose gradient is zero or tiny beside healthy weights in its module is structurally zero
      (a softmax or a normalisation after it removes the shift it adds, as for the key bias of
      attention or a bias right before BatchNorm): that is an ``info`` finding, not a warning.
      The norms of all parameters and gradients come from fused calls and reach the host in one
      transfer. Under a loss scaler (a ``GradScaler``, which ``precision="16-mixed"`` uses),
      non-finite gradients are the scaler's business (it skips those steps) and are not
      reported; without one (``"16-true"``, ``"bf16-mixed"``, 32 bits) they are. A non-finite
      loss always is.
    * **The loss** (``health/loss``) of a check step is the step's own: the mean over the
      micro-batches of the step of the loss ``training_step`` returned (Lightning divides it by
      ``accumulate_grad_batches`` before the backward; that is undone, and so is a gradient
      scaler's factor), each micro-batch counted at its first backward (for ``LBFGS``, the
      closure evaluated first, at the parameters the step starts from). In manual optimization
      it is the first loss passed to ``manual_backward`` in the batch (for a GAN that steps the
      discriminator first, the discriminator's).
    * **Non-finite values**: when a check finds a non-finite gradient or loss, forward hooks on
      every module are armed for the next training step only, to name the first module whose
      output is not finite.
    * **Head versus encoder**: the weights of each head module against the embedding module's
      (root mean square per element), reported above ``max_head_to_encoder_ratio``.
    * **Embedding collapse**: on each check step a forward hook on ``embedding_module`` copies
      the detached output of the step's training batches (every micro-batch of the step, the
      first forward of each) into an :class:`~learnscope.collapse.EmbeddingRowBuffer` of at most
      ``embedding_rows_per_dim`` times the dimension rows (and at most ``max_embedding_rows``:
      4096 rows of dimension 256 in float32 cost 4 MiB); when the step is over the metrics are
      computed on those rows and judged. Rows of different steps are never mixed, so a check
      sees the embedding as it was at that step. The ranks (RankMe, effective rank) then rest
      on one step's rows: they cannot exceed the number of rows, and they are judged only when
      the step brings at least 4 rows per dimension (a batch of 256 for dimension 64; outputs
      ``[batch, tokens, dim]`` count each token as a row, a graph batch each node); below that
      they are still written to the dashboards, and the other metrics are judged as usual.
      The rows are those :class:`~learnscope.lightning_glue.EmbeddingProjector` shows, by the
      same rule (:mod:`learnscope.embedding_layout`): feature maps ``[batch, channels,
      *spatial]`` give one ``channels``-dimensional row per sample when pooled to 1 x 1, and
      need ``spatial`` otherwise; ``mask_fn`` leaves out padding tokens (by default those of
      the batch's ``attention_mask``). The first capture of a fit checks ``spatial`` and
      ``mask_fn`` against the real output and raises on a mistake, even outside strict mode:
      the output's shape is known only then (not at ``setup``), and a wrong reading would
      give meaningless metrics, not a failing diagnostic. That capture is on the first
      training step, before any optimizer step.
      With ``edge_index_fn``, also oversmoothing, mainly from ``mad_global``, the mean cosine
      distance between the nodes of a graph (Chen et al., AAAI 2020), which falls towards 0
      when deep graph convolutions make the rows proportional. It is judged graph by graph: a
      graph's MAD is the mean over its nodes of the mean cosine distance to all its other
      nodes, connected or not; the ``oversmoothing`` finding says how many of the step's graphs
      are below ``min_mad_global`` (of how many, the lowest value, and with ``ids_fn`` their
      ids), even when the mean over graphs is healthy. Each row's graph comes from
      ``graph_index_fn``, else from a PyTorch Geometric batch (``batch.batch``, when it has one
      entry per embedding row); otherwise all the rows of a batch are one graph. The graphs of
      the micro-batches of a check step are all different graphs. The dashboards get
      ``health/collapse/<module>/mad_global``, the mean over the step's graphs (each counted
      once) of each graph's MAD, and ``.../mad_global_min``, the lowest graph's (see
      :func:`~learnscope.collapse.judge_collapse` for the thresholds, which
      ``collapse_thresholds`` overrides).
    * **Inputs**: each of ``input_checks``, a callable ``batch -> str | None`` such as
      :class:`~learnscope.health.CoordinateRangeCheck`, runs on the first batch of each check
      step; a returned message is an ``input-range`` finding about the check's ``subject``
      attribute (or its name).

    Findings go to the ``learnscope`` logger, warnings and errors at warning level and ``info``
    findings at info level, each (code, subject) at most once per ``warn_every_n_steps``
    (unused parameters once), and to every logger's dashboard as the full findings table. On
    check steps the dashboards also get a histogram of the gradient norm of every parameter
    (``health/grad_norm``) and scalars: per-group gradient and weight norms
    (``health/grad_norm/<group>``, ``health/weight_norm/<group>``, groups being module-name
    prefixes of ``group_depth`` parts), ``health/loss``, ``health/head_weight_ratio/<head>``, and
    the collapse metrics (``health/collapse/<module>/<metric>``).

    Nothing here synchronises with the device on ordinary steps: the hooks return at once unless
    a check is running. Check steps are decided from ``trainer.global_step``; everything runs on
    rank zero only, except with sharded parameters (FSDP2's ``ModelParallelStrategy``, FSDP1's
    ``FSDPStrategy``): there every rank measures its shard on check steps (and during the first
    round, for unused parameters), the sums of squares are added over the ranks in one
    all-reduce, and rank zero reports figures equal to the unsharded model's, under the original
    parameter names. FSDP gives an unused parameter a zero gradient, so it is reported as a
    ``zero-gradient`` finding from the second step on, not as unused. A diagnostic that fails is
    logged once with its traceback and switched off; training goes on. The findings table and the
    warning times are saved in checkpoints.

    Args:
        check_every_n_steps: Global steps between checks.
        small_grad_threshold: Ratio to the median gradient per element under which a gradient is
            tiny (see :func:`~learnscope.health.gradient_findings` for the default).
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
        embedding_rows_per_dim: Most rows per embedding dimension kept from a check step.
        max_embedding_rows: Cap on those rows.
        collapse_thresholds: Keyword arguments of :func:`~learnscope.collapse.judge_collapse`
            to override, such as ``{"min_mad_global": 0.02}`` or
            ``{"max_oversmoothed_fraction": 0.1}`` (tolerate 10% oversmoothed graphs, say
            crystals whose atoms are all equivalent).
        spatial: For feature maps ``[batch, channels, H, W]`` larger than 1 x 1: ``"mean"``
            or ``"max"`` over the positions (one row per sample), or ``"pixels"`` (one row per
            position). Without it such an output raises a ``ValueError`` naming the shape and
            the options at the first capture; set for an output of 2 or 3 dimensions it
            raises too.
        mask_fn: Leaves rows that are not data out of the collapse metrics: ``batch -> bool
            tensor`` with one value per row (``[B, T]`` for tokens, ``[B]`` for ``[B, dim]``,
            or flat), or the key or attribute of the batch that holds it. The default,
            ``"attention_mask"`` (1 = real token), is used when the batch has it and the output
            gives one row per token. ``None`` keeps every row. With ``edge_index_fn``, the
            edges between kept rows are kept, renumbered; the others are left out.
        graph_index_fn: ``batch -> LongTensor[rows]``, each embedding row's graph within the
            batch (0 to the number of graphs minus one), for batches of several graphs that
            are not PyTorch Geometric's (as for
            :class:`~learnscope.lightning_glue.EmbeddingProjector`). Needs ``edge_index_fn``.
        ids_fn: ``batch -> ids``, one id per graph of the batch (a sequence or a tensor, in
            graph order; one id when the batch is one graph), named in ``oversmoothing``
            findings, such as ``lambda batch: batch.material_id``. Needs ``edge_index_fn``.

    Raises:
        ValueError: For bad arguments; unknown module names fail at ``setup``.

    Example:
        >>> from learnscope.health import CoordinateRangeCheck
        >>> helper = TrainingHelper(check_every_n_steps=100, input_checks=[CoordinateRangeCheck()])
        >>> helper.findings
        []
        >>> cnn = TrainingHelper(embedding_module="backbone", spatial="mean")
    """

    def __init__(
        self,
        check_every_n_steps: int = 50,
        small_grad_threshold: float = 1e-5,
        embedding_module: str | None = _DEFAULT_EMBEDDING_MODULE,
        head_modules: Sequence[str] | None = None,
        input_checks: Sequence[Callable[..., Any]] = (),
        histograms: bool = True,
        warn_every_n_steps: int = 1000,
        edge_index_fn: Callable[..., Any] | None = None,
        *,
        select: Callable[..., Any] | None = None,
        group_depth: int = 1,
        max_head_to_encoder_ratio: float = 100.0,
        embedding_rows_per_dim: float = 8.0,
        max_embedding_rows: int = 4096,
        collapse_thresholds: Mapping[str, float] | None = None,
        spatial: Literal["mean", "max", "pixels"] | None = None,
        mask_fn: str | Callable[..., Any] | None = DEFAULT_MASK,
        graph_index_fn: Callable[..., Any] | None = None,
        ids_fn: Callable[..., Any] | None = None,
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
        thresholds = dict(collapse_thresholds or {})
        CollapseThresholds.from_mapping(thresholds)  # unknown names and bad values fail here
        functions = (*input_checks, edge_index_fn, select, graph_index_fn, ids_fn)
        not_callable = [c for c in functions if c is not None and not callable(c)]
        if not_callable:
            raise ValueError(
                "input_checks, edge_index_fn, select, graph_index_fn and ids_fn must be "
                f"callables: {not_callable}"
            )
        if edge_index_fn is None and (graph_index_fn is not None or ids_fn is not None):
            raise ValueError(
                "graph_index_fn and ids_fn need edge_index_fn: they describe the graphs whose "
                "oversmoothing it turns on"
            )
        self.spatial = check_spatial(spatial)
        self.mask_fn = check_mask_fn(mask_fn)
        self.check_every_n_steps = check_every_n_steps
        self.small_grad_threshold = small_grad_threshold
        self.embedding_module = embedding_module
        self.head_modules = None if head_modules is None else list(head_modules)
        self.input_checks = list(input_checks)
        self.histograms = histograms
        self.edge_index_fn = edge_index_fn
        self.graph_index_fn = graph_index_fn
        self.ids_fn = ids_fn
        self.select = select
        self.group_depth = group_depth
        self.max_head_to_encoder_ratio = max_head_to_encoder_ratio
        self.embedding_rows_per_dim = embedding_rows_per_dim
        self.max_embedding_rows = max_embedding_rows
        self.collapse_thresholds = thresholds
        self._log = FindingLog(warn_every_n_steps)
        self._encoder: str | None = None  # resolved at setup
        self._heads: list[str] = []
        self._hook: torch.utils.hooks.RemovableHandle | None = None
        self._tracer: NonFiniteOutputTracer | None = None
        self._trace_next_step = False
        self._round = GradientRound()  # which parameters get a gradient in the first round
        self._loaded = False  # state came from load_state_dict before this fit's setup
        self._unused_names: list[str] = []  # parameters without a gradient in that round
        self._stepped: set[int] = set()  # ids of the optimizers that stepped before
        self._check = False  # this batch belongs to a check step (rank zero's checks)
        self._grad_check = False  # this rank measures gradients at this step
        self._sharded = False  # parameters are sharded over ranks: every rank measures
        self._rank_zero = True
        self._check_step = -1  # the check step whose batches run now (or ran last)
        self._checked_step = -1  # the last step whose gradients were checked
        self._batch_step = 0  # trainer.global_step when the batch started
        self._loss_parts: list[torch.Tensor] = []  # the check step's micro-batch losses
        self._loss_taken = False  # this batch's loss is in _loss_parts
        self._in_train_batch = False
        self._collecting = False
        self._took_batch = False
        self._batch: Any = None
        self._buffer: EmbeddingRowBuffer | None = None
        self._rows_checked = False  # spatial and mask_fn were checked on a real output
        self._new_findings = False
        self._watch: TrainableWatch | None = None  # notices parameters that start training

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
        """Resolve the module names (failing on unknown ones) and attach the hooks.

        A new ``fit`` starts a new findings table and a new first round of optimizer steps (a
        resumed one gets them back from the checkpoint, which Lightning loads after ``setup``).
        """
        super().setup(trainer, pl_module, stage)
        self._detach()
        if stage == "fit" and not self._loaded:
            self._log = FindingLog(self._log.warn_every_n_steps, self._log.once_codes)
            self._round, self._stepped, self._unused_names = GradientRound(), set(), []
            self._check_step = self._checked_step = -1
        self._encoder = self._resolve_encoder(pl_module)
        self._rows_checked = False
        self._heads = self._resolve_heads(pl_module)
        with self.guard(_TRACE, "setup"):
            self._tracer = NonFiniteOutputTracer(pl_module)
        if self._encoder is not None:
            with self.guard(_COLLAPSE, "setup"):
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
        """Detach the hooks; leaving the writer session flushes the writers."""
        super().teardown(trainer, pl_module, stage)
        self._detach()

    @override
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Detach the hooks; name the unused parameters when DDP stopped because of them.

        Lightning's ``teardown`` does not detach the hooks after an exception.
        """
        super().on_exception(trainer, pl_module, exception)
        self._detach()
        if trainer.is_global_zero:
            names = self._unused_names
            seen = self._round.seen
            if not self._round.complete and seen:  # stopped before every optimizer stepped
                names = [n for n, p in pl_module.named_parameters() if p.requires_grad]
                judged = self._round.names
                names = [n for n in names if n not in seen and (judged is None or n in judged)]
            advice = ddp_unused_parameter_advice(exception, names)
            if advice is not None:
                log.error("learnscope: %s", advice)

    def _detach(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._tracer is not None:
            self._tracer.disarm()
        self._collecting = self._in_train_batch = False
        self._batch = None
        self._loss_parts = []

    # -- every training batch --------------------------------------------------------------

    @override
    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        """Decide whether this batch belongs to a check step; start the step's checks."""
        step = self._batch_step = trainer.global_step
        self._loss_taken = False
        due = step % self.check_every_n_steps == 0
        self._check = due and trainer.is_global_zero
        self._grad_check = due and (self._check or self._sharded)
        if self._trace_next_step and self._tracer is not None and self.is_on(_TRACE):
            self._trace_next_step = False
            self._tracer.arm()
        if not self._grad_check:
            self._collecting = False  # a step whose end went unseen: its rows are dropped
            return
        if step != self._check_step:  # the first micro-batch of the check step
            self._check_step = step
            self._loss_parts = []
            if not self._check:  # another rank of a sharded model: gradients only
                return
            self._check_inputs(batch, step)
            self._collecting = self._encoder is not None and self.is_on(_COLLAPSE)
            if self._buffer is not None:
                self._buffer.reset()
        if self._collecting:
            self._in_train_batch = True
            self._took_batch = False
            self._batch = batch

    def _on_embedding(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not self._in_train_batch or self._took_batch:
            return  # the common case: no check step, or a second forward in the batch
        self._took_batch = True
        if self._buffer is not None and self._buffer.is_full:
            return
        record = f"step {self._batch_step}"
        value: torch.Tensor | None = None
        rows: tuple[torch.Tensor, torch.Tensor | None] | None = None
        with self.guard(_COLLAPSE, record):
            selected = self.select(output) if self.select is not None else output
            if not isinstance(selected, torch.Tensor) or selected.ndim < 2:
                raise TypeError(
                    f"TrainingHelper: module {self._encoder!r} gave "
                    f"{type(selected).__name__} {tuple(getattr(selected, 'shape', ()))}, not a "
                    "tensor [rows, dim] or [batch, ..., dim]; pass select= to pick the embedding"
                )
            value = selected
            if self._rows_checked:
                rows = self._rows(value)
        if value is not None and not self._rows_checked:
            rows = self._rows(value)  # outside the guard: a wrong spatial or mask_fn stops here
            self._rows_checked = True
        if rows is not None:
            with self.guard(_COLLAPSE, record):
                self._append(*rows)
                self._append_graphs(*rows)
        if not self.is_on(_COLLAPSE):
            self._collecting = False

    def _rows(self, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The rows ``[R, D]`` of the embedding (the shared rule), and the mask of those kept."""
        owner = f"TrainingHelper: module {self._encoder!r}"
        layout = embedding_layout(value.detach(), self.spatial, owner)
        keep = row_mask(self.mask_fn, self._batch, layout, owner)
        return layout.rows.reshape(-1, layout.rows.shape[-1]), keep

    def _append(self, rows: torch.Tensor, keep: torch.Tensor | None) -> None:
        """Copy the kept rows, and the edges between them, into the step's buffer."""
        if self._buffer is None:
            wanted = int(self.embedding_rows_per_dim * rows.shape[-1])
            self._buffer = EmbeddingRowBuffer(max(2, min(wanted, self.max_embedding_rows)))
        edges = self.edge_index_fn(self._batch) if self.edge_index_fn is not None else None
        if keep is not None:
            rows = rows[keep]
            if edges is not None:
                edges = keep_edges(edges, keep)
        self._buffer.append(rows, edges)

    def _append_graphs(self, rows: torch.Tensor, keep: torch.Tensor | None) -> None:
        """Tell the buffer the graph of each row just appended, and each graph's id.

        From ``graph_index_fn``, else from a PyTorch Geometric batch whose ``batch.batch`` has
        one entry per row; otherwise the batch is one graph.
        """
        if self.edge_index_fn is None or self._buffer is None:
            return
        count: int | None = 1
        if self.graph_index_fn is not None:
            index = self.graph_index_fn(self._batch)
            is_index = isinstance(index, torch.Tensor) and index.ndim == 1
            if not is_index or index.is_floating_point() or len(index) != len(rows):
                given = f"{len(index)} values" if is_index else _describe(index)
                raise ValueError(
                    f"TrainingHelper: graph_index_fn gave {given} but the embedding has "
                    f"{len(rows)} rows; it must give each row's graph within the batch (a 1-D "
                    "integer tensor, 0 to the number of graphs minus one)"
                )
            count = None
        else:
            graphs = pyg_graphs(self._batch)
            index = None
            if graphs is not None and len(graphs[0]) == len(rows):
                index, count = graphs
        ids = None
        if self.ids_fn is not None:
            ids = self.ids_fn(self._batch)
            if isinstance(ids, torch.Tensor):
                ids = ids.detach().reshape(-1)
            elif isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
                ids = [ids]  # one id for a batch that is one graph
            if count is None:  # from graph_index_fn: read on the host, on check steps only
                count = int(index.max()) + 1 if len(index) else 0
            if len(ids) != count:
                raise ValueError(
                    f"TrainingHelper: ids_fn gave {len(ids)} ids but the batch has {count} "
                    "graphs; it must give one id per graph, in graph order"
                )
        if keep is not None and index is not None:
            index = index.to(keep.device)[keep]
        self._buffer.append_graphs(index, ids)

    @override
    def on_before_backward(self, trainer: Any, pl_module: Any, loss: torch.Tensor) -> None:
        """Keep the batch's first loss on check steps; name a non-finite module when tracing."""
        self._finish_trace()
        if self._grad_check and not self._loss_taken:
            self._loss_taken = True
            self._loss_parts.append(loss.detach())

    @override
    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        """Judge unused parameters after a first round; check gradients on check steps."""
        step = trainer.global_step
        if self._watch is not None and self.is_on(_GRADIENTS):
            change = self._watch.poll()  # about 2 us: param groups, 32 requires_grad flags
            if change is not None:
                with self.guard(_GRADIENTS, f"step {step}"):
                    self._follow(pl_module, change)
        first_step = id(optimizer) not in self._stepped
        self._stepped.add(id(optimizer))
        if (
            (trainer.is_global_zero or self._sharded)
            and not self._round.complete
            and self.is_on(_GRADIENTS)
        ):
            with self.guard(_GRADIENTS, f"step {step}"):
                self._observe_round(trainer, pl_module, optimizer, step)
        if not self._grad_check or step == self._checked_step or not self.is_on(_GRADIENTS):
            return  # not a check step, or a later closure evaluation of the step
        self._checked_step = step
        with self.guard(_GRADIENTS, f"step {step}"):
            loss = self._step_loss(trainer, pl_module)
            self._check_gradients(trainer, pl_module, optimizer, step, loss, not first_step)

    def _follow(self, pl_module: Any, change: TrainableChange) -> None:
        """Parameters started or stopped training (fine-tuning): judge the new ones afresh.

        Those that start training after the first round get a first round of their own (the
        round under way judges them anyway), and their first step, like an optimizer's, is not
        judged for zero or tiny gradients. The default heads are those that train now.
        """
        if change.added and self._round.complete:
            self._round = GradientRound(names=change.added)
        if change.added:
            self._stepped = set()
        if self.head_modules is None:
            self._heads = self._resolve_heads(pl_module)

    def _observe_round(self, trainer: Any, pl_module: Any, optimizer: Any, step: int) -> None:
        named = parameter_shards(pl_module)
        unused = self._round.observe(named, optimizer, trainer.optimizers)
        if unused is None:
            return
        if self._round.names is not None:  # a round of parameters that started training later
            named = [shard for shard in named if shard.name in self._round.names]
        self._unused_names = [n for n in self._unused_names if n not in unused] + unused
        single = len(trainer.optimizers) <= 1
        seen = None if single else self._round.seen
        late = self._round.names is not None
        self._report(unused_parameter_findings(named, step, seen=seen, newly_trainable=late))

    def _step_loss(self, trainer: Any, pl_module: Any) -> torch.Tensor | None:
        """The check step's loss: the mean of its micro-batch losses, as training_step gave them."""
        parts, self._loss_parts = self._loss_parts, []
        if not parts:
            return None
        device = parts[0].device
        losses = torch.stack([part.float().mean().to(device) for part in parts])
        if getattr(pl_module, "automatic_optimization", True):
            losses = losses * trainer.accumulate_grad_batches  # Lightning divided by it
        loss = losses.mean()
        scaler = _loss_scaler(trainer)
        return loss if scaler is None else loss / scaler.get_scale()

    def _check_gradients(
        self,
        trainer: Any,
        pl_module: Any,
        optimizer: Any,
        step: int,
        loss: torch.Tensor | None,
        check_small: bool,
    ) -> None:
        named = parameter_shards(pl_module)
        if len(trainer.optimizers) > 1:  # each step sees its own optimizer's gradients only
            own = {id(p) for group in optimizer.param_groups for p in group["params"]}
            named = [shard for shard in named if id(shard.holder) in own]
        if not any(shard.requires_grad for shard in named):
            return  # nothing trains (yet): fine-tuning may make parameters trainable later
        stats = gradient_statistics(named, loss)
        findings = gradient_findings(
            stats,
            step,
            small_grad_threshold=self.small_grad_threshold,
            check_nonfinite=_loss_scaler(trainer) is None,
            check_small=check_small,
        )
        if not self._rank_zero:
            return  # another rank of a sharded model: it took part in the sums
        if any(f.code in ("non-finite-gradient", "non-finite-loss") for f in findings):
            self._trace_next_step = True
        scalars = health_scalars(stats, self.group_depth)
        heads = [h for h in self._heads if _holds(stats.names, h)]
        if self._encoder is not None and heads and _holds(stats.names, self._encoder):
            head, ratios = head_findings(
                stats, self._encoder, heads, step, max_ratio=self.max_head_to_encoder_ratio
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
        with self.guard(_INPUTS, f"step {step}"):
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
        """Name a non-finite module when tracing; judge collapse when a check step is over."""
        step = self._batch_step
        self._finish_trace()
        self._in_train_batch = False
        self._batch = None
        if self._collecting and trainer.global_step != step:  # the step's last micro-batch
            self._collecting = False
            buffer = self._buffer
            if buffer is not None and buffer.num_rows > 0:
                with self.guard(_COLLAPSE, f"step {step}"):
                    self._judge_collapse(trainer, buffer, step)
        if self._new_findings:
            self._new_findings = False
            self._dashboards(trainer).write_findings(self.findings, step)

    @override
    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        """Note whether the strategy sharded the parameters; the next ``setup`` starts afresh.

        A checkpoint, if any, was loaded by now.
        """
        self._loaded = False
        self._rank_zero = trainer.is_global_zero
        self._watch = None
        with self.guard(_GRADIENTS, "fit start"):
            self._sharded = is_sharded(pl_module)
            if self._rank_zero or self._sharded:
                self._watch = TrainableWatch(pl_module.named_parameters(), trainer.optimizers)

    @override
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        """Write the findings table once more, so a healthy run says so in the dashboards."""
        self._dashboards(trainer).write_findings(self.findings, trainer.global_step)

    def _finish_trace(self) -> None:
        """Remove the tracing hooks (after the forward, before the optimizer changes anything)."""
        if self._tracer is None or not self._tracer.armed:
            return
        with self.guard(_TRACE, f"step {self._batch_step}"):
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
        graph_mad = buffer.per_graph_mad() if buffer.edge_index() is not None else None
        graph_ids = buffer.graph_ids() if graph_mad is not None else None
        num_rows, dim = finite_rows, rows.shape[1]
        buffer.reset()
        module = self._encoder or ""
        self._report(
            collapse_findings(
                metrics,
                module,
                step,
                num_rows=num_rows,
                dim=dim,
                graph_mad=graph_mad,
                graph_ids=graph_ids,
                **self.collapse_thresholds,
            )
        )
        scalars = {f"health/collapse/{module}/{key}": value for key, value in metrics.items()}
        self._dashboards(trainer).write_scalars(scalars, step)

    # -- findings --------------------------------------------------------------------------

    def _dashboards(self, trainer: Any) -> BackgroundWriters:
        """The writers; a logger that cannot show histograms or the findings table is named once.

        Without any logger nothing is said: the findings are on the ``learnscope`` logger.
        """
        shown = ("write_histogram", "write_findings") if self.histograms else ("write_findings",)
        return self.writers(trainer, shown, warn_without_logger=False)

    def _report(self, findings: Sequence[Finding]) -> None:
        if not self._rank_zero:
            return
        for finding in findings:
            if self._log.add(finding):
                self._new_findings = True
                log.log(
                    logging.INFO if finding.severity == "info" else logging.WARNING,
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
            "unused_checked": self._round.complete,
            "unused_names": list(self._unused_names),
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the findings, so a resumed run does not warn again too soon."""
        self._log.load_state_dict(state_dict.get("findings", {}))
        self._loaded = True
        self._round = GradientRound()
        self._round.complete = bool(state_dict.get("unused_checked", False))
        self._unused_names = list(state_dict.get("unused_names", []))


_GRAD_SCALER: type = getattr(torch.amp, "GradScaler", None) or torch.cuda.amp.GradScaler


def _loss_scaler(trainer: Any) -> Any:
    """The precision plugin's enabled gradient scaler (``"16-mixed"``), or ``None``.

    Only a ``GradScaler`` scales the loss and skips steps with non-finite gradients;
    ``"16-true"`` and ``"bf16-mixed"`` have none.
    """
    scaler = getattr(getattr(trainer, "precision_plugin", None), "scaler", None)
    return scaler if isinstance(scaler, _GRAD_SCALER) and scaler.is_enabled() else None


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def _holds(names: Sequence[str], module: str) -> bool:
    """Whether any of the parameter ``names`` belongs to ``module``."""
    return any(name.startswith(module + ".") for name in names)
