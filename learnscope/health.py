"""Training health: gradient statistics, the findings they lead to, and how often to warn.

Everything here runs in a plain PyTorch loop; :class:`~learnscope.lightning_glue.
training_helper.TrainingHelper` calls it from Lightning.

* :func:`gradient_statistics` measures every trainable parameter in a few fused calls
  (``torch._foreach_norm`` over the gradients and over the parameters) and brings the norms, and
  the loss when given, to the host in one transfer. Only when a gradient norm is not finite does a
  second transfer count the NaN and infinite values of the parameters concerned.
* :func:`unused_parameter_findings`, :func:`gradient_findings`, :func:`head_findings` and
  :func:`collapse_findings` turn measurements into :class:`~learnscope.records.Finding` records;
  :func:`health_scalars` into per-group norms for the dashboards.
* :class:`FindingLog` keeps one finding per (code, subject) for the findings table and says when
  a finding is due a warning: at most once per ``warn_every_n_steps``, and unused parameters once.
* :class:`NonFiniteOutputTracer` names the first module whose output is not finite, with forward
  hooks armed for one step only (what ``torch.autograd.detect_anomaly`` does, without its cost on
  healthy steps).
* :class:`CoordinateRangeCheck` is an input check: it says when every coordinate lies in
  ``[0, 1]``, the sign of fractional coordinates passed where Cartesian ones were meant.

Tiny gradients are judged relative to the other parameters, not against an absolute number: a
parameter whose gradient per element (root mean square) is below ``small_grad_threshold`` times
the median over the parameters is reported. An absolute threshold would fire on every model that
has converged.

Example:
    >>> import torch
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    >>> model(torch.randn(8, 4)).sum().backward()
    >>> stats = gradient_statistics(model.named_parameters())
    >>> gradient_findings(stats, step=0)
    []
    >>> sorted(health_scalars(stats))[:2]
    ['health/grad_norm/0', 'health/grad_norm/1']
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from learnscope.collapse import judge_collapse
from learnscope.records import Finding

__all__ = [
    "CoordinateRangeCheck",
    "FindingLog",
    "GradientStatistics",
    "NonFiniteOutputTracer",
    "collapse_findings",
    "gradient_findings",
    "gradient_statistics",
    "group_name",
    "head_findings",
    "health_scalars",
    "owner_module",
    "unused_parameter_findings",
    "unused_parameter_names",
    "weight_rms",
]

_MAX_NAMES = 8  # parameter names spelled out in one message


@dataclass(frozen=True, eq=False)
class GradientStatistics:
    """Norms of every trainable parameter and of its gradient, on the host.

    Args:
        names: Parameter names, as ``named_parameters`` gives them.
        numels: Number of elements of each parameter.
        ndims: Number of dimensions of each parameter (weights have 2 or more).
        has_grad: Whether the parameter had a gradient at all.
        grad_norms: L2 norm of each gradient; NaN where there was none.
        weight_norms: L2 norm of each parameter.
        nonfinite_counts: For parameters whose gradient holds NaN or infinite values, how many.
        loss: The loss, when one was given.

    Example:
        >>> import torch
        >>> layer = torch.nn.Linear(2, 1)
        >>> layer(torch.ones(1, 2)).sum().backward()
        >>> stats = gradient_statistics(layer.named_parameters())
        >>> stats.names, stats.grad_norms.round(3).tolist()
        (('weight', 'bias'), [1.414, 1.0])
    """

    names: tuple[str, ...]
    numels: np.ndarray
    ndims: np.ndarray
    has_grad: np.ndarray
    grad_norms: np.ndarray
    weight_norms: np.ndarray
    nonfinite_counts: Mapping[str, int]
    loss: float | None = None

    @property
    def grad_rms(self) -> np.ndarray:
        """Root mean square of each gradient per element (NaN where there was none).

        Example:
            >>> import torch
            >>> layer = torch.nn.Linear(2, 1)
            >>> layer(torch.ones(1, 2)).sum().backward()
            >>> gradient_statistics(layer.named_parameters()).grad_rms.round(6).tolist()
            [1.0, 1.0]
        """
        return self.grad_norms / np.sqrt(np.maximum(self.numels, 1))


def gradient_statistics(
    named_parameters: Iterable[tuple[str, Tensor]], loss: Tensor | None = None
) -> GradientStatistics:
    """Measure all trainable parameters and their gradients, with one transfer to the host.

    Parameters that do not require a gradient are left out. The norms are computed in float32
    whatever the parameters' dtype, with ``torch._foreach_norm`` (one fused call for the
    gradients, one for the parameters), stacked with the loss and copied to the host at once.
    Only when a gradient norm is not finite are its NaN and infinite values counted (a second
    transfer, on unhealthy steps only); a norm that overflowed from finite values counts as
    finite.

    Args:
        named_parameters: ``(name, parameter)`` pairs, such as ``model.named_parameters()``.
        loss: Optional loss of the step (any shape; its mean is reported).

    Returns:
        The statistics, on the host.

    Raises:
        ValueError: No parameter requires a gradient.

    Example:
        >>> import torch
        >>> layer = torch.nn.Linear(3, 1)
        >>> loss = layer(torch.randn(4, 3)).pow(2).mean()
        >>> loss.backward()
        >>> layer.weight.grad[0, 0] = float("nan")
        >>> stats = gradient_statistics(layer.named_parameters(), loss)
        >>> dict(stats.nonfinite_counts), stats.loss == loss.item()
        ({'weight': 1}, True)
    """
    named = [(name, p) for name, p in named_parameters if p.requires_grad]
    if not named:
        raise ValueError("no parameter requires a gradient")
    device = named[0][1].device
    with torch.no_grad():
        weights = [p.detach() for _, p in named]
        graded = [i for i, (_, p) in enumerate(named) if p.grad is not None]
        grads = [_dense(named[i][1].grad) for i in graded]
        parts = list(torch._foreach_norm(weights, 2, dtype=torch.float32))
        if grads:
            parts += torch._foreach_norm(grads, 2, dtype=torch.float32)
        if loss is not None:
            parts.append(loss.detach().float().mean())
        host = torch.stack([t.to(device) for t in parts]).cpu().numpy().astype(np.float64)
    count = len(named)
    grad_norms = np.full(count, math.nan)
    grad_norms[graded] = host[count : count + len(graded)]
    has_grad = np.zeros(count, dtype=bool)
    has_grad[graded] = True
    suspects = [i for i in graded if not math.isfinite(grad_norms[i])]
    return GradientStatistics(
        names=tuple(name for name, _ in named),
        numels=np.array([p.numel() for _, p in named], dtype=np.int64),
        ndims=np.array([p.ndim for _, p in named], dtype=np.int64),
        has_grad=has_grad,
        grad_norms=grad_norms,
        weight_norms=host[:count],
        nonfinite_counts=_nonfinite_counts(named, suspects, device),
        loss=float(host[-1]) if loss is not None else None,
    )


def _dense(grad: Tensor) -> Tensor:
    """The stored values of a sparse gradient, or the gradient itself."""
    return grad.coalesce().values() if grad.is_sparse else grad


def _nonfinite_counts(
    named: Sequence[tuple[str, Tensor]], suspects: Sequence[int], device: torch.device
) -> dict[str, int]:
    """Count NaN and infinite gradient values of the ``suspects`` (one transfer, or none)."""
    if not suspects:
        return {}
    with torch.no_grad():
        counts = [(~torch.isfinite(_dense(named[i][1].grad))).sum().to(device) for i in suspects]
        values = torch.stack(counts).tolist()
    return {named[i][0]: int(n) for i, n in zip(suspects, values, strict=True) if n > 0}


def owner_module(parameter_name: str) -> str:
    """The dotted name of the module that owns a parameter (``""`` for the root module).

    Example:
        >>> owner_module("encoder.0.weight"), owner_module("scale")
        ('encoder.0', '')
    """
    return parameter_name.rpartition(".")[0]


def group_name(parameter_name: str, depth: int = 1) -> str:
    """The module prefix of ``depth`` components that groups a parameter for per-group norms.

    A parameter of the root module is in the group ``"root"``.

    Example:
        >>> group_name("encoder.layers.0.weight"), group_name("encoder.layers.0.weight", 2)
        ('encoder', 'encoder.layers')
        >>> group_name("scale")
        'root'
    """
    parts = owner_module(parameter_name).split(".")[:depth]
    return ".".join(parts) or "root"


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


def unused_parameter_names(named_parameters: Iterable[tuple[str, Tensor]]) -> list[str]:
    """Names of the parameters that require a gradient but have none (after a backward).

    Example:
        >>> import torch
        >>> layers = {"used": torch.nn.Linear(2, 1), "spare": torch.nn.Linear(2, 1)}
        >>> model = torch.nn.ModuleDict(layers)
        >>> model["used"](torch.ones(1, 2)).sum().backward()
        >>> unused_parameter_names(model.named_parameters())
        ['spare.weight', 'spare.bias']
    """
    return [name for name, p in named_parameters if p.requires_grad and p.grad is None]


def unused_parameter_findings(
    named_parameters: Iterable[tuple[str, Tensor]], step: int
) -> list[Finding]:
    """Report parameters that require a gradient but got none, one finding per module.

    Call it after the first backward, before the gradients are cleared.

    Args:
        named_parameters: ``(name, parameter)`` pairs, such as ``model.named_parameters()``.
        step: The training step.

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
    unused = unused_parameter_names(named_parameters)
    return [
        Finding(
            "unused-parameter",
            _subject(module),
            f"{_name_list(names)} got no gradient in the first backward: the module is not used "
            "in forward, or its output does not reach the loss (remove it, or freeze it with "
            "requires_grad_(False))",
            step,
        )
        for module, names in _by_owner(unused).items()
    ]


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


