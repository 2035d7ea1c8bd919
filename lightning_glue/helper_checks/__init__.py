"""The checks of :class:`~learnscope.lightning_glue.TrainingHelper`: one check, its own state.

The callback routes its hooks to these parts, reports their findings and writes their scalars:

* **Unused parameters** (:class:`UnusedParameters`): parameters that require a gradient and
  never got one during a first round of optimizer steps (with several optimizers, the first
  step of each), one finding per module, once per run; under DDP, named again with the two
  ways out when the second step fails.
* **Gradients** (:class:`GradientCheck`), once per optimizer step on check steps (global steps
  that are multiples of ``check_every_n_steps``): non-finite, zero and tiny gradients, named,
  on the stepping optimizer's parameters; zero and tiny ones not on an optimizer's first step;
  a structurally zero bias as ``info``; non-finite ones left to a ``GradScaler`` when there is
  one. A closure optimizer (``LBFGS``) is checked at its first closure evaluation only.
* **The loss** (:class:`StepLoss`) of a check step: the mean of its micro-batch losses as
  ``training_step`` returned them, each at its first backward.
* **Non-finite values** (:class:`NonFiniteTrace`): after a check finds one, hooks on every
  module for the next training step name the first module whose output is not finite.
* **Head versus encoder** (in :class:`GradientCheck`): the weights of each head module against
  the embedding module's, root mean square per element.
* **Embedding collapse** (:class:`CollapseCapture`, :func:`collapse_report`): the rows the
  embedding module gives for a check step's training batches, judged when the step is over
  (ranks only with at least 4 rows per dimension); with ``edge_index_fn`` also oversmoothing,
  graph by graph (``mad_global``, the mean cosine distance between the nodes of a graph).
* **Inputs** (:func:`input_findings`): the user's checks on the first batch of a check step.

Example:
    >>> from learnscope.lightning_glue.helper_checks import FindingReport
    >>> FindingReport(warn_every_n_steps=100).findings
    []
"""

from learnscope.lightning_glue.helper_checks.arguments import (
    HelperSettings,
    Ranks,
    check_arguments,
)
from learnscope.lightning_glue.helper_checks.collapse import (
    CollapseCapture,
    collapse_report,
    too_few_rows,
)
from learnscope.lightning_glue.helper_checks.gradients import GradientCheck, StepLoss
from learnscope.lightning_glue.helper_checks.inputs import input_findings
from learnscope.lightning_glue.helper_checks.modules import (
    DEFAULT_EMBEDDING_MODULE,
    missing_encoder,
    resolve_encoder,
    resolve_heads,
)
from learnscope.lightning_glue.helper_checks.report import CheckReport, FindingReport
from learnscope.lightning_glue.helper_checks.tracing import NonFiniteTrace
from learnscope.lightning_glue.helper_checks.unused import UnusedParameters

__all__ = [
    "DEFAULT_EMBEDDING_MODULE",
    "CheckReport",
    "CollapseCapture",
    "FindingReport",
    "GradientCheck",
    "HelperSettings",
    "NonFiniteTrace",
    "Ranks",
    "StepLoss",
    "UnusedParameters",
    "check_arguments",
    "collapse_report",
    "input_findings",
    "missing_encoder",
    "resolve_encoder",
    "resolve_heads",
    "too_few_rows",
]
