"""Parameter names: the names wrappers insert removed, the owning module, the module group.

Pure functions of strings, shared by the health checks (:mod:`learnscope.health`) and the
sampled histories (:mod:`learnscope.autocorrelation.sampled_history`), so that both name and group
parameters alike.

**Groups.** A parameter's group is the first ``depth`` parts of its module's dotted name,
taken below the deepest module that holds every trainable parameter (:func:`common_module`).
For most models that is the model itself: ``encoder.layers.0.weight`` is in ``encoder`` (depth
1) or ``encoder.layers`` (depth 2). A LightningModule that wraps everything in one child
(``self.model = Net()``; SchNetPack's ``AtomisticTask.model``), or one whose trainable
parameters all lie in one sub-module (LoRA adapters inside a frozen model, a fine-tuned head),
would otherwise give a single group; its groups are taken below that module instead, keeping
the full dotted prefix so that you find them in the model: ``model.representation`` and
``model.output_modules``, not ``model``. Which parameters train is read when the groups are
made (at fit start, and again when fine-tuning changes them), from the whole model, whatever
optimizer or rank holds them.

Example:
    >>> name = clean_parameter_name("_orig_mod.encoder.layers.0.weight")
    >>> name, owner_module(name), group_name(name)
    ('encoder.layers.0.weight', 'encoder.layers.0', 'encoder')
    >>> trainable = ["model.representation.embedding.weight", "model.output_modules.0.bias"]
    >>> under = common_module(trainable)
    >>> under, [group_name(name, under=under) for name in trainable]
    ('model', ['model.representation', 'model.output_modules'])
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["clean_parameter_name", "common_module", "group_name", "owner_module"]

# Name components that wrappers insert: FSDP1, activation checkpointing, torch.compile's
# OptimizedModule and Lightning Fabric's _FabricModule.
_WRAPPER_PARTS = frozenset(
    {"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod", "_forward_module"}
)


def clean_parameter_name(name: str) -> str:
    """A parameter name without the components that wrappers insert, wherever they are.

    The wrappers are FSDP1 (``_fsdp_wrapped_module``), activation checkpointing
    (``_checkpoint_wrapped_module``), ``torch.compile`` (``_orig_mod``) and Lightning Fabric
    (``_forward_module``), so the name is the one the user's module gives. DDP's ``module.``
    cannot be told from a user's module of that name: pass the model itself to
    :func:`~learnscope.model.parameter_shards.parameter_shards` instead (see
    :func:`~learnscope.model.parameter_shards.unwrap_model`).

    Example:
        >>> clean_parameter_name("_fsdp_wrapped_module.encoder._fsdp_wrapped_module.weight")
        'encoder.weight'
        >>> clean_parameter_name("_forward_module.encoder._orig_mod.0.weight")
        'encoder.0.weight'
    """
    if not name.startswith("_") and "._" not in name:  # no part could be a wrapper's
        return name
    return ".".join(part for part in name.split(".") if part not in _WRAPPER_PARTS)


def owner_module(parameter_name: str) -> str:
    """The dotted name of the module that owns a parameter (``""`` for the root module).

    Example:
        >>> owner_module("encoder.0.weight"), owner_module("scale")
        ('encoder.0', '')
    """
    return parameter_name.rpartition(".")[0]


def common_module(parameter_names: Iterable[str]) -> str:
    """The deepest module that holds every named parameter (``""``: the root module).

    The longest dotted prefix shared by the modules that own the parameters: the module under
    which :func:`group_name` takes the groups. ``""`` when there are none, or when they lie
    in two top-level modules (or in the root module itself).

    Example:
        >>> common_module(["model.representation.w", "model.output_modules.0.b"])
        'model'
        >>> common_module(["encoder.0.weight", "head.weight"]), common_module([])
        ('', '')
        >>> common_module(["base.layers.0.lora_A.weight", "base.layers.1.lora_A.weight"])
        'base.layers'
    """
    common: list[str] | None = None
    for name in parameter_names:
        parts = owner_module(name).split(".") if "." in name else []
        if common is None:
            common = parts
            continue
        shared = 0
        for mine, theirs in zip(common, parts, strict=False):
            if mine != theirs:
                break
            shared += 1
        del common[shared:]
        if not common:
            return ""
    return ".".join(common or [])


def group_name(parameter_name: str, depth: int = 1, under: str = "") -> str:
    """The module prefix that groups a parameter for per-group norms and autocorrelation.

    The first ``depth`` parts of its module's name below ``under`` (the module that holds every
    trainable parameter, :func:`common_module`), with ``under`` kept in front. A parameter of
    ``under`` itself is in the group ``under``; one of the root module in the group ``"root"``;
    one that is not below ``under`` is grouped from the root.

    Example:
        >>> group_name("encoder.layers.0.weight"), group_name("encoder.layers.0.weight", 2)
        ('encoder', 'encoder.layers')
        >>> group_name("scale")
        'root'
        >>> group_name("model.representation.0.weight", under="model")
        'model.representation'
        >>> group_name("model.weight", under="model"), group_name("head.bias", under="model")
        ('model', 'head')
    """
    owner = owner_module(parameter_name)
    if under and (owner == under or owner.startswith(under + ".")):
        below = owner[len(under) + 1 :].split(".")[:depth] if owner != under else []
        return ".".join([under, *below])
    parts = owner.split(".")[:depth]
    return ".".join(parts) or "root"
