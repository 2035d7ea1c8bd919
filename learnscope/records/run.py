"""Run records: what is attached when a writer session starts, and how it ended.

:class:`RunStart` names every learnscope callback on a trainer with the arguments it was made
with, so a dashboard can say what is attached before any data comes; :class:`RunEnd` says
whether the run finished, was interrupted (Ctrl-C) or failed, and a failed run's exception
(:class:`RunError`). Settings are kept as readable, stable JSON values (:func:`json_setting`):
functions and classes by their dotted name, other objects by their ``repr`` (with their own
settings, such as ``CoordinateRangeCheck(key='pos', max_width=1.1)``) unless that is Python's
default ``<... object at 0x...>``, which names a memory address: then by their class's dotted
name.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "CallbackSettings",
    "RunEnd",
    "RunError",
    "RunStart",
    "call_settings",
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
class RunError:
    """The exception a failed run stopped with: its type as a traceback names it, its message.

    Args:
        type: The exception's class, with its module unless built in (``"RuntimeError"``,
            ``"torch.OutOfMemoryError"``).
        message: ``str(exception)``, at most 2,000 characters (longer ones are cut, ending in
            ``...``).

    Example:
        >>> error = RunError.of(ValueError("no column 'label'"))
        >>> error, error.text()
        (RunError(type='ValueError', message="no column 'label'"), "ValueError: no column 'label'")
    """

    type: str
    message: str

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
        ValueError: For another status, a failed run without its error, or an error on a run
            that did not fail.

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
