"""Gradient statistics in a few fused calls, one host transfer, and the findings they lead to."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from learnscope.health.finding_log import CheckScope
from learnscope.health.parameters import _by_owner, _name_list, _subject, _within
from learnscope.model.parameter_names import (
    clean_parameter_name,
    common_module,
    group_name,
    owner_module,
)
from learnscope.model.parameter_shards import ParameterShard, parameter_shards
from learnscope.model.ranks import sum_over_ranks, world_size
from learnscope.records import Finding
from learnscope.tags import HEALTH


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
    named_parameters: torch.nn.Module | Iterable[tuple[str, Tensor]] | Iterable[ParameterShard],
    loss: Tensor | None = None,
) -> GradientStatistics:
    """Measure all trainable parameters and their gradients, with one transfer to the host.

    Parameters that do not require a gradient are left out. The norms are computed in float32
    (float64 when a parameter or gradient is float64) whatever the parameters' dtype, with
    ``torch._foreach_norm`` (one fused call for the gradients, one for the parameters), stacked
    with the loss and copied to the host at once.
    Only when a gradient norm is not finite are its NaN and infinite values counted (a second
    transfer, on unhealthy steps only); a norm that overflowed from finite values counts as
    finite.

    **Sharded parameters** (FSDP2's ``DTensor``, FSDP1; see
    :func:`~learnscope.model.parameter_shards.parameter_shards`) are measured by their original
    names and full sizes: each rank takes the sums of squares of the elements it holds, and one
    all-reduce over the default process group adds them up (with whether each parameter has a
    gradient anywhere, and the loss, averaged over the ranks as data parallelism averages the
    gradients), so every rank gets the unsharded model's figures. Every rank must then call
    this, at the same step. FSDP gives a parameter that took no part in the loss a zero
    gradient, not None: under FSDP such parameters are zero gradients, not unused ones.

    Args:
        named_parameters: ``(name, parameter)`` pairs, such as ``model.named_parameters()``,
            the model itself (needed for FSDP1 with ``use_orig_params=True``), or shards.
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
    named = [shard for shard in parameter_shards(named_parameters) if shard.requires_grad]
    if not named:
        raise ValueError("no parameter requires a gradient")
    sharded = any(shard.sharded for shard in named)
    device = named[0].device
    count = len(named)
    with torch.no_grad():
        # Sums of squares of the elements this rank holds (all of them when not sharded),
        # added over the ranks when sharded: one all-reduce of 3 P + 1 numbers, one transfer.
        weights = [shard.elements() for shard in named]
        grads = [shard.elements(grad=True) for shard in named]
        graded = [i for i, grad in enumerate(grads) if grad is not None]
        dense = [_dense(grads[i]) for i in graded]
        wide = any(t.dtype == torch.float64 for t in (*weights, *dense))
        dtype = torch.float64 if wide else torch.float32  # never narrower than a parameter
        weight_norms = _stacked(torch._foreach_norm(weights, 2, dtype=dtype), device)
        grad_norms = torch.zeros(count, dtype=torch.float64, device=device)
        has = torch.zeros(count, dtype=torch.float64, device=device)
        if graded:
            index = torch.tensor(graded, device=device)
            norms = _stacked(torch._foreach_norm(dense, 2, dtype=dtype), device)
            grad_norms.index_copy_(0, index, norms)
            has[index] = 1.0
        mean_loss = has.new_zeros(1)
        if loss is not None:
            mean_loss = loss.detach().float().mean().double().reshape(1).to(device)
            mean_loss = mean_loss / world_size() if sharded else mean_loss
        packed = torch.cat([weight_norms.square(), grad_norms.square(), has, mean_loss])
        host = (sum_over_ranks(packed) if sharded else packed).cpu().numpy()
    has_grad = host[2 * count : 3 * count] > 0
    host_grad_norms = np.where(has_grad, np.sqrt(host[count : 2 * count]), math.nan)
    suspects = [i for i in range(count) if has_grad[i] and not math.isfinite(host_grad_norms[i])]
    return GradientStatistics(
        names=tuple(shard.name for shard in named),
        numels=np.array([shard.numel for shard in named], dtype=np.int64),
        ndims=np.array([shard.ndim for shard in named], dtype=np.int64),
        has_grad=has_grad,
        grad_norms=host_grad_norms,
        weight_norms=np.sqrt(host[:count]),
        nonfinite_counts=_nonfinite_counts(named, suspects, device, sharded=sharded),
        loss=float(host[-1]) if loss is not None else None,
    )


