"""Run records: what is attached when a writer session starts, and how it ended.

:class:`RunStart` names every learnscope callback on a trainer with the arguments it was made
with, so a dashboard can say what is attached before any data comes, and the run's
hyper-parameters; :class:`RunEnd` says whether the run finished, was interrupted (Ctrl-C) or
failed, and a failed run's exception (:class:`RunError`). Settings are kept as readable, stable JSON values (:func:`json_setting`):
functions and classes by their dotted name, other objects by their ``repr`` (with their own
settings, such as ``CoordinateRangeCheck(key='pos', max_width=1.1)``) unless that is Python's
default ``<... object at 0x...>``, which names a memory address: then by their class's dotted
name.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from learnscope.hyperparameter_values import HyperValue, checked_hyperparameters
from learnscope.records import checks

__all__ = [
    "CallbackSettings",
    "RunEnd",
    "RunError",
    "RunStart",
    "json_setting",
]

Status = Literal["finished", "interrupted", "failed"]
STATUSES = ("finished", "interrupted", "failed")
MAX_TEXT = 200  # characters of a repr kept in the settings
MAX_ERROR_TEXT = 2000  # characters of an exception's message kept in the record
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # a memory address in a repr: not stable


@dataclass(frozen=True)
class CallbackSettings:
    """One callback attached to a trainer and the arguments it was made with.

    Args:
        name: The callback's class name, such as ``"EmbeddingProjector"``.
        settings: Argument name to JSON value: ``None``, a bool, a number, text, or a list or
            mapping (text keys) of them. :func:`json_setting` makes one of any value.

    Raises:
        TypeError: If the name is no text, the settings no mapping with text keys, or a value
            is not JSON (the message names it and :func:`json_setting`).
        ValueError: If the name is empty.

    Example:
        >>> CallbackSettings("TrainingHelper", {"check_every_n_steps": 50}).name
        'TrainingHelper'
        >>> CallbackSettings("TrainingHelper", {"input_checks": [object()]})
        Traceback (most recent call last):
        ...
        TypeError: setting 'input_checks' of TrainingHelper holds an object, not a JSON value ...
    """

    name: str
    settings: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, arguments: Any) -> CallbackSettings:
        """The record of a callback's settings object: its arguments as given, as JSON values.

        Args:
            name: The callback's class name.
            arguments: The frozen dataclass of the callback's settings (its fields made from
                the constructor's arguments are recorded, in their order, by
                :func:`json_setting`; fields derived from them are not), or ``None``.

        Example:
            >>> @dataclasses.dataclass(frozen=True)
            ... class Every:
            ...     n: int = 5
            ...     fn: Any = len
            ...     twice: int = dataclasses.field(init=False, default=0)
            >>> CallbackSettings.of("Every", Every())
            CallbackSettings(name='Every', settings={'n': 5, 'fn': 'builtins.len'})
        """
        if arguments is None:
            return cls(name)
        given = [f.name for f in dataclasses.fields(arguments) if f.init]
        return cls(name, {key: json_setting(getattr(arguments, key)) for key in given})

    def __post_init__(self) -> None:
        checks.name(self.name, "CallbackSettings name")
        if not isinstance(self.settings, Mapping):
            raise TypeError(
                f"settings of {self.name} must be a mapping of argument name to JSON value, got "
                f"{type(self.settings).__name__}"
            )
        for key, value in self.settings.items():
            if not isinstance(key, str):
                raise TypeError(f"settings of {self.name} are named by text, got {key!r}")
            bad = _not_json(value)
            if bad is not None:
                raise TypeError(
                    f"setting {key!r} of {self.name} holds {_article(bad)}, not a JSON value "
                    f"(None, bool, number, text, list, mapping); json_setting(value) makes one"
                )


@dataclass(frozen=True)
class RunStart:
    """A writer session starts: the learnscope callbacks attached to the trainer.

    Args:
        callbacks: One :class:`CallbackSettings` per attached learnscope callback, in the
            trainer's order.
        time: Unix seconds when the session started (now, by default): a finite number.
        hyperparameters: The run's hyper-parameters (the model's and the data's), flat: name
            to ``None``, bool, int, finite float or text
            (:func:`~learnscope.records.hyperparameters.flat_hyperparameters` makes them).

    Raises:
        TypeError: If a callback is no :class:`CallbackSettings`, the time no number, or the
            hyper-parameters not flat.
        ValueError: If the time is not finite.

    Example:
        >>> start = RunStart((CallbackSettings("TrainingHelper"),), hyperparameters={"lr": 0.1})
        >>> [c.name for c in start.callbacks], start.time > 0, start.hyperparameters
        (['TrainingHelper'], True, {'lr': 0.1})
    """

    callbacks: tuple[CallbackSettings, ...] = ()
    time: float = field(default_factory=time.time)
    hyperparameters: Mapping[str, HyperValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "callbacks", tuple(self.callbacks))
        for callback in self.callbacks:
            if not isinstance(callback, CallbackSettings):
                raise TypeError(
                    f"callbacks of a RunStart must be CallbackSettings, got "
                    f"{type(callback).__name__}"
                )
        seconds = checks.finite(checks.real_number(self.time, "RunStart time"), "RunStart time")
        object.__setattr__(self, "time", seconds)
        given = checked_hyperparameters(self.hyperparameters, "RunStart hyperparameters")
        object.__setattr__(self, "hyperparameters", given)


@dataclass(frozen=True)
class RunError:
    """The exception a failed run stopped with: its type as a traceback names it, its message.

    Args:
        type: The exception's class, with its module unless built in (``"RuntimeError"``,
            ``"torch.OutOfMemoryError"``).
        message: ``str(exception)``, at most 2,000 characters (longer ones are cut, ending in
            ``...``).

    Raises:
        TypeError: If the type or the message is no text.
        ValueError: If the type is empty.

    Example:
        >>> error = RunError.of(ValueError("no column 'label'"))
        >>> error, error.text()
        (RunError(type='ValueError', message="no column 'label'"), "ValueError: no column 'label'")
    """

    type: str
    message: str

    def __post_init__(self) -> None:
        checks.name(self.type, "RunError type")
        if not isinstance(self.message, str):
            raise TypeError(
                f"RunError message must be text (str(exception)), got {type(self.message).__name__}"
            )

    @classmethod
    def of(cls, exception: BaseException) -> RunError:
        """The type and message of ``exception``."""
        kind = type(exception)
        module = kind.__module__
        name = (
            kind.__qualname__
            if module in ("builtins", "__main__")
            else f"{module}.{kind.__qualname__}"
        )
        try:
            message = str(exception)
        except Exception:  # a broken __str__ must not hide the failure it reports
            message = "(its message could not be read)"
        if len(message) > MAX_ERROR_TEXT:
            message = message[: MAX_ERROR_TEXT - 3] + "..."
        return cls(name, message)

    def text(self, first_line: bool = False) -> str:
        r"""``type: message`` as a traceback ends (``first_line``: the message's first line only).

        Example:
            >>> RunError("KeyError", "").text(), RunError("E", "one\nline").text(first_line=True)
            ('KeyError', 'E: one ...')
        """
        message = self.message
        if first_line and "\n" in message.strip():
            message = message.strip().split("\n", 1)[0] + " ..."
        return f"{self.type}: {message}" if message else self.type


@dataclass(frozen=True)
class RunEnd:
    """A writer session ends: the last step, and whether training finished.

    Args:
        step: The trainer's global step at the end.
        status: ``"finished"``; ``"interrupted"`` when training stopped with Ctrl-C
            (``KeyboardInterrupt``); ``"failed"`` when it stopped with another exception.
        error: The exception of a failed run; ``None`` for the other statuses.

    Raises:
        ValueError: For another status, a failed run without its error, an error on a run
            that did not fail, or a negative step.
        TypeError: If the step is no int or the error no :class:`RunError`.

    Example:
        >>> RunEnd(120).status
        'finished'
        >>> RunEnd.after(3, RuntimeError("the loader broke")).error.text()
        'RuntimeError: the loader broke'
        >>> RunEnd.after(3, KeyboardInterrupt()).status
        'interrupted'
    """

    step: int
    status: Status = "finished"
    error: RunError | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "step", checks.step(self.step, "RunEnd step"))
        if self.error is not None and not isinstance(self.error, RunError):
            raise TypeError(
                f"the error of a RunEnd is a RunError (RunError.of(exception)), got "
                f"{type(self.error).__name__}"
            )
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if (self.status == "failed") != (self.error is not None):
            raise ValueError(
                f"a failed run has its error and no other run has one; got status "
                f"{self.status!r} with error {self.error!r}"
            )

    @classmethod
    def after(cls, step: int, exception: BaseException | None) -> RunEnd:
        """The end of a run at ``step`` that stopped with ``exception`` (``None``: finished).

        ``KeyboardInterrupt`` (Ctrl-C) is ``interrupted``; any other exception ``failed``.
        """
        if exception is None:
            return cls(step)
        if isinstance(exception, KeyboardInterrupt):
            return cls(step, "interrupted")
        return cls(step, "failed", RunError.of(exception))


def json_setting(value: Any) -> Any:
    """``value`` as a readable JSON value that is the same in every run of the same settings.

    * ``None``, booleans, integers, text and finite floats as they are (other floats by
      ``repr``: ``'nan'``, ``'inf'``);
    * lists, tuples and mappings with text keys item by item;
    * functions, methods and classes by their dotted name (``module.qualname``); a
      ``functools.partial`` by its function's and its arguments';
    * any other object by its ``repr`` (a dataclass's gives its fields), unless that names a
      memory address (Python's default ``<module.Class object at 0x...>``, or one that holds
      such a repr): then by its class's dotted name. A ``repr`` longer than 200 characters is
      cut.

    Example:
        >>> import math
        >>> json_setting({"fn": math.sqrt, "stages": ("validate",), "n": 3})
        {'fn': 'math.sqrt', 'stages': ['validate'], 'n': 3}
        >>> json_setting(lambda batch: batch)
        'learnscope.records.run.<lambda>'
        >>> json_setting(functools.partial(math.pow, 2))
        'functools.partial(math.pow, 2)'
        >>> class Check:
        ...     def __call__(self, batch): ...
        >>> json_setting(Check())
        'learnscope.records.run.Check'
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
        return _dotted_name(value)
    if isinstance(value, functools.partial):
        arguments = [json_setting(value.func)]
        arguments += [repr(json_setting(v)) for v in value.args]
        arguments += [f"{k}={json_setting(v)!r}" for k, v in value.keywords.items()]
        text = f"functools.partial({', '.join(map(str, arguments))})"
    else:
        try:
            text = repr(value)
        except Exception:  # a broken __repr__: the class names it
            text = ""
        if not text or ADDRESS.search(text):
            return _dotted_name(type(value))
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def _dotted_name(value: Any) -> str:
    """The ``module.qualname`` of a function or class (``qualname`` alone without a module)."""
    module = getattr(value, "__module__", None)
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    name = name or type(value).__name__
    return f"{module}.{name}" if module else name


def _not_json(value: Any) -> Any:
    """The first part of ``value`` that is not a JSON value, or ``None`` when it all is.

    Example:
        >>> _not_json({"lags": [1, 2], "fn": "builtins.len"}) is None, _not_json([1, {2}])
        (True, {2})
    """
    if value is None or isinstance(value, bool | int | float | str):
        return None
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return None
    if isinstance(value, list | tuple):
        return next((bad for bad in map(_not_json, value) if bad is not None), None)
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            return value
        return next((bad for bad in map(_not_json, value.values()) if bad is not None), None)
    return value


def _article(value: Any) -> str:
    kind = type(value).__name__
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"
