"""Import optional dashboards with an error that says which extra to install."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from learnscope.shell import shell_command


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
        install = shell_command("pip", "install", f"learnscope[{extra}]")
        raise ModuleNotFoundError(
            f"learnscope needs {module!r} for this: {install}", name=module
        ) from error


def lazy_names(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """A package's ``__getattr__`` (PEP 562) that imports each name's module at first use.

    Args:
        package: The package's ``__name__``.
        modules: Each public name to the submodule that defines it.

    Example:
        >>> names = lazy_names("json", {"JSONDecoder": "decoder"})
        >>> names("JSONDecoder").__name__
        'JSONDecoder'
    """

    def __getattr__(name: str) -> Any:
        if name in modules:
            return getattr(importlib.import_module(f"{package}.{modules[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
