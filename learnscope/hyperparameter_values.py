"""What a hyper-parameter's value may be: one rule for the records, the summary and the views.

Trackers keep a run's hyper-parameters as flat columns: a name, and ``None``, a bool, a whole
number, a finite float or text. Nothing here imports torch.

Example:
    >>> is_hyper_value("adam"), is_hyper_value({"lr": 0.1})
    (True, False)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["HyperValue", "checked_hyperparameters", "is_hyper_value"]

HyperValue = bool | int | float | str | None


def is_hyper_value(value: Any) -> bool:
    """Whether ``value`` is ``None``, a bool, an int, a finite float or text.

    Example:
        >>> is_hyper_value(0.1), is_hyper_value(float("inf")), is_hyper_value([1])
        (True, False, False)
    """
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, bool | int | str)


def checked_hyperparameters(value: Any, field: str) -> dict[str, HyperValue]:
    """A flat mapping of text names to plain values (:func:`is_hyper_value`), as a new dict.

    Example:
        >>> checked_hyperparameters({"lr": 0.1}, "RunStart hyperparameters")
        {'lr': 0.1}
        >>> checked_hyperparameters({"lr": [0.1]}, "RunStart hyperparameters")
        Traceback (most recent call last):
        ...
        TypeError: RunStart hyperparameters['lr'] is list [0.1], not None, a bool, a finite \
number or text; flat_hyperparameters(params) makes a flat mapping of any
    """
    fix = "flat_hyperparameters(params) makes a flat mapping of any"
    if not isinstance(value, Mapping):
        raise TypeError(f"{field} must be a mapping, got {type(value).__name__}; {fix}")
    for key, item in value.items():
        if not isinstance(key, str):
            raise TypeError(f"{field} are named by text, got {key!r}; {fix}")
        if not is_hyper_value(item):
            raise TypeError(
                f"{field}[{key!r}] is {type(item).__name__} {item!r}, not None, a bool, a finite "
                f"number or text; {fix}"
            )
    return dict(value)