def gradient_findings(
    stats: GradientStatistics,
    step: int,
    *,
    small_grad_threshold: float = 1e-3,
    check_nonfinite: bool = True,
    check_small: bool = True,
) -> list[Finding]:
    """Report non-finite, zero and tiny gradients, naming the parameters.

    * ``non-finite-gradient``: one finding for the step, about the module of the first parameter
      concerned, naming every parameter with the count of its NaN and infinite values. A
      non-finite loss is named in the same message.
    * ``zero-gradient``: gradients that are exactly zero, one finding per module.
    * ``tiny-gradient``: gradients whose root mean square per element is below
      ``small_grad_threshold`` times the median over all parameters with a finite nonzero
      gradient, one finding per module.

    Args:
        stats: From :func:`gradient_statistics`.
        step: The training step.
        small_grad_threshold: Ratio to the median gradient per element below which a gradient
            is tiny.
        check_nonfinite: Whether to report non-finite gradients (off under float16 mixed
            precision, whose gradient scaler skips such steps by design).
        check_small: Whether to report zero and tiny gradients (off on the first step, where a
            zero-initialised layer, as in ReZero or adaLN-zero, gives zero gradients upstream).

    Returns:
        The findings, in the order non-finite, zero, tiny.

    Example:
        >>> import torch
        >>> model = torch.nn.ModuleDict({"a": torch.nn.Linear(3, 3), "b": torch.nn.Linear(3, 3)})
        >>> (model["a"](torch.randn(4, 3)) + 0 * model["b"](torch.randn(4, 3))).sum().backward()
        >>> stats = gradient_statistics(model.named_parameters())
        >>> [(f.code, f.subject) for f in gradient_findings(stats, step=5)]
        [('zero-gradient', 'b')]
    """
    findings = []
    if check_nonfinite and (stats.nonfinite_counts or _bad_loss(stats.loss)):
        findings.append(_nonfinite_finding(stats, step))
    if not check_small:
        return findings
    finite = stats.has_grad & np.isfinite(stats.grad_norms)
    zero = [
        n for n, ok, g in zip(stats.names, finite, stats.grad_norms, strict=True) if ok and g == 0
    ]
    for module, names in _by_owner(zero).items():
        findings.append(
            Finding(
                "zero-gradient",
                _subject(module),
                f"{_name_list(names)} got a gradient of exactly zero: the output of this part "
                "does not change the loss (multiplied by zero, detached, or dead activations)",
                step,
            )
        )
    rms = stats.grad_rms
    positive = finite & (stats.grad_norms > 0)
    if positive.sum() >= 2:
        median = float(np.median(rms[positive]))
        limit = small_grad_threshold * median
        tiny = [n for n, ok, r in zip(stats.names, positive, rms, strict=True) if ok and r < limit]
        for module, names in _by_owner(tiny).items():
            worst = min(rms[stats.names.index(n)] for n in names)
            findings.append(
                Finding(
                    "tiny-gradient",
                    _subject(module),
                    f"{_name_list(names)} got gradients of {worst:.2g} per element (root mean "
                    f"square), under {small_grad_threshold:g} x the median over parameters "
                    f"({median:.2g}): vanishing gradients or a branch scaled down",
                    step,
                )
            )
    return findings


