"""The kinds of finding: each code, what to try about it, whether it judges a trained model.

One table, read by every place that shows a finding (the logger, the TensorBoard Text tab, the
W&B findings table, the run record and so every view), so a finding says what to try in the
same words everywhere; and a finding's life in words (:func:`finding_life`), the same in the
logs, the dashboards and the views. Nothing here imports torch: the views read it too.

A code is either a **verdict on the model's state** (what its weights and representations have
become: collapse, oversmoothing, a head that dwarfs the encoder, gradients that vanish) or an
**event** (a value that was not finite, a parameter that never got a gradient, an input out of
range). A verdict on the state is not given on the weights a fit starts with: before the fit's
first optimizer step a healthy model can look collapsed (a ReLU, a pooling and a linear layer at
random initialisation give all-but-parallel embeddings that separate within a few steps), and a
state that persists once training moves is found at the first check after it.

Example:
    >>> FINDING_ADVICE["embedding-collapse"].startswith("Look for")
    True
    >>> "non-finite-loss" in STATE_CODES
    False
"""

from __future__ import annotations

import types
from collections.abc import Mapping

FINDING_ADVICE: Mapping[str, str] = types.MappingProxyType(
    {
        "unused-parameter": (
            "Remove or freeze the parameters the loss does not use (requires_grad=False), or "
            'under DDP use strategy="ddp_find_unused_parameters_true".'
        ),
        "non-finite-gradient": (
            "Lower the learning rate, clip gradients (gradient_clip_val=1.0), and check the "
            "batch of that step for NaN or Inf values."
        ),
        "zero-gradient": (
            "Check that this part's output reaches the loss (not detached, not multiplied by "
            "zero) and that its activations fire (dead ReLUs: lower the learning rate or use a "
            "leaky activation)."
        ),
        "tiny-gradient": (
            "Check this module's initialisation, normalisation and depth (residual connections "
            "help); lower small_grad_threshold if this part is meant to learn slowly."
        ),
        "structural-zero-gradient": (
            "Nothing to fix: bias=False in that layer drops a parameter that cannot learn."
        ),
        "embedding-collapse": (
            "Look for a trivial solution of the loss (a contrastive loss without negatives, "
            "a missing stop-gradient), lower the learning rate, or add normalisation; compare "
            "with the ~learnscope/health/collapse scalars over steps."
        ),
        "oversmoothing": (
            "Use fewer message-passing layers, add residual or jumping-knowledge connections, "
            "or a normalisation such as PairNorm."
        ),
        "head-dominates-encoder": (
            "Check the head's initialisation (default or zero init), scale its output down, or "
            "give the encoder a higher learning rate."
        ),
        "input-range": (
            "Convert the inputs to what the model expects (such as frac @ lattice for "
            "Cartesian coordinates) or fix the data pipeline."
        ),
        "non-finite-loss": (
            "Check the data for NaN or Inf values and the loss for log(0) or a division by "
            "zero; lower the learning rate if it follows a spike."
        ),
        "non-finite-output": (
            "Look at that module's inputs and weights at that step; lower the learning rate or "
            "clip gradients if its weights blew up."
        ),
    }
)

FINDING_CODES: tuple[str, ...] = tuple(FINDING_ADVICE)

# Verdicts on what the model's weights and representations have become: given only once the
# fit has taken an optimizer step (see the module's description).
STATE_CODES: frozenset[str] = frozenset(
    {
        "embedding-collapse",
        "oversmoothing",
        "head-dominates-encoder",
        "zero-gradient",
        "tiny-gradient",
        "structural-zero-gradient",
    }
)


def finding_life(first_step: int, step: int, resolved_step: int | None) -> str:
    """A finding's life in words: when it was seen, and whether it still holds.

    Args:
        first_step: When it was first found.
        step: When it was last found.
        resolved_step: The first check that no longer found it, ``None`` while it holds.

    Example:
        >>> finding_life(50, 50, None)
        'found at step 50; still holds'
        >>> finding_life(50, 120, 150)
        'seen at steps 50-120; healthy at every check since step 150'
    """
    seen = f"step {step}" if first_step == step else f"steps {first_step}-{step}"
    if resolved_step is None:
        return f"found at {seen}; still holds"
    only = " only" if first_step == step else ""
    return f"seen at {seen}{only}; healthy at every check since step {resolved_step}"
