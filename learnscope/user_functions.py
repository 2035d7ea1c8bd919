"""The user's functions (``metadata_fn``, ``select``, ``mask_fn``...): errors that name them.

An exception raised inside one gets a note naming the function, its owner and the type of what
it was called with (:func:`calling`); what one returned is described in a few words for the
messages that say what it should have returned (:func:`describe`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch


def describe(value: Any) -> str:
    """What a user's function returned, in a few words, for messages.

    Example:
        >>> describe([1, 2]), describe(torch.tensor(3)), describe("ab"), describe(None)
        ('a list of 2 items', 'a 0-d tensor (one value)', "a str 'ab'", 'None')
    """
    if value is None:
        return "None"
    if isinstance(value, (torch.Tensor, np.ndarray)):
        kind = "tensor" if isinstance(value, torch.Tensor) else "array"
        if value.ndim == 0:
            return f"a 0-d {kind} (one value)"
        return f"a {kind} of shape {tuple(value.shape)}"
    if isinstance(value, (str, bytes)):
        text = repr(value)
        return f"a {type(value).__name__} {text[:40] + '...' if len(text) > 40 else text}"
    if isinstance(value, (list, tuple, dict)):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a {type(value).__name__}"


@contextlib.contextmanager
def calling(name: str, owner: str, argument: Any, what: str = "a batch") -> Iterator[None]:
    """Run a call of the user's function ``name``; an exception it raises gets a note naming it.

    Args:
        name: The argument the function was given as, such as ``"metadata_fn"``.
        owner: Who calls it, such as ``"EmbeddingProjector"``.
        argument: What it was called with (its type goes in the note).
        what: What ``argument`` is, in words.

    Example:
        >>> try:
        ...     with calling("metadata_fn", "Demo", [1, 2]):
        ...         {}["label"]
        ... except KeyError as error:
        ...     print(error.__notes__[0])
        Demo: raised inside metadata_fn, called with a batch of type list
    """
    try:
        yield
    except Exception as error:
        error.add_note(
            f"{owner}: raised inside {name}, called with {what} of type {type(argument).__name__}"
        )
        raise