def _bad_loss(loss: float | None) -> bool:
    return loss is not None and not math.isfinite(loss)


def _nonfinite_finding(stats: GradientStatistics, step: int) -> Finding:
    counts = stats.nonfinite_counts
    names = [f"{name} ({n} values)" for name, n in counts.items()]
    loss = f"the loss is {stats.loss}; " if _bad_loss(stats.loss) else ""
    first = next(iter(counts), None)
    if first is None:
        return Finding(
            "non-finite-loss",
            "loss",
            f"{loss}no gradient is non-finite yet: check the data and the loss function",
            step,
            severity="error",
        )
    return Finding(
        "non-finite-gradient",
        _subject(owner_module(first)),
        f"{loss}non-finite gradients in {len(counts)} of {len(stats.names)} parameters: "
        f"{_name_list(names)}; the next step names the first module whose output is not finite",
        step,
        severity="error",
    )


def health_scalars(stats: GradientStatistics, group_depth: int = 1) -> dict[str, float]:
    """Per-group gradient and weight norms, for the dashboards.

    Keys ``health/grad_norm/<group>`` and ``health/weight_norm/<group>`` (the L2 norm over every
    parameter of the group, see :func:`group_name`), ``health/grad_norm/total``, and
    ``health/loss`` when the statistics hold a loss. Parameters without a gradient count as zero.

    Args:
        stats: From :func:`gradient_statistics`.
        group_depth: Module-name components that make a group.

    Returns:
        The scalars (a group whose gradient norm is not finite reports NaN or infinity).

    Example:
        >>> import torch
        >>> layer = torch.nn.Linear(2, 1)
        >>> layer(torch.ones(1, 2)).sum().backward()
        >>> scalars = health_scalars(gradient_statistics(layer.named_parameters()))
        >>> round(scalars["health/grad_norm/total"], 3)
        1.732
    """
    grad_squares: dict[str, float] = {}
    weight_squares: dict[str, float] = {}
    grads = np.where(stats.has_grad, stats.grad_norms, 0.0) ** 2
    for name, grad, weight in zip(stats.names, grads, stats.weight_norms**2, strict=True):
        group = group_name(name, group_depth)
        grad_squares[group] = grad_squares.get(group, 0.0) + grad
        weight_squares[group] = weight_squares.get(group, 0.0) + weight
    scalars = {f"health/grad_norm/{g}": math.sqrt(v) for g, v in grad_squares.items()}
    scalars.update({f"health/weight_norm/{g}": math.sqrt(v) for g, v in weight_squares.items()})
    scalars["health/grad_norm/total"] = math.sqrt(float(grads.sum()))
    if stats.loss is not None:
        scalars["health/loss"] = stats.loss
    return scalars