def _stacked(norms: Sequence[Tensor], device: torch.device) -> Tensor:
    """The norms as one float64 tensor on ``device`` (parameters may sit on several devices)."""
    return torch.stack([norm.to(device, torch.float64) for norm in norms])


def _dense(grad: Tensor) -> Tensor:
    """The stored values of a sparse gradient, or the gradient itself."""
    return grad.coalesce().values() if grad.is_sparse else grad


def _nonfinite_counts(
    named: Sequence[ParameterShard],
    suspects: Sequence[int],
    device: torch.device,
    *,
    sharded: bool = False,
) -> dict[str, int]:
    """Count NaN and infinite gradient values of the ``suspects`` (one transfer, or none).

    Sharded, each rank counts its own elements (none when it holds no gradient of a suspect)
    and the counts are summed over every rank.
    """
    if not suspects:
        return {}
    with torch.no_grad():
        counts = []
        for i in suspects:
            grad = named[i].elements(grad=True)
            grad = _dense(grad) if grad is not None else None
            bad = (~torch.isfinite(grad)).sum() if grad is not None else torch.zeros(())
            counts.append(bad.to(device=device, dtype=torch.float64))
        stacked = torch.stack(counts)
        values = (sum_over_ranks(stacked) if sharded else stacked).tolist()
    return {named[i].name: int(n) for i, n in zip(suspects, values, strict=True) if n > 0}


def gradient_findings(
    stats: GradientStatistics,
    step: int,
    *,
    small_grad_threshold: float = 1e-5,
    check_nonfinite: bool = True,
    check_small: bool = True,
) -> list[Finding]:
    """Report non-finite, zero and tiny gradients, naming the parameters.

    * ``non-finite-gradient``: one finding for the step, about the module of the first parameter
      concerned, naming every parameter with the count of its NaN and infinite values. A
      non-finite loss is named in the same message, or alone as ``non-finite-loss``.
    * ``zero-gradient``: gradients that are exactly zero, one finding per module.
    * ``tiny-gradient``: gradients whose root mean square per element is below
      ``small_grad_threshold`` times the median over all parameters with a finite nonzero
      gradient, one finding per module.
    * ``structural-zero-gradient`` (severity ``"info"``): a zero or tiny gradient that the
      model's structure explains, see :func:`structural_zero_names`; it is left out of the two
      findings above.

    Args:
        stats: From :func:`gradient_statistics`.
        step: The training step.
        small_grad_threshold: Ratio to the median gradient per element below which a gradient
            is tiny. The default, 1e-5, leaves room for healthy transformers: with the usual
            initialisation (standard deviation 0.02) attention logits start near zero, and the
            query and key gradients of a tiny BERT sit at 1e-4 to 1e-2 of the median for tens of
            steps.
        check_nonfinite: Whether to report non-finite gradients (off under a loss scaler, whose
            skipped steps are expected); a non-finite loss is reported either way.
        check_small: Whether to report zero and tiny gradients (off on the first step, where a
            zero-initialised layer, as in ReZero or adaLN-zero, gives zero gradients upstream).

    Returns:
        The findings, in the order non-finite, zero, tiny, structurally zero.

    Example:
        >>> import torch
        >>> model = torch.nn.ModuleDict({"a": torch.nn.Linear(3, 3), "b": torch.nn.Linear(3, 3)})
        >>> (model["a"](torch.randn(4, 3)) + 0 * model["b"](torch.randn(4, 3))).sum().backward()
        >>> stats = gradient_statistics(model.named_parameters())
        >>> [(f.code, f.subject) for f in gradient_findings(stats, step=5)]
        [('zero-gradient', 'b')]
    """
    findings = []
    counts = stats.nonfinite_counts if check_nonfinite else {}
    if counts or _bad_loss(stats.loss):
        findings.append(_nonfinite_finding(stats, step, counts, check_nonfinite))
    if not check_small:
        return findings
    finite = stats.has_grad & np.isfinite(stats.grad_norms)
    rms = stats.grad_rms
    zero = finite & (stats.grad_norms == 0)
    positive = finite & (stats.grad_norms > 0)
    median = float(np.median(rms[positive])) if positive.sum() >= 2 else math.nan
    limit = small_grad_threshold * median
    tiny = positive & (rms < limit)  # False throughout when the median is NaN
    structural = structural_zero_names(stats.names, zero | tiny, positive & ~tiny)
    zero_names = [n for n, z in zip(stats.names, zero, strict=True) if z and n not in structural]
    for module, names in _by_owner(zero_names).items():
        findings.append(
            Finding(
                "zero-gradient",
                _subject(module),
                f"{_name_list(names)} got a gradient of exactly zero: the output of this part "
                "does not change the loss (multiplied by zero, detached, or dead activations)",
                step,
            )
        )
    tiny_names = [n for n, t in zip(stats.names, tiny, strict=True) if t and n not in structural]
    for module, names in _by_owner(tiny_names).items():
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
    for module, names in _by_owner(n for n in stats.names if n in structural).items():
        worst = min(rms[stats.names.index(n)] for n in names)
        findings.append(
            Finding(
                "structural-zero-gradient",
                _subject(module),
                f"{_name_list(names)} got gradients of {worst:.2g} per element (root mean "
                "square) while the other parameters of this module got healthy ones: the loss "
                "does not depend on this bias, because what follows removes a constant shift "
                "(a softmax over attention keys, a normalisation such as BatchNorm right "
                "after). Harmless; bias=False would drop the parameter",
                step,
                severity="info",
            )
        )
    return findings


