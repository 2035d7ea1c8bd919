"""The embedding tensor of a module's output, or an error that says what the module gave.

:class:`~learnscope.lightning_glue.EmbeddingProjector` and
:class:`~learnscope.lightning_glue.TrainingHelper` read the embedding from a module's output, or
from what their ``select`` picks out of it, by one rule: it must be a tensor. Anything else (the
dict of a SchNetPack model, ``{"energy": ..., "forces": ...}``; a tuple; a Hugging Face
``ModelOutput``; a dataclass) is a configuration mistake, which both callbacks raise at the
sanity check (their first capture), with :func:`embedding_tensor`'s ``TypeError``: the type of
what was given; for a mapping its keys, for a tuple or list its items, for a dataclass or named
tuple its fields, each with its value's type or shape; and a ``select=`` that picks a tensor out
of it.

Example:
    >>> output = {"energy": torch.zeros(4), "forces": torch.zeros(30, 3)}
    >>> print(describe_output(output))
    a dict with keys 'energy' (a tensor of shape (4,)), 'forces' (a tensor of shape (30, 3))
    >>> select_example(output)
    'select=lambda out: out["forces"]'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from learnscope.user_functions import describe

__all__ = ["EMBEDDING_SHAPES", "describe_output", "embedding_tensor", "select_example"]

EMBEDDING_SHAPES = (
    "a tensor [batch, dim], [nodes, dim] or [batch, tokens, dim] (or a feature map "
    "[batch, channels, *spatial], with spatial=)"
)
MAX_ENTRIES = 8  # keys, items or fields named in a message


def _entries(value: Any) -> tuple[str, list[tuple[str, str, Any]]] | None:
    """What ``value`` holds: its kind in words, and ``(label, how to pick it, item)`` of each.

    ``None`` for a value that holds no named or numbered entries.
    """
    if isinstance(value, Mapping):
        return "keys", [(repr(key), _pick_key(key), item) for key, item in value.items()]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [field.name for field in dataclasses.fields(value)]
        return "fields", [(name, f"out.{name}", getattr(value, name)) for name in fields]
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return "fields", [(name, f"out.{name}", getattr(value, name)) for name in value._fields]
    if isinstance(value, (tuple, list)):
        return "items", [(f"[{i}]", f"out[{i}]", item) for i, item in enumerate(value)]
    return None


def _pick_key(key: Any) -> str:
    if isinstance(key, str) and '"' not in key and "\\" not in key:
        return f'out["{key}"]'
    return f"out[{key!r}]"


def describe_output(value: Any) -> str:
    """What a module gave, for messages: its type, and what its keys, items or fields hold.

    Example:
        >>> describe_output((torch.zeros(8, 16), "extra"))
        "a tuple with items [0] (a tensor of shape (8, 16)), [1] (a str 'extra')"
        >>> describe_output(None), describe_output(3.5)
        ('None', 'a float')
    """
    found = _entries(value)
    if found is None:
        return describe(value)
    kind, entries = found
    if not entries:
        return _article(f"empty {type(value).__name__}")
    listed = ", ".join(f"{label} ({describe(item)})" for label, _, item in entries[:MAX_ENTRIES])
    more = f" and {len(entries) - MAX_ENTRIES} more" if len(entries) > MAX_ENTRIES else ""
    return _article(f"{type(value).__name__} with {kind} {listed}{more}")


def _article(words: str) -> str:
    """``words`` after "a" or "an", as their first letter asks."""
    return f"{'an' if words[:1].lower() in 'aeiou' else 'a'} {words}"


def select_example(value: Any) -> str | None:
    """A ``select=`` that picks a tensor out of ``value``; ``None`` when it holds none.

    The first entry that is a tensor of 2 or more dimensions, else the first tensor.

    Example:
        >>> select_example((torch.zeros(8), torch.zeros(8, 16)))
        'select=lambda out: out[1]'
        >>> select_example("text") is None
        True
    """
    found = _entries(value)
    if found is None:
        return None
    tensors = [(pick, item) for _, pick, item in found[1] if isinstance(item, torch.Tensor)]
    tensors.sort(key=lambda entry: entry[1].ndim < 2)  # stable: the first of 2-D or more
    return f"select=lambda out: {tensors[0][0]}" if tensors else None


def embedding_tensor(
    value: Any, who: str, module: str, *, selected: bool = False, output: Any = None
) -> torch.Tensor:
    """``value`` when it is a tensor; else a ``TypeError`` naming what it is and the ``select=``.

    Args:
        value: The module's output, or what ``select`` picked out of it.
        who: The callback, for messages (``"TrainingHelper"``).
        module: The module's dotted name, for messages.
        selected: Whether ``select`` picked ``value`` out of the module's output.
        output: That output, when ``selected``.

    Raises:
        TypeError: ``value`` is not a tensor; the message says what it is (keys, items or
            fields, with their types and shapes), what the embedding must be, and the
            ``select=`` that picks one (such as ``select=lambda out: out["energy"]``).

    Example:
        >>> embedding_tensor({"energy": torch.zeros(4)}, "Demo", "model")
        Traceback (most recent call last):
        ...
        TypeError: Demo: module 'model' gave a dict with keys 'energy' (a tensor of shape (4,)), \
not a tensor. Pass select= a function that picks the embedding out of it, such as \
select=lambda out: out["energy"]; the embedding is a tensor [batch, dim], [nodes, dim] or \
[batch, tokens, dim] (or a feature map [batch, channels, *spatial], with spatial=)
    """
    if isinstance(value, torch.Tensor):
        return value
    what = describe_output(value)
    example = select_example(output if selected else value)
    such_as = f", such as {example}" if example else ""
    if selected:
        raise TypeError(
            f"{who}: select gave {what}, not a tensor, from the output of module {module!r} "
            f"({describe_output(output)}); it must return the embedding{such_as}: "
            f"{EMBEDDING_SHAPES}"
        )
    raise TypeError(
        f"{who}: module {module!r} gave {what}, not a tensor. Pass select= a function that "
        f"picks the embedding out of it{such_as}; the embedding is {EMBEDDING_SHAPES}"
    )
