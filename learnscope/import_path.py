"""Functions named by import path, as a LightningCLI (YAML) config gives them.

An argument that takes a function or a name (``ids_fn="dataset_index"``,
``mask_fn="attention_mask"``) cannot tell jsonargparse to import a function from a config: the
string stays a string. So learnscope reads a string with a dot in it, such as
``"my_project.data.sample_ids"``, as the import path of a function (``module.attribute``) and
imports it; a string without a dot is a name.

Example:
    >>> resolve_function("math.sqrt", "ids_fn")(16.0)
    4.0
    >>> resolve_function("dataset_index", "ids_fn")
    'dataset_index'
"""

from __future__ import annotations

import importlib
import re
from typing import Any

_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def resolve_function(value: Any, argument: str) -> Any:
    """``value``, or the function a dotted import path in it names.

    Args:
        value: The argument as given.
        argument: Its name, for the message.

    Raises:
        ValueError: A dotted string that names nothing importable or nothing callable.
    """
    if not isinstance(value, str) or "." not in value:
        return value
    module_name, _, attribute = value.rpartition(".")
    found = None
    if _PATH.fullmatch(value):
        try:
            found = getattr(importlib.import_module(module_name), attribute, None)
        except ImportError as error:
            reason = f"cannot import {module_name!r} ({error})"
        else:
            reason = f"{module_name!r} has no callable {attribute!r}"
    else:
        reason = "it is not a dotted name"
    if not callable(found):
        raise ValueError(
            f"{argument}={value!r} is read as the import path of a function "
            f"(module.function), but {reason}"
        )
    return found