def weight_rms(stats: GradientStatistics, module: str) -> float:
    """Root mean square per element of the weights (parameters of 2 or more dimensions).

    Biases and normalisation scales are left out, as they start at zero or one whatever the
    layer's size; a module with no weight matrix falls back to all its parameters.

    Args:
        stats: From :func:`gradient_statistics`.
        module: Dotted module name; ``""`` for the whole model.

    Returns:
        The root mean square, or NaN when the module has no trainable parameter.

    Example:
        >>> import torch
        >>> layer = torch.nn.Linear(2, 2)
        >>> with torch.no_grad():
        ...     _ = layer.weight.fill_(3.0)
        >>> weight_rms(gradient_statistics(layer.named_parameters()), "")
        3.0
    """
    inside = np.array([_within(n, module) for n in stats.names], dtype=bool)
    chosen = inside & (stats.ndims >= 2)
    if not chosen.any():
        chosen = inside
    if not chosen.any():
        return math.nan
    squares = float((stats.weight_norms[chosen] ** 2).sum())
    return math.sqrt(squares / max(int(stats.numels[chosen].sum()), 1))


def head_findings(
    stats: GradientStatistics,
    encoder: str,
    heads: Sequence[str],
    step: int,
    *,
    max_ratio: float = 100.0,
) -> tuple[list[Finding], dict[str, float]]:
    """Compare the weights of each output head with the encoder's (root mean square per element).

    A head whose weights are more than ``max_ratio`` times the encoder's dominates it: its
    outputs swamp the encoder's features and the encoder's gradients are scaled up with it.

    Args:
        stats: From :func:`gradient_statistics`.
        encoder: Dotted name of the encoder module.
        heads: Dotted names of the head modules.
        step: The training step.
        max_ratio: Largest healthy ratio of head to encoder weight RMS.

    Returns:
        ``head-dominates-encoder`` findings, and the ratios under
        ``health/head_weight_ratio/<head>``.

    Example:
        >>> import torch
        >>> layers = {"encoder": torch.nn.Linear(4, 4), "head": torch.nn.Linear(4, 1)}
        >>> model = torch.nn.ModuleDict(layers)
        >>> with torch.no_grad():
        ...     _ = model["head"].weight.mul_(1000)
        >>> findings, ratios = head_findings(
        ...     gradient_statistics(model.named_parameters()), "encoder", ["head"], step=0
        ... )
        >>> [(f.code, f.subject) for f in findings]
        [('head-dominates-encoder', 'head')]
    """
    base = weight_rms(stats, encoder)
    findings, ratios = [], {}
    for head in heads:
        ratio = weight_rms(stats, head) / base if base > 0 else math.nan
        ratios[f"health/head_weight_ratio/{head}"] = ratio
        if ratio > max_ratio:
            findings.append(
                Finding(
                    "head-dominates-encoder",
                    head,
                    f"the weights of {head!r} are {ratio:.3g} x larger than those of {encoder!r} "
                    f"(root mean square per element; limit {max_ratio:g}): check the head's "
                    "initialisation or scale its output down",
                    step,
                )
            )
    return findings, ratios


