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
* :class:`GradientRound` judges which parameters never get a gradient over a first round of
  every optimizer's step (with several optimizers each step sees its own parameters' gradients).
* :class:`FindingLog` keeps one finding per (code, subject) for the findings table, with its life
  (first and last seen; no longer holding once a check whose :class:`CheckScope` covers it finds it
  no more: :func:`gradient_scope` says what the gradient checks judged), and says when a finding
  is due a warning: at most once per ``warn_every_n_steps``, and unused parameters once.
* :class:`NonFiniteOutputTracer` names the first module whose output is not finite, with forward
  hooks armed for one step only (what ``torch.autograd.detect_anomaly`` does, without its cost on
  healthy steps).
* :func:`parameter_shards` sees through sharded training (FSDP2's ``DTensor``, FSDP1's flat
  and original parameters): one :class:`ParameterShard` per original parameter, with its name,
  full shape and the elements this rank holds. Every function above accepts a model sharded so
  (pass the model itself for FSDP1 with ``use_orig_params=True``): each rank measures its
  shard, one all-reduce adds the ranks up, and the figures equal the unsharded model's.
* :class:`CoordinateRangeCheck` is an input check: it says when all the coordinates of a
  batch lie within a range of width about 1 (``max_width``, 1.1), at any offset, the sign of
  fractional coordinates passed where Cartesian ones were meant.

Tiny gradients are judged relative to the other parameters, not against an absolute number: a
parameter whose gradient per element (root mean square) is below ``small_grad_threshold`` times
the median over the parameters is reported. An absolute threshold would fire on every model that
has converged. A bias whose gradient is zero or tiny while the weights of its module got healthy
gradients is structurally zero (:func:`structural_zero_names`: a softmax or a normalisation after
it removes the constant shift it adds) and is reported for information only.

Example:
    >>> import torch
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    >>> model(torch.randn(8, 4)).sum().backward()
    >>> stats = gradient_statistics(model.named_parameters())
    >>> gradient_findings(stats, step=0)
    []
    >>> sorted(health_scalars(stats))[:2]
    ['~learnscope/health/grad_norm/0', '~learnscope/health/grad_norm/1']
"""

from learnscope.health.embeddings import collapse_findings
from learnscope.health.finding_log import CheckScope, FindingLog, Observed
from learnscope.health.gradients import (
    GradientStatistics,
    gradient_findings,
    gradient_scope,
    gradient_statistics,
    head_findings,
    health_scalars,
    structural_zero_names,
    weight_rms,
)
from learnscope.health.inputs import CoordinateRangeCheck
from learnscope.health.parameters import (
    GradientRound,
    ddp_unused_parameter_advice,
    unused_parameter_findings,
    unused_parameter_names,
)
from learnscope.health.tracing import NonFiniteOutputTracer
from learnscope.model.parameter_names import group_name, owner_module
from learnscope.model.parameter_shards import ParameterShard, is_sharded, parameter_shards

__all__ = [
    "CheckScope",
    "CoordinateRangeCheck",
    "FindingLog",
    "GradientRound",
    "GradientStatistics",
    "NonFiniteOutputTracer",
    "Observed",
    "ParameterShard",
    "collapse_findings",
    "ddp_unused_parameter_advice",
    "gradient_findings",
    "gradient_scope",
    "gradient_statistics",
    "group_name",
    "head_findings",
    "health_scalars",
    "is_sharded",
    "owner_module",
    "parameter_shards",
    "structural_zero_names",
    "unused_parameter_findings",
    "unused_parameter_names",
    "weight_rms",
]
