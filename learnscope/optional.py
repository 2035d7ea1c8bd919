"""Import optional dashboards with an error that says which extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType


def import_optional(module: str, extra: str) -> ModuleType:
    """Import ``module``, or fail with a message naming the pip extra that provides it.

    Args:
        module: Importable name, such as ``"wandb"``.
        extra: The learnscope extra that installs it, such as ``"wandb"``.

    Returns:
        The imported module.

    Raises:
        ModuleNotFoundError: If the module is not installed; the message says what to install.

    Example:
        >>> import_optional("json", "none").__name__
        'json'
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            f"learnscope needs {module!r} for this: pip install 'learnscope[{extra}]'",
            name=module,
        ) from error
