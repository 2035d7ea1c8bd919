"""Parameter names: the names wrappers insert removed, the owning module, the module group.

Pure functions of strings, shared by the health checks (:mod:`learnscope.health`) and the
sampled histories (:mod:`learnscope.sampled_history`), so that both name and group parameters
alike.

Example:
    >>> name = clean_parameter_name("_orig_mod.encoder.layers.0.weight")
    >>> name, owner_module(name), group_name(name)
    ('encoder.layers.0.weight', 'encoder.layers.0', 'encoder')
"""

from __future__ import annotations

__all__ = ["clean_parameter_name", "group_name", "owner_module"]

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
    :func:`~learnscope.parameter_shards.parameter_shards` instead (see
    :func:`~learnscope.parameter_shards.unwrap_model`).

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
