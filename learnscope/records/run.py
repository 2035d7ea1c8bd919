"""Run records: what is attached when a writer session starts, and how it ended.

:class:`RunStart` names every learnscope callback on a trainer with the arguments it was made
with, so a dashboard can say what is attached before any data comes; :class:`RunEnd` says
whether the run finished or was interrupted. Settings are kept as JSON values
(:func:`json_setting`): functions and classes by their qualified name, other objects by their
``repr``.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["CallbackSettings", "RunEnd", "RunStart", "call_settings", "json_setting"]

Status = Literal["finished", "interrupted"]
MAX_TEXT = 200  # characters of a repr kept in the settings


@dataclass(frozen=True)
class CallbackSettings:
    """One callback attached to a trainer and the arguments it was made with.

    Args:
        name: The callback's class name, such as ``"EmbeddingProjector"``.
        settings: Argument name to JSON value (see :func:`json_setting`).

    Example:
        >>> CallbackSettings("TrainingHelper", {"check_every_n_steps": 50}).name
        'TrainingHelper'
    """

    name: str
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunStart:
    """A writer session starts: the learnscope callbacks attached to the trainer.

    Args:
        callbacks: One entry per attached learnscope callback, in the trainer's order.
        time: Unix seconds when the session started (now, by default).

    Example:
        >>> start = RunStart((CallbackSettings("TrainingHelper"),))
        >>> [c.name for c in start.callbacks], start.time > 0
        (['TrainingHelper'], True)
    """

    callbacks: tuple[CallbackSettings, ...] = ()
    time: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        object.__setattr__(self, "callbacks", tuple(self.callbacks))


@dataclass(frozen=True)
class RunEnd:
    """A writer session ends: the last step, and whether training finished.

    Args:
        step: The trainer's global step at the end.
        status: ``"finished"``, or ``"interrupted"`` when training stopped with an exception.

    Raises:
        ValueError: For another status.

    Example:
        >>> RunEnd(120).status
        'finished'
    """

    step: int
    status: Status = "finished"

    def __post_init__(self) -> None:
        if self.status not in ("finished", "interrupted"):
            raise ValueError(f"status must be 'finished' or 'interrupted', got {self.status!r}")


def json_setting(value: Any) -> Any:
    """``value`` as JSON: functions and classes by qualified name, other objects by ``repr``.

    Lists, tuples and mappings with text keys are converted item by item; a ``repr`` longer
    than 200 characters is cut.

    Example:
        >>> import math
        >>> json_setting({"fn": math.sqrt, "stages": ("validate",), "n": 3})
        {'fn': 'math.sqrt', 'stages': ['validate'], 'n': 3}
        >>> json_setting(lambda batch: batch)
        'learnscope.records.run.<lambda>'
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, list | tuple):
        return [json_setting(v) for v in value]
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {k: json_setting(v) for k, v in value.items()}
    if inspect.isroutine(value) or inspect.isclass(value):
        module = getattr(value, "__module__", None)
        name = getattr(value, "__qualname__", None) or getattr(value, "__name__", repr(value))
        return f"{module}.{name}" if module else name
    text = repr(value)
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def call_settings(
    function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The arguments of a call of ``function`` (a class's ``__init__``), defaults included.

    The first parameter (``self``) is left out. Arguments that do not fit the signature are
    kept as ``args`` and by their keyword, as given.

    Example:
        >>> def make(self, a, b=2, *, fn=None): ...
        >>> call_settings(make, [1], {"fn": len})
        {'a': 1, 'b': 2, 'fn': 'builtins.len'}
    """
    try:
        bound = inspect.signature(function).bind(None, *args, **kwargs)
    except (TypeError, ValueError):
        given = {"args": list(args)} if args else {}
        return {name: json_setting(v) for name, v in {**given, **kwargs}.items()}
    bound.apply_defaults()
    names = list(bound.arguments)[1:]  # without self
    settings: dict[str, Any] = {}
    for name in names:
        value = bound.arguments[name]
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            settings.update({k: json_setting(v) for k, v in value.items()})
        else:
            settings[name] = json_setting(value)
    return settings