def gradient_scope(
    stats: GradientStatistics,
    *,
    check_nonfinite: bool = True,
    check_small: bool = True,
    heads: Sequence[str] = (),
) -> CheckScope:
    """What :func:`gradient_findings` (and :func:`head_findings` on ``heads``) judged.

    The codes it can give with these switches, about the modules of the parameters measured,
    the loss when it was measured, and the heads compared: a finding of the table they cover
    that this check did not give no longer holds. A non-finite loss is judged apart only when
    it is not said within a ``non-finite-gradient`` finding.

    Args:
        stats: From :func:`gradient_statistics`.
        check_nonfinite: As given to :func:`gradient_findings`.
        check_small: As given to :func:`gradient_findings`.
        heads: The heads compared with :func:`head_findings`.

    Example:
        >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2))
        >>> model(torch.ones(1, 2)).sum().backward()
        >>> scope = gradient_scope(gradient_statistics(model.named_parameters()))
        >>> sorted(scope.codes)[:2], sorted(scope.subjects)
        (['non-finite-gradient', 'structural-zero-gradient'], ['0'])
    """
    codes = {"non-finite-gradient"} if check_nonfinite else set()
    subjects = {_subject(owner_module(name)) for name in stats.names}
    said_with_gradients = check_nonfinite and bool(stats.nonfinite_counts)  # one finding for both
    if stats.loss is not None and not (_bad_loss(stats.loss) and said_with_gradients):
        codes.add("non-finite-loss")
        subjects.add("loss")
    if check_small:
        codes |= {"zero-gradient", "tiny-gradient", "structural-zero-gradient"}
    if heads:
        codes.add("head-dominates-encoder")
        subjects.update(heads)
    return CheckScope.of(codes, subjects)


def _is_bias(name: str) -> bool:
    """Whether a parameter is a bias by name (``bias``, ``in_proj_bias``, ``bias_k`` ...)."""
    return "bias" in name.rpartition(".")[2]


def structural_zero_names(
    names: Sequence[str], small: Sequence[bool] | np.ndarray, healthy: Sequence[bool] | np.ndarray
) -> set[str]:
    """The small gradients that the model's structure explains: biases beside healthy weights.

    A bias adds the same vector to every output of its module. When what follows removes a
    constant shift, the loss does not depend on the bias and its gradient is zero in exact
    arithmetic (tiny in floating point): a softmax over attention scores ignores a constant
    added to every score, which is what the key projection's bias adds; a BatchNorm in training
    mode subtracts the batch mean, which takes a preceding bias with it. Vanishing gradients, or
    a branch scaled down, make the weights and the bias of a module small together. So a bias
    (a parameter whose own name contains ``bias``) with a zero or tiny gradient is structurally
    zero when a parameter of the same module, or of one of its sub-modules (a graph
    convolution's bias sits beside its ``lin.weight``), that is not a bias got a healthy
    gradient. Biases of the root module are never judged so (the whole model is not a layer).

    Args:
        names: Parameter names, as ``named_parameters`` gives them.
        small: Whether each parameter's gradient is zero or tiny.
        healthy: Whether each parameter's gradient is finite, nonzero and not tiny.

    Returns:
        The names of the structurally zero gradients.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
        >>> model(torch.randn(16, 4)).pow(3).sum().backward()
        >>> stats = gradient_statistics(model.named_parameters())
        >>> tiny = stats.grad_rms < 1e-5 * np.median(stats.grad_rms)
        >>> sorted(structural_zero_names(stats.names, tiny, ~tiny))
        ['0.bias']
    """
    healthy_weights = [n for n, ok in zip(names, healthy, strict=True) if ok and not _is_bias(n)]
    found = set()
    for name, is_small in zip(names, small, strict=True):
        module = owner_module(name)
        if (
            is_small
            and module
            and _is_bias(name)
            and any(_within(weight, module) for weight in healthy_weights)
        ):
            found.add(name)
    return found