_GRAPH_VERDICT_KEYS = ("mad", "rayleigh_quotient")


def collapse_findings(
    metrics: Mapping[str, float],
    module: str,
    step: int,
    *,
    num_rows: int,
    dim: int,
    **thresholds: float,
) -> list[Finding]:
    """Turn collapse metrics into an ``embedding-collapse`` and an ``oversmoothing`` finding.

    Args:
        metrics: From :func:`learnscope.collapse.collapse_metrics`.
        module: The embedding module the rows came from (the findings' subject).
        step: The training step.
        num_rows: Rows the metrics were computed on.
        dim: Embedding dimension.
        **thresholds: Passed to :func:`learnscope.collapse.judge_collapse`.

    Returns:
        At most one finding per code, each message joining the verdicts that fired.

    Example:
        >>> import torch
        >>> from learnscope.collapse import collapse_metrics
        >>> same = torch.ones(64, 8) + 1e-6 * torch.randn(64, 8)
        >>> findings = collapse_findings(collapse_metrics(same), "encoder", 3, num_rows=64, dim=8)
        >>> [(f.code, f.subject) for f in findings]
        [('embedding-collapse', 'encoder')]
    """
    verdicts = judge_collapse(metrics, num_rows=num_rows, dim=dim, **thresholds)
    smooth = [v for v in verdicts if v.split()[0] in _GRAPH_VERDICT_KEYS]
    collapse = [v for v in verdicts if v.split()[0] not in _GRAPH_VERDICT_KEYS]
    findings = []
    for code, found in (("embedding-collapse", collapse), ("oversmoothing", smooth)):
        if found:
            text = "; ".join(found)
            findings.append(
                Finding(code, module, f"{text} (over {num_rows} rows of dimension {dim})", step)
            )
    return findings


