"""What a record's fields must hold for every writer to write it, checked when it is made.

Each record's ``__post_init__`` calls these, so a value no writer can write is refused where it
is built, with a message naming the record, the field and what it needs, instead of failing
later on the writer thread (or being cast without a word, as ``float(1 + 2j)`` is by numpy).
Only what is unambiguous is converted: a list of numbers becomes an array, an integer a float.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["count", "finite", "name", "real_array", "real_number", "step"]


def name(value: Any, field: str) -> str:
    """A non-empty string: a tag, a group, a callback's name (writers put it in names).

    Example:
        >>> name("encoder", "Histogram tag")
        'encoder'
        >>> name(3, "Histogram tag")
        Traceback (most recent call last):
        ...
        TypeError: Histogram tag must be a non-empty string, got int 3
    """
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a non-empty string, got {_kind(value)} {value!r}")
    if not value:
        raise ValueError(f"{field} must be a non-empty string, got ''")
    return value


def count(value: Any, field: str, least: int = 0, meaning: str = "") -> int:
    """An integer of at least ``least`` (an ``int`` or a numpy integer; not a bool or a float).

    Example:
        >>> count(np.int64(3), "non_finite_elements")
        3
        >>> count(2.5, "non_finite_elements")
        Traceback (most recent call last):
        ...
        TypeError: non_finite_elements must be an int of at least 0, got float 2.5
    """
    needs = f"{field} must be an int of at least {least}{meaning}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{needs}, got {_kind(value)} {value!r}")
    if value < least:
        raise ValueError(f"{needs}, got {value!r}")
    return int(value)


def step(value: Any, field: str) -> int:
    """The trainer's global step: an int of at least 0.

    Example:
        >>> step(-1, "step")
        Traceback (most recent call last):
        ...
        ValueError: step must be an int of at least 0 (the trainer's global step), got -1
    """
    return count(value, field, 0, " (the trainer's global step)")


def real_number(value: Any, field: str) -> float:
    """A real number as a float (NaN and infinities kept); a bool, text or complex is refused.

    Example:
        >>> real_number(np.float32(0.5), "rho1_median")
        0.5
        >>> real_number(0.5 + 1j, "rho1_median")
        Traceback (most recent call last):
        ...
        TypeError: rho1_median must be a real number, got complex (0.5+1j)
    """
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise TypeError(f"{field} must be a real number, got {_kind(value)} {value!r}")
    return float(value)


def real_array(value: Any, field: str) -> np.ndarray:
    """Real numbers as a float64 array: an array, or a (nested) list or tuple of numbers.

    Anything else with ``__array__`` (a CPU tensor) is read as numpy reads it.

    Raises:
        ValueError: For complex values or a ragged list.
        TypeError: For booleans, text, objects, or a value that is no array of numbers.

    Example:
        >>> real_array([1, 2.5], "Histogram values")
        array([1. , 2.5])
        >>> real_array(np.array([1j]), "Histogram values")
        Traceback (most recent call last):
        ...
        ValueError: Histogram values must be real numbers, got complex128 values
    """
    if isinstance(value, str | bytes | Mapping) or not (
        isinstance(value, list | tuple | np.ndarray) or hasattr(value, "__array__")
    ):
        raise TypeError(
            f"{field} must be an array of real numbers (a numpy array or a list of numbers), "
            f"got {_kind(value)}"
        )
    try:
        array = np.asarray(value)
    except ValueError as error:  # a ragged list
        raise ValueError(f"{field} must be a rectangular array of numbers: {error}") from None
    if array.dtype.kind == "c":
        raise ValueError(f"{field} must be real numbers, got {array.dtype} values")
    if array.dtype.kind not in "iuf":
        what = "booleans" if array.dtype.kind == "b" else f"{array.dtype} values"
        raise TypeError(f"{field} must be real numbers, got {what}")
    return array.astype(np.float64, copy=False)


def finite(value: float, field: str) -> float:
    """``value`` when it is finite.

    Example:
        >>> finite(math.inf, "ViewFrame spread")
        Traceback (most recent call last):
        ...
        ValueError: ViewFrame spread must be finite, got inf
    """
    if not math.isfinite(value):
        raise ValueError(f"{field} must be finite, got {value!r}")
    return value


def _kind(value: Any) -> str:
    return type(value).__name__