def _bad_loss(loss: float | None) -> bool:
    return loss is not None and not math.isfinite(loss)


def _nonfinite_finding(
    stats: GradientStatistics, step: int, counts: Mapping[str, int], gradients_checked: bool
) -> Finding:
    names = [f"{name} ({n} values)" for name, n in counts.items()]
    loss = f"the loss is {stats.loss}; " if _bad_loss(stats.loss) else ""
    first = next(iter(counts), None)
    if first is None:
        return Finding(
            "non-finite-loss",
            "loss",
            f"{loss}{'no gradient is non-finite yet: ' if gradients_checked else ''}check the "
            "data and the loss function",
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


def health_scalars(
    stats: GradientStatistics, group_depth: int = 1, under: str | None = None
) -> dict[str, float]:
    """Per-group gradient and weight norms, for the dashboards.

    Keys (each after ``~learnscope/health/``, see :mod:`learnscope.tags`) ``grad_norm/<group>``
    and ``weight_norm/<group>`` (the L2 norm over every parameter of the group, see
    :func:`group_name`), ``grad_norm/total``, and ``loss`` when the statistics hold a loss.
    Parameters without a gradient count as zero.

    Args:
        stats: From :func:`gradient_statistics`.
        group_depth: Module-name components that make a group.
        under: The module the groups are taken below
            (:func:`~learnscope.model.parameter_shards.groups_under` of the whole model); ``None``:
            the deepest module that holds every parameter of ``stats``.

    Returns:
        The scalars (a group whose gradient norm is not finite reports NaN or infinity).

    Example:
        >>> import torch
        >>> layer = torch.nn.Linear(2, 1)
        >>> layer(torch.ones(1, 2)).sum().backward()
        >>> scalars = health_scalars(gradient_statistics(layer.named_parameters()))
        >>> round(scalars["~learnscope/health/grad_norm/total"], 3)
        1.732
    """
    grad_squares: dict[str, float] = {}
    weight_squares: dict[str, float] = {}
    grads = np.where(stats.has_grad, stats.grad_norms, 0.0) ** 2
    under = common_module(stats.names) if under is None else under
    for name, grad, weight in zip(stats.names, grads, stats.weight_norms**2, strict=True):
        group = group_name(name, group_depth, under)
        grad_squares[group] = grad_squares.get(group, 0.0) + grad
        weight_squares[group] = weight_squares.get(group, 0.0) + weight
    scalars = {f"{HEALTH}/grad_norm/{g}": math.sqrt(v) for g, v in grad_squares.items()}
    scalars.update({f"{HEALTH}/weight_norm/{g}": math.sqrt(v) for g, v in weight_squares.items()})
    scalars[f"{HEALTH}/grad_norm/total"] = math.sqrt(float(grads.sum()))
    if stats.loss is not None:
        scalars[f"{HEALTH}/loss"] = stats.loss
    return scalars


def weight_rms(stats: GradientStatistics, module: str) -> float:
    """Root mean square per element of the weights (parameters of 2 or more dimensions).

    Biases and normalisation scales are left out, as they start at zero or one whatever the
    layer's size; a module with no weight matrix falls back to all its parameters.

    Args:
        stats: From :func:`gradient_statistics`.
        module: Dotted module name; ``""`` for the whole model. Parts that wrappers insert
            (a compiled module's ``_orig_mod``) are dropped, as from the parameters' names.

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
    module = clean_parameter_name(module)
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
        ``~learnscope/health/head_weight_ratio/<head>``.

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
        ratios[f"{HEALTH}/head_weight_ratio/{head}"] = ratio
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
