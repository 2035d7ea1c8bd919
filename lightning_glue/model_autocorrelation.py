"""ModelAutocorrelation: how correlated successive optimisation steps are, in every dashboard."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from typing_extensions import override

from learnscope.autocorrelation import summarize
from learnscope.lightning_glue.base import LearnscopeCallback
from learnscope.plugins import Writers, shows
from learnscope.records import AutocorrelationSummary
from learnscope.sampled_history import SampledParameterHistory

log = logging.getLogger("learnscope")

_PART = "model autocorrelation"
_SHOWS = "write_autocorrelation"


class ModelAutocorrelation(LearnscopeCallback):
    """Autocorrelation of sampled parameters and gradients over training steps, per module group.

    Shows, for each module group (``encoder``, ``head``...), whether successive optimisation
    steps are correlated: parameters that move slowly (lag-1 autocorrelation near 1, long
    integrated autocorrelation time tau) or gradients that flip sign from step to step
    (lag-1 near -1: oscillation, the edge of stability).

    **What it costs.** At ``fit`` start one contiguous random slice of ``elements_per_tensor``
    elements is chosen per trainable parameter tensor (at most ``max_elements`` in all; see
    :class:`~learnscope.sampled_history.SampledParameterHistory`). In
    ``on_before_optimizer_step``, where gradients are accumulated and unscaled, their values
    and gradients are copied into a ring buffer of the last ``buffer_size`` steps on the
    parameters' device, in one batched copy per kind and without synchronising with the host.
    The buffers hold ``2 * buffer_size * K * 4`` bytes for ``K`` sampled elements: at most
    128 MiB at the defaults (``K`` = 65,536), whatever the model's size; 49 MiB for a
    12M-parameter transformer with 98 tensors.

    **What it shows.** Every ``analyze_every_n_steps`` optimizer steps (at global steps
    ``n - 1``, ``2n - 1``..., decided from ``trainer.global_step``), once the buffer holds more
    than ``max(lags)`` steps, the ACF of every sampled element is computed on the device
    (:func:`learnscope.autocorrelation.summarize`; means removed, never rescaled, so
    anti-correlation keeps its sign), and only the summary comes to the host: per kind
    (``params``, ``grads``) and group the mean ACF at every lag up to ``max(lags)``, the median
    and quartiles of the lag-1 autocorrelation, and tau when it can be trusted. Each writer
    shows it as its dashboard can (``write_autocorrelation``): TensorBoard as scalars
    ``autocorrelation/{kind}/{group}/lag_{k}`` (and ``tau``, ``rho1_median``, ``rho1_q25``,
    ``rho1_q75``), Custom Scalars charts and an ACF image per kind; wandb as the same scalars
    and a line-series chart per kind. Other loggers (CSV, MLflow...) get the scalars.

    Only the process of global rank zero records and analyses (parameters and reduced
    gradients are the same on every rank, and nothing here is a collective); other ranks
    allocate nothing.

    **Resuming.** The seed and the sampled slices are saved in checkpoints, so a resumed run
    follows the same elements; the recorded history itself is not saved and fills up again.

    Args:
        buffer_size: How many of the last optimizer steps the history holds (T).
        elements_per_tensor: Length of the slice sampled from each parameter tensor.
        max_elements: Cap on the number of sampled elements over all tensors (K).
        analyze_every_n_steps: Analyse every this many optimizer steps.
        analyze_grads: Analyse gradients as well as parameters.
        group_depth: How many components of a parameter's module path name its group
            (``encoder.layers.0.weight`` is in ``encoder`` at 1, ``encoder.layers`` at 2).
        lags: The lags charted over steps; each below ``buffer_size``. The mean ACF is
            computed up to the largest.
        seed: Seed for choosing the sampled slices.

    Raises:
        ValueError: On a non-positive size, an empty ``lags``, or a lag that is negative or
            not below ``buffer_size``. A model without trainable parameters fails at ``fit``
            start, before the first step.

    Example:
        >>> callback = ModelAutocorrelation(analyze_every_n_steps=50, lags=(1, 2, 5))
        >>> callback.lags, callback.buffer_size
        ((1, 2, 5), 256)
    """

    def __init__(
        self,
        buffer_size: int = 256,
        elements_per_tensor: int = 256,
        max_elements: int = 65536,
        analyze_every_n_steps: int = 100,
        analyze_grads: bool = True,
        group_depth: int = 1,
        lags: Sequence[int] = (1, 2, 5, 10, 20, 50),
        seed: int = 0,
    ) -> None:
        super().__init__()
        for name, value in (
            ("buffer_size", buffer_size),
            ("elements_per_tensor", elements_per_tensor),
            ("max_elements", max_elements),
            ("analyze_every_n_steps", analyze_every_n_steps),
            ("group_depth", group_depth),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"ModelAutocorrelation: {name} must be a positive int, got {value!r}"
                )
        lags = tuple(lags)
        if not lags or any(isinstance(k, bool) or not isinstance(k, int) for k in lags):
            raise ValueError(
                f"ModelAutocorrelation: lags must be a non-empty list of ints, got {lags}"
            )
        if min(lags) < 0 or max(lags) >= buffer_size:
            raise ValueError(
                f"ModelAutocorrelation: lags must be in 0..{buffer_size - 1} "
                f"(below buffer_size={buffer_size}), got {lags}"
            )
        self.buffer_size = buffer_size
        self.elements_per_tensor = elements_per_tensor
        self.max_elements = max_elements
        self.analyze_every_n_steps = analyze_every_n_steps
        self.analyze_grads = analyze_grads
        self.group_depth = group_depth
        self.lags = tuple(sorted(set(lags)))
        self.seed = seed
        self.history: SampledParameterHistory | None = None
        self._saved_state: dict[str, Any] | None = None  # loaded before the history exists
        self._charts: Writers | None = None  # writers that show autocorrelation
        self._scalars_only: Writers | None = None  # the others get the scalars
        self._last_analysis: int | None = None

    @override
    def state_dict(self) -> dict[str, Any]:
        """The seed and the sampled slices (not the recorded values)."""
        if self.history is not None:
            return {"history": self.history.state_dict()}
        return {"history": self._saved_state} if self._saved_state is not None else {}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Follow the slices of a checkpoint, now or as soon as the history exists."""
        saved = state_dict.get("history")
        if saved is None:
            return
        self._saved_state = dict(saved)
        if self.history is not None:
            self._adopt_saved_slices()

    @override
    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        """Choose the sampled slices and allocate the history on the parameters' device."""
        self._last_analysis = None
        if not trainer.is_global_zero:
            return
        self.history = SampledParameterHistory(
            pl_module.named_parameters(),
            capacity=self.buffer_size,
            elements_per_tensor=self.elements_per_tensor,
            max_elements=self.max_elements,
            group_depth=self.group_depth,
            seed=self.seed,
        )
        if self._saved_state is not None:
            self._adopt_saved_slices()

    @override
    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        """Record the sampled values and gradients; analyse when the schedule says so."""
        if self.history is None or not self.is_on(_PART):
            return
        with self.guard(_PART):
            self.history.record()
            step = trainer.global_step
            if self._due(step):
                self._last_analysis = step
                self._analyse(trainer, step)

    @override
    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        """Free the buffers (keeping the slices for checkpoints) and flush the writers."""
        self._release()
        for writers in (self._charts, self._scalars_only):
            if writers is not None:
                writers.flush()

    @override
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Free the buffers, keeping the slices for checkpoints."""
        self._release()

    def _release(self) -> None:
        if self.history is not None:
            self._saved_state = self.history.state_dict()
            self.history = None

    def _due(self, step: int) -> bool:
        assert self.history is not None
        return (
            (step + 1) % self.analyze_every_n_steps == 0
            and step != self._last_analysis
            and self.history.num_steps > max(self.lags)
        )

    def _analyse(self, trainer: Any, step: int) -> None:
        """Summarise on the device, move the summary to the host, hand it to every writer."""
        assert self.history is not None
        kinds = ("params", "grads") if self.analyze_grads else ("params",)
        summary = summarize(
            {kind: self.history.history(kind) for kind in kinds},
            self.history.group_index,
            self.history.group_names,
            step=step,
            lags=self.lags,
        )
        self._write(trainer, summary)

    def _write(self, trainer: Any, summary: AutocorrelationSummary) -> None:
        if self._charts is None or self._scalars_only is None:
            active = self.writers(trainer).active
            self._charts = Writers([w for w in active if shows(w, _SHOWS)])
            self._scalars_only = Writers([w for w in active if not shows(w, _SHOWS)])
            if not active:
                log.warning(
                    "learnscope: ModelAutocorrelation has no logger to show autocorrelation; "
                    "add a TensorBoardLogger or WandbLogger"
                )
            for writer in self._scalars_only.active:
                log.warning(
                    "learnscope: %s cannot show autocorrelation charts; it gets the "
                    "autocorrelation/... scalars only",
                    writer.describe(),
                )
        self._charts.write_autocorrelation(summary)
        if self._scalars_only.active:
            self._scalars_only.write_scalars(summary.to_scalars(), summary.step)

    def _adopt_saved_slices(self) -> None:
        assert self.history is not None and self._saved_state is not None
        try:
            self.history.load_state_dict(self._saved_state)
        except ValueError as error:
            log.warning(
                "learnscope: ModelAutocorrelation cannot follow the elements of the checkpoint "
                "(%s); it samples new ones with seed %d",
                error,
                self.history.seed,
            )