class FindingLog:
    """The findings of a run, one per (code, subject), and when each is due a warning.

    A finding is due when its (code, subject) was never warned about, or was last warned about
    at least ``warn_every_n_steps`` steps before; codes in ``once_codes`` are warned about once
    per run. The table (:attr:`findings`) keeps the latest warned form of each. The state goes
    into checkpoints with :meth:`state_dict`.

    Args:
        warn_every_n_steps: Fewest steps between two warnings about the same thing.
        once_codes: Codes warned about once only.

    Raises:
        ValueError: ``warn_every_n_steps`` is below 1.

    Example:
        >>> log = FindingLog(warn_every_n_steps=100)
        >>> [log.add(Finding("zero-gradient", "head", "zero", step)) for step in (0, 50, 100)]
        [True, False, True]
        >>> [f.step for f in log.findings]
        [100]
    """

    def __init__(
        self, warn_every_n_steps: int = 1000, once_codes: Sequence[str] = ("unused-parameter",)
    ) -> None:
        if warn_every_n_steps < 1:
            raise ValueError(f"warn_every_n_steps must be at least 1, got {warn_every_n_steps}")
        self.warn_every_n_steps = warn_every_n_steps
        self.once_codes = tuple(once_codes)
        self._table: dict[tuple[str, str], Finding] = {}
        self._last_warned: dict[tuple[str, str], int] = {}

    @property
    def findings(self) -> list[Finding]:
        """The table: one finding per (code, subject), in the order they first appeared.

        Example:
            >>> FindingLog().findings
            []
        """
        return list(self._table.values())

    def add(self, finding: Finding) -> bool:
        """Record ``finding`` when it is due; return whether it is (whether to warn now).

        Example:
            >>> log = FindingLog()
            >>> finding = Finding("unused-parameter", "spare", "no gradient", 0)
            >>> log.add(finding), log.add(finding)
            (True, False)
        """
        key = (finding.code, finding.subject)
        last = self._last_warned.get(key)
        due = last is None or (
            finding.code not in self.once_codes and finding.step - last >= self.warn_every_n_steps
        )
        if due:
            self._table[key] = finding
            self._last_warned[key] = finding.step
        return due

    def state_dict(self) -> dict[str, Any]:
        """The table and the last warning steps, as plain Python values.

        Example:
            >>> log = FindingLog()
            >>> _ = log.add(Finding("zero-gradient", "head", "zero", 7))
            >>> restored = FindingLog()
            >>> restored.load_state_dict(log.state_dict())
            >>> restored.findings == log.findings
            True
        """
        return {
            "findings": [asdict(f) for f in self._table.values()],
            "last_warned": [[c, s, step] for (c, s), step in self._last_warned.items()],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned.

        Example:
            >>> log = FindingLog()
            >>> log.load_state_dict({"findings": [], "last_warned": []})
            >>> log.findings
            []
        """
        table = [Finding(**f) for f in state.get("findings", [])]
        self._table = {(f.code, f.subject): f for f in table}
        self._last_warned = {(c, s): int(step) for c, s, step in state.get("last_warned", [])}


class NonFiniteOutputTracer:
    """Name the first module whose output is not finite, with hooks armed for one step.

    :meth:`arm` puts a forward hook on every module; each hook queues, on the device, whether
    the module's floating-point inputs and outputs hold a NaN or an infinity. :meth:`disarm`
    removes the hooks and brings the flags to the host in one transfer. Hooks fire when a module
    finishes, so inner modules come before the module that calls them. The module named is the
    first whose output is not finite; when its inputs were finite it produced the values itself
    (and its own non-finite parameters, if any, are counted with one more transfer), otherwise
    they came from the data or from code outside any module.

    Args:
        model: The model to trace.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
        >>> with torch.no_grad():
        ...     _ = model[1].weight.fill_(float("nan"))
        >>> tracer = NonFiniteOutputTracer(model)
        >>> tracer.arm()
        >>> _ = model(torch.ones(1, 2))
        >>> module, message = tracer.disarm()
        >>> module
        '1'
        >>> message
        "module '1' gave a non-finite output from finite inputs; 1 of its parameters are not finite"
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._flags: list[tuple[str, Tensor, Tensor]] = []

    @property
    def armed(self) -> bool:
        """Whether the hooks are in place.

        Example:
            >>> import torch
            >>> NonFiniteOutputTracer(torch.nn.Linear(1, 1)).armed
            False
        """
        return bool(self._handles)

    def arm(self) -> None:
        """Hook every module until :meth:`disarm` (a no-op when already armed).

        Example:
            >>> import torch
            >>> tracer = NonFiniteOutputTracer(torch.nn.Linear(1, 1))
            >>> tracer.arm()
            >>> tracer.armed
            True
        """
        if self.armed:
            return
        self._flags = []
        for name, module in self.model.named_modules():
            label = name or type(module).__name__
            self._handles.append(module.register_forward_hook(self._hook_for(label)))

    def _hook_for(self, label: str) -> Callable[[nn.Module, Any, Any], None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            outputs = _floating_tensors(output)
            if outputs:
                with torch.no_grad():
                    self._flags.append(
                        (label, _any_nonfinite(_floating_tensors(args)), _any_nonfinite(outputs))
                    )

        return hook

    def disarm(self) -> tuple[str, str] | None:
        """Remove the hooks; return the first module with a non-finite output, and a message.

        Returns:
            ``(module name, message)``, or ``None`` when every output was finite.

        Example:
            >>> import torch
            >>> tracer = NonFiniteOutputTracer(torch.nn.Linear(1, 1))
            >>> tracer.arm()
            >>> _ = tracer.model(torch.ones(1, 1))
            >>> tracer.disarm() is None
            True
        """
        for handle in self._handles:
            handle.remove()
        self._handles = []
        flags, self._flags = self._flags, []
        if not flags:
            return None
        device = flags[0][1].device
        with torch.no_grad():
            values = torch.stack([t.to(device) for _, i, o in flags for t in (i, o)]).tolist()
        for index, (label, _, _) in enumerate(flags):
            bad_in, bad_out = values[2 * index], values[2 * index + 1]
            if bad_out:
                return label, self._describe(label, bool(bad_in))

        return None

    def _describe(self, label: str, bad_in: bool) -> str:
        if bad_in:
            return (
                f"module {label!r} is the first whose output is not finite, and its inputs were "
                "already not finite: check the batch, or code that runs outside any module"
            )
        module = dict(self.model.named_modules()).get(label, self.model)
        params = list(module.parameters(recurse=False))
        with torch.no_grad():
            bad = int(torch.stack([_any_nonfinite([p]) for p in params]).sum()) if params else 0
        tail = f"; {bad} of its parameters are not finite" if bad else ""
        return f"module {label!r} gave a non-finite output from finite inputs{tail}"


def _floating_tensors(value: Any) -> list[Tensor]:
    """The floating-point tensors in a (nested) output: tensor, tuple, list or dict."""
    if isinstance(value, Tensor):
        return [value] if value.is_floating_point() or value.is_complex() else []
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _floating_tensors(item)]
    if isinstance(value, Mapping):
        return [t for item in value.values() for t in _floating_tensors(item)]
    return []


def _any_nonfinite(tensors: Sequence[Tensor]) -> Tensor:
    """A 0-d bool tensor, on the device of the first tensor: any NaN or infinity in them."""
    if not tensors:
        return torch.zeros((), dtype=torch.bool)
    device = tensors[0].device
    flags = [(~torch.isfinite(t.detach())).any().to(device) for t in tensors]
    return flags[0] if len(flags) == 1 else torch.stack(flags).any()


class CoordinateRangeCheck:
    """Input check: warn when every coordinate lies in [0, 1] (fractional, not Cartesian).

    Crystal structures come with fractional coordinates (in units of the lattice vectors, in
    ``[0, 1)``) and Cartesian ones (in Å). A model that expects Cartesian positions and gets
    fractional ones trains on squeezed structures without any error.

    The coordinates are found in the batch by ``key``:

    * a mapping (``dict``): ``batch[key]``;
    * an object with an attribute ``key``, such as a PyTorch Geometric ``Data`` or ``Batch``;
    * a tuple or list: with an integer ``key``, that element; with a string ``key``, the first
      element that is a mapping holding it or has it as an attribute.

    On a call it brings the minimum and maximum to the host (one transfer):
    :class:`~learnscope.lightning_glue.training_helper.TrainingHelper` runs input checks on
    check steps only.

    Args:
        key: Where the coordinates are (see above).

    Example:
        >>> import torch
        >>> check = CoordinateRangeCheck()
        >>> check({"pos": torch.rand(10, 3)})
        "every coordinate in 'pos' lies in [0, 1] ..."
        >>> check({"pos": 5 * torch.randn(10, 3)}) is None
        True
        >>> CoordinateRangeCheck(key=0)((torch.rand(4, 3), "labels")).startswith("every")
        True
    """

    def __init__(self, key: str | int = "pos") -> None:
        self.key = key

    @property
    def subject(self) -> str:
        """What findings of this check concern: the key.

        Example:
            >>> CoordinateRangeCheck("frac_coords").subject
            'frac_coords'
        """
        return str(self.key)

    def __call__(self, batch: Any) -> str | None:
        """Return a message when every coordinate lies in [0, 1], else ``None``.

        Raises:
            KeyError: The batch holds no coordinates under ``key``.

        Example:
            >>> import torch
            >>> CoordinateRangeCheck()({"pos": torch.tensor([[0.0, 9.5, 1.2]])}) is None
            True
        """
        coords = self._find(batch)
        if coords.numel() == 0:
            return None
        low, high = torch.stack([coords.min(), coords.max()]).double().tolist()
        if low < 0 or high > 1:
            return None
        return (
            f"every coordinate in {self.key!r} lies in [0, 1] (from {low:.3g} to {high:.3g}): "
            "these look like fractional coordinates where Cartesian ones were expected; "
            "convert them with the lattice (frac @ lattice)"
        )

    def _find(self, batch: Any) -> Tensor:
        found = _lookup(batch, self.key)
        if found is None and isinstance(batch, (tuple, list)) and isinstance(self.key, str):
            found = next((v for v in map(self._lookup_in, batch) if v is not None), None)
        if found is None:
            raise KeyError(
                f"CoordinateRangeCheck: no coordinates under {self.key!r} in a batch of type "
                f"{type(batch).__name__}"
            )
        return torch.as_tensor(found).detach()

    def _lookup_in(self, item: Any) -> Any:
        return _lookup(item, self.key)


def _lookup(batch: Any, key: str | int) -> Any:
    """``batch[key]`` for mappings and integer keys into sequences, else ``batch.key``."""
    if isinstance(batch, Mapping):
        return batch.get(key)
    if isinstance(key, int):
        return (
            batch[key]
            if isinstance(batch, (tuple, list)) and -len(batch) <= key < len(batch)
            else None
        )
    return getattr(batch, key, None)
