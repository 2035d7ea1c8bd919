"""A run's hyper-parameters as one flat mapping of short names to plain values.

Trackers show hyper-parameters as columns: one name, one value. :func:`flat_hyperparameters`
turns the mapping a model saved (nested mappings, lists, objects) into that form by one rule,
the one Lightning's loggers use: nested names are joined by ``/``; a value is kept when it is
``None``, a bool, an int, a finite float or text; any other value becomes text
(:func:`~learnscope.records.run.json_setting`, a list or mapping written as JSON), at most 200
characters.

Example:
    >>> flat_hyperparameters({"lr": 0.1, "optimizer": {"name": "adam", "betas": (0.9, 0.99)}})
    {'lr': 0.1, 'optimizer/name': 'adam', 'optimizer/betas': '[0.9, 0.99]'}
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from learnscope.hyperparameter_values import HyperValue, is_hyper_value
from learnscope.records.run import MAX_TEXT, json_setting

__all__ = ["HyperValue", "flat_hyperparameters"]

SEPARATOR = "/"  # joins the names of nested hyper-parameters, as Lightning's loggers do


def flat_hyperparameters(params: Mapping[str, Any]) -> dict[str, HyperValue]:
    """``params`` flattened: nested names joined by ``/``, every value a plain value.

    A name that is not text is written as text (``str``). A numpy number is a Python number;
    a float that is not finite is written as text (``'nan'``, ``'inf'``), so that every number
    stays a number in JSON.

    Args:
        params: The hyper-parameters, such as a LightningModule's ``hparams_initial``.

    Returns:
        Name to ``None``, bool, int, finite float or text (at most 200 characters), in the
        order given.

    Example:
        >>> flat_hyperparameters({"layers": [64, 64], "dropout": float("nan"), "act": None})
        {'layers': '[64, 64]', 'dropout': 'nan', 'act': None}
        >>> flat_hyperparameters({"width": np.int64(64), "lr": np.float32(0.5)})
        {'width': 64, 'lr': 0.5}
    """
    flat: dict[str, HyperValue] = {}
    for name, value in params.items():
        if isinstance(value, Mapping) and value:
            for inner, kept in flat_hyperparameters(value).items():
                flat[f"{name}{SEPARATOR}{inner}"] = kept
        else:
            flat[str(name)] = _plain(value)
    return flat


def _plain(value: Any) -> HyperValue:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_):
        value = int(value)  # a numpy integer
    elif isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_):
        value = float(value)
    if not is_hyper_value(value):
        value = json_setting(value)
        if isinstance(value, list | dict):
            value = json.dumps(value)
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return value[: MAX_TEXT - 3] + "..."
    return value
