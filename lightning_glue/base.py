"""The base of learnscope's callbacks: accepted by either Lightning package, fails softly.

Lightning comes as two packages, ``lightning.pytorch`` and ``pytorch_lightning``, and each
Trainer accepts only callbacks derived from its own ``Callback``. Importing either package has
side effects (each points ``lightning_utilities``' rank-zero messages at its own logger, so the
other's ``setLevel`` no longer silences them), so no learnscope module imports Lightning when it
is imported.

Instead :class:`LearnscopeCallback` derives from the ``Callback`` of the Lightning packages
imported so far, and follows them: when this module is imported, it derives from those already
imported (from a stand-in base when there is none), and each time a callback is made, from
every Lightning package imported by then (``lightning.pytorch`` is imported when neither is, or
``pytorch_lightning`` when only that one is installed), by setting its ``__bases__``. The
callback classes stay the module-level classes they are: names, ``__qualname__`` (so checkpoint
``state_key`` strings), ``isinstance``, ``pickle`` and ``copy.deepcopy`` (Lightning's
``ddp_spawn`` pickles the callbacks) are unaffected, and ``issubclass(ModelAutocorrelation,
Callback)`` holds for a package imported before learnscope's callbacks (as LightningCLI,
which checks a ``class_path`` so, needs) or before a callback was made.

A callback is plain state between trainer calls: ``pickle``, ``copy.deepcopy`` and
``torch.save(trainer)`` take its settings and what it keeps across fits, and leave out what it
holds for one trainer call (the writer session and the trainer it serves), as Lightning's own
callbacks do.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import operator
import sys
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from learnscope.lightning_glue import session
from learnscope.lightning_glue.parts import Parts
from learnscope.lightning_glue.session import WriterSession
from learnscope.plugins.pipeline.background import BackgroundWriters
from learnscope.records.run import CallbackSettings

log = logging.getLogger("learnscope")

_PACKAGES = ("lightning.pytorch", "pytorch_lightning")


class _NoLightning:
    """The stand-in base of :class:`LearnscopeCallback` until a Lightning package is imported."""


if TYPE_CHECKING:  # for type checkers, a callback of ``lightning.pytorch``
    from lightning.pytorch import Callback as _Base
else:  # the Lightning packages imported now: see follow_lightning
    _Base = _NoLightning


def lightning_packages() -> tuple[str, ...]:
    """The Lightning packages imported now, importing ``lightning.pytorch`` when there is none.

    Returns:
        ``"lightning.pytorch"``, ``"pytorch_lightning"`` or both, in that order.

    Raises:
        ModuleNotFoundError: Neither package is installed.

    Example:
        >>> import lightning.pytorch
        >>> "lightning.pytorch" in lightning_packages()
        True
    """
    imported = tuple(package for package in _PACKAGES if package in sys.modules)
    if imported:
        return imported
    for package in _PACKAGES:
        try:
            importlib.import_module(package)
        except ImportError:
            continue
        return (package,)
    raise ModuleNotFoundError(
        "learnscope's callbacks need Lightning: pip install 'learnscope[lightning]'",
        name="lightning",
    )


def _imported_callbacks() -> tuple[type, ...]:
    """The ``Callback`` classes of the Lightning packages imported now (none: the stand-in)."""
    found = [getattr(sys.modules.get(package), "Callback", None) for package in _PACKAGES]
    return tuple(base for base in found if isinstance(base, type)) or (_NoLightning,)


def follow_lightning() -> None:
    """Make :class:`LearnscopeCallback` derive from every imported Lightning package's Callback.

    ``lightning.pytorch`` is imported when neither package is.

    Example:
        >>> import lightning.pytorch as pl
        >>> follow_lightning()
        >>> issubclass(LearnscopeCallback, pl.Callback)
        True
    """
    lightning_packages()
    bases = _imported_callbacks()
    if LearnscopeCallback.__bases__ != bases:
        LearnscopeCallback.__bases__ = bases


class LearnscopeCallback(_Base):
    """Common plumbing: the trainer's writer session, and diagnostics that fail softly.

    In ``setup`` a callback joins the writer session of its trainer (see
    :mod:`learnscope.lightning_glue.session`): one writer per logger, shared by every learnscope
    callback on that trainer, closed when the last one leaves in ``teardown``. Subclasses that
    override ``setup``, ``teardown`` or ``on_exception`` call ``super()`` first. They reach the
    writers with :meth:`writers` (empty on ranks other than zero), and run each diagnostic
    inside :meth:`guard`, which logs a failure once with its traceback and switches that
    diagnostic off instead of stopping training.

    It derives from the ``Callback`` of every Lightning package imported when a callback is
    made (see the module's description), so either package's Trainer accepts the callbacks.

    A subclass makes its settings once, in its constructor: one frozen dataclass of its
    arguments (validated there), held as :attr:`settings` and handed to the parts that read
    them; its public attributes are read-only views of it (:func:`setting`). The run record
    shows that object's arguments (:meth:`learnscope_settings`).

    A pickled or copied callback holds no writer session: it joins one at its next ``setup``.

    Example:
        >>> import lightning.pytorch as pl
        >>> class Hello(LearnscopeCallback):
        ...     pass
        >>> hello = Hello()
        >>> hello.switched_off, isinstance(hello, (Hello, pl.Callback)), hello.state_key
        (set(), True, 'Hello')
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """An instance of ``cls`` derived from the imported Lightning packages' ``Callback``.

        The names of the arguments given are kept for :meth:`given`.
        """
        follow_lightning()
        callback = super().__new__(cls)
        callback._given = _given_arguments(cls.__init__, args, kwargs)
        return callback

    def __init__(self) -> None:
        super().__init__()
        self._session: WriterSession | None = None
        self._session_trainer: weakref.ref[Any] | None = None
        self.parts = Parts(type(self).__name__)  # its diagnostics, and which are switched off

    def __getstate__(self) -> dict[str, Any]:
        """This callback's state without the writer session and the trainer it serves."""
        state = dict(self.__dict__)
        state["_session"] = state["_session_trainer"] = None
        return state

    @override
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Join the writer session of ``trainer``."""
        with self.guard("writer session", "setup"):
            self._join(trainer)

    @override
    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Leave the writer session (the last callback to leave closes the writers); release."""
        self._leave()
        self.release()

    @override
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Leave the writer session and release (Lightning calls no ``teardown`` after this).

        The run ends ``failed`` in the run record, with the exception's type and message
        (``interrupted`` for Ctrl-C), and the session says so in one line.
        """
        self._leave(exception)
        self.release()

    def release(self) -> None:
        """Drop what this callback holds for one trainer call (hooks, captured rows).

        Called at ``teardown`` and on an exception, after leaving the writer session, and by
        subclasses when ``setup`` starts again; this base holds nothing.
        """

    settings: Any = None
    """The callback's settings: a frozen dataclass made once from its constructor's arguments."""

    def learnscope_settings(self) -> CallbackSettings:
        """This callback's class name and the arguments it was made with, for the run record.

        They are the arguments its :attr:`settings` object holds; functions are given by their
        qualified name (see :func:`learnscope.records.run.json_setting`).

        Example:
            >>> import dataclasses
            >>> @dataclasses.dataclass(frozen=True)
            ... class EverySettings:
            ...     n: int = 5
            ...     fn: Any = None
            >>> class Every(LearnscopeCallback):
            ...     n = setting("n")
            ...     def __init__(self, n: int = 5, fn=None) -> None:
            ...         super().__init__()
            ...         self.settings = EverySettings(n, fn)
            >>> every = Every(fn=len)
            >>> every.learnscope_settings(), every.n
            (CallbackSettings(name='Every', settings={'n': 5, 'fn': 'builtins.len'}), 5)
        """
        return CallbackSettings.of(type(self).__name__, self.settings)

    def given(self, argument: str) -> bool:
        """Whether ``argument`` was passed when this callback was made (not left to its default).

        Example:
            >>> class Every(LearnscopeCallback):
            ...     def __init__(self, n: int = 5, m: int = 1) -> None:
            ...         super().__init__()
            >>> every = Every(5)
            >>> every.given("n"), every.given("m")
            (True, False)
        """
        return argument in getattr(self, "_given", frozenset())

    def writer_session(self, trainer: Any) -> WriterSession | None:
        """The writer session this callback holds for ``trainer`` (joined in ``setup``), if any.

        The other learnscope callbacks of ``trainer`` find the session here
        (:func:`~learnscope.lightning_glue.session.find`).
        """
        held = self._session_trainer() if self._session_trainer is not None else None
        return self._session if held is trainer and trainer is not None else None

    def _join(self, trainer: Any) -> WriterSession:
        held = self.writer_session(trainer)
        if held is not None and not session.outlived(held, trainer):
            return held
        if self._session is not None:
            self._leave()
        self._session = session.join(trainer, self)
        self._session_trainer = weakref.ref(trainer)
        return self._session

    def _leave(self, exception: BaseException | None = None) -> None:
        trainer = self._session_trainer() if self._session_trainer is not None else None
        if trainer is not None and self._session is not None:
            session.leave(trainer, self, exception, session=self._session)
        self._session = self._session_trainer = None

    def writers(
        self,
        trainer: Any,
        shows_method: str | Sequence[str] | None = None,
        *,
        warn_without_logger: bool = True,
    ) -> BackgroundWriters:
        """The writers of ``trainer``'s loggers, shared with the other learnscope callbacks.

        Args:
            trainer: The Lightning trainer.
            shows_method: When given, warn once per logger whose writer cannot show records of
                this :class:`~learnscope.plugins.Writer` method (or of any of these methods,
                named in one warning), and once when there is no logger at all.
            warn_without_logger: Whether to warn when there is no logger at all.

        Returns:
            The writers, failure-isolated, written on a worker thread; none on ranks other than
            zero.
        """
        joined = self._join(trainer)
        if shows_method is not None:
            methods = (shows_method,) if isinstance(shows_method, str) else tuple(shows_method)
            joined.tell_unshown(methods, warn_without_logger=warn_without_logger)
        return joined.writers()

    @property
    def switched_off(self) -> set[str]:
        """The diagnostics a failure switched off (see :class:`Parts`)."""
        return self.parts.switched_off

    def is_on(self, part: str) -> bool:
        """Whether diagnostic ``part`` is still switched on."""
        return self.parts.is_on(part)

    def guard(self, part: str, record: str | None = None) -> contextlib.AbstractContextManager:
        """Run a diagnostic; on failure log it once and switch it off (:meth:`Parts.guard`)."""
        return self.parts.guard(part, record)


def setting(path: str, doc: str | None = None) -> property:
    """A read-only attribute of a callback that reads ``path`` of its :attr:`settings`.

    Args:
        path: The settings' attribute, dotted for one of its parts (``"reading.mask_fn"``).
        doc: The attribute's description.

    Example:
        >>> from types import SimpleNamespace
        >>> class Shows:
        ...     settings = SimpleNamespace(n=3, reading=SimpleNamespace(mask_fn=None))
        ...     n, mask_fn = setting("n"), setting("reading.mask_fn")
        >>> Shows().n, Shows().mask_fn
        (3, None)
    """
    read = operator.attrgetter(f"settings.{path}")
    return property(read, doc=doc or f"The ``{path}`` of this callback's settings (read-only).")


def _given_arguments(function: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> frozenset[str]:
    """The names of the arguments a call of ``function`` (an ``__init__``) was given.

    Example:
        >>> def make(self, a, b=2, *, c=None): ...
        >>> sorted(_given_arguments(make, [1], {"c": 3}))
        ['a', 'c']
    """
    try:
        bound = inspect.signature(function).bind(None, *args, **kwargs)
    except (TypeError, ValueError):
        return frozenset(kwargs)
    return frozenset(list(bound.arguments)[1:])  # without self


LearnscopeCallback.__bases__ = _imported_callbacks()  # those imported before learnscope
