"""Which sub-modules are the encoder and the heads, by name, failing on names the model lacks."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from torch import nn

from learnscope.model.parameter_names import common_module

log = logging.getLogger("learnscope")

DEFAULT_EMBEDDING_MODULE = "encoder"


def _module_names(model: nn.Module) -> list[str]:
    return [name for name, _ in model.named_modules() if name]


def _unknown(model: nn.Module, what: str, name: str) -> ValueError:
    names = ", ".join(_module_names(model)) or "(none)"
    return ValueError(
        f"TrainingHelper: {type(model).__name__} has no sub-module {name!r} "
        f"({what}); available: {names}"
    )


def resolve_encoder(model: nn.Module, name: str | None) -> str | None:
    """The embedding module's name, ``None`` for no embedding checks.

    The default ``"encoder"``, when the model has none, turns the checks off (the callback
    says so once, with :func:`missing_encoder`); another missing name fails.

    Args:
        model: The LightningModule.
        name: The dotted name given as ``embedding_module``.

    Returns:
        ``name``, or ``None`` when the checks are off.

    Raises:
        ValueError: ``name`` is not the default and the model has no such sub-module; the
            message lists the names it has.

    Example:
        >>> model = nn.ModuleDict({"backbone": nn.Linear(2, 2)})
        >>> resolve_encoder(model, "backbone"), resolve_encoder(model, "encoder")
        ('backbone', None)
    """
    if name is None:
        return None
    if name in _module_names(model):
        return name
    if name == DEFAULT_EMBEDDING_MODULE:
        return None
    raise _unknown(model, "embedding_module", name)


def embedding_candidates(model: nn.Module) -> tuple[list[str], str]:
    """The modules that could give the embedding: those with parameters, below any wrapper.

    The model's top-level modules that hold parameters; when a single module holds every
    parameter (a wrapper, such as ``self.model = Net()`` or SchNetPack's
    ``AtomisticTask.model``), its sub-modules that hold parameters instead, again while one
    holds them all (:func:`~learnscope.model.parameter_names.common_module`).

    Returns:
        The candidates' dotted names, and the wrapper module (``""`` for none).

    Example:
        >>> net = nn.ModuleDict({"representation": nn.Linear(2, 4), "output": nn.Linear(4, 1)})
        >>> embedding_candidates(nn.ModuleDict({"model": net, "loss": nn.MSELoss()}))
        (['model.representation', 'model.output'], 'model')
    """
    names = [name for name, parameter in model.named_parameters() if parameter.numel()]
    wrapper = common_module(names)
    holder = model.get_submodule(wrapper) if wrapper else model
    prefix = f"{wrapper}." if wrapper else ""
    found = [
        prefix + name
        for name, child in holder.named_children()
        if next(child.parameters(), None) is not None
    ]
    if not found and wrapper:  # the wrapper is a single layer: it is the candidate
        return [wrapper], ""
    return found, wrapper


def missing_encoder(model: nn.Module) -> str:
    """The warning for a model without the default ``encoder``: what is off, what to pass.

    Names the modules that could give the embedding (:func:`embedding_candidates`) and what
    that module's output must be, without guessing which one it is.

    Example:
        >>> model = nn.ModuleDict({"backbone": nn.Linear(2, 2), "head": nn.Linear(2, 1)})
        >>> print(missing_encoder(model))
        learnscope: TrainingHelper: ModuleDict has no sub-module 'encoder', so the \
embedding-collapse and head checks are off (no ~learnscope/health/collapse/... scalars). Pass \
TrainingHelper(embedding_module=...) the module whose output is the embedding, a tensor \
[batch, dim], [nodes, dim] or [batch, tokens, dim] (select= picks it out of a dict or tuple); \
the modules with parameters are 'backbone', 'head' (or one inside them). Or pass \
embedding_module=None to turn these checks off without this warning
    """
    names, wrapper = embedding_candidates(model)
    what = (
        f"learnscope: TrainingHelper: {type(model).__name__} has no sub-module 'encoder', so the "
        "embedding-collapse and head checks are off (no ~learnscope/health/collapse/... scalars)"
    )
    if not names:
        return what + "; it has no sub-module with parameters: pass embedding_module=None"
    listed = ", ".join(repr(name) for name in names)
    inside = f", inside {wrapper!r}, which holds every parameter" if wrapper else ""
    return (
        f"{what}. Pass TrainingHelper(embedding_module=...) the module whose output is the "
        "embedding, a tensor [batch, dim], [nodes, dim] or [batch, tokens, dim] (select= picks "
        f"it out of a dict or tuple); the modules with parameters are {listed}{inside} (or one "
        "inside them). Or pass embedding_module=None to turn these checks off without this "
        "warning"
    )


def resolve_heads(
    model: nn.Module, encoder: str | None, head_modules: Sequence[str] | None
) -> list[str]:
    """The head modules compared with ``encoder``.

    Args:
        model: The LightningModule.
        encoder: The embedding module's name (``None``: no heads are compared).
        head_modules: The names given; ``None`` for the siblings of ``encoder`` that hold
            trainable parameters.

    Returns:
        The heads' dotted names.

    Raises:
        ValueError: A name of ``head_modules`` that the model lacks, with the names it has.

    Example:
        >>> model = nn.ModuleDict({"encoder": nn.Linear(2, 2), "head": nn.Linear(2, 1)})
        >>> resolve_heads(model, "encoder", None)
        ['head']
    """
    known = set(_module_names(model))
    if head_modules is not None:
        for name in head_modules:
            if name not in known:
                raise _unknown(model, "head_modules", name)
        return [] if encoder is None else list(head_modules)
    if encoder is None:
        return []
    parent, _, own = encoder.rpartition(".")
    siblings = model.get_submodule(parent).named_children()
    prefix = f"{parent}." if parent else ""
    return [
        prefix + child
        for child, module in siblings
        if child != own and any(p.requires_grad for p in module.parameters())
    ]
