"""The base of learnscope's callbacks: one definition for both Lightning packages, fails softly.

Lightning comes as two packages, ``lightning.pytorch`` and ``pytorch_lightning``, and each
Trainer accepts only callbacks derived from its own ``Callback``. learnscope serves both from one
definition of each callback, in two namespaces that each import only their own package:

* ``learnscope.lightning_glue`` (:mod:`~learnscope.lightning_glue.lightning_pytorch`): the
  callbacks of ``lightning.pytorch``;
* :mod:`learnscope.lightning_glue.pytorch_lightning`: the same callbacks for
  ``pytorch_lightning``.

A callback is defined once, on :class:`LearnscopeCallback`, which derives from no Lightning
package (this module and the callbacks' own modules import none); each namespace makes its
callbacks from those definitions and its package's ``Callback`` (:func:`lightning_callback`)
once, when it is imported. So a callback's class never changes: ``isinstance(callback,
Callback)`` does not depend on what was imported when, and ``issubclass`` holds as LightningCLI
checks a ``class_path``. Importing a Lightning package has side effects (each points
``lightning_utilities``' rank-zero messages at its own logger, so the other's ``setLevel`` no
longer silences them): ``import learnscope``, the core, the writers, the views and the
definitions import neither, and a namespace imports its own package only, which its user's
Trainer needs anyway. The classes a namespace makes keep the definitions' names and
``__qualname__`` (so checkpoint ``state_key`` strings), and pickle and copy (Lightning's
``ddp_spawn`` pickles the callbacks).

A callback is plain state between trainer calls: ``pickle``, ``copy.deepcopy`` and
``torch.save(trainer)`` take its settings and what it keeps across fits, and leave out what it
holds for one trainer call (the writer session and the trainer it serves), as Lightning's own
callbacks do.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import logging
import operator
import sys
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from typing_extensions import override

from learnscope.lightning_glue import session
from learnscope.lightning_glue.parts import Parts
from learnscope.lightning_glue.session import WriterSession
from learnscope.plugins.pipeline.background import BackgroundWriters
from learnscope.records.run import CallbackSettings
from learnscope.run_directory.write_limits import WriteLimits

log = logging.getLogger("learnscope")

# Each Lightning package and the learnscope namespace of its callbacks.
NAMESPACES = (
    ("lightning.pytorch", "learnscope.lightning_glue"),
    ("pytorch_lightning", "learnscope.lightning_glue.pytorch_lightning"),
)

if TYPE_CHECKING:  # for type checkers, a callback of ``lightning.pytorch``
    from lightning.pytorch import Callback as _Base
else:  # the definition derives from no Lightning package: see lightning_callback
    _Base = object

Definition = TypeVar("Definition", bound="LearnscopeCallback")


def lightning_callback(
    definition: type[Definition], callback: type, module: str
) -> type[Definition]:
    """``definition`` as a callback of the Lightning package whose ``Callback`` is ``callback``.

    The class made derives from both, in that order, and keeps the definition's name,
    ``__qualname__`` (the checkpoint ``state_key``) and docstring; ``module`` is where it is
    found (pickle and LightningCLI's ``class_path`` name it so). A namespace makes each of its
    callbacks once, when it is imported.

    Example:
        >>> import lightning.pytorch as pl
        >>> class Hello(LearnscopeCallback):
        ...     pass
        >>> made = lightning_callback(Hello, pl.Callback, __name__)
        >>> issubclass(made, (Hello, pl.Callback)), made.__qualname__, made().state_key
        (True, 'Hello', 'Hello')
    """
    namespace = {
        "__module__": module,
        "__qualname__": definition.__qualname__,
        "__doc__": definition.__doc__,
    }
    return cast("type[Definition]", type(definition.__name__, (definition, callback), namespace))


def missing_lightning(package: str, error: ModuleNotFoundError) -> ModuleNotFoundError:
    """The error of a namespace whose Lightning ``package`` is not installed.

    It names the namespace of the other package when that one is installed, else the install.

    Example:
        >>> error = ModuleNotFoundError("No module named 'pytorch_lightning'")
        >>> print(missing_lightning("pytorch_lightning", error))  # doctest: +NORMALIZE_WHITESPACE
        learnscope.lightning_glue.pytorch_lightning serves pytorch_lightning's Trainer, and
        pytorch_lightning cannot be imported (No module named 'pytorch_lightning'); with
        lightning.pytorch, use: from learnscope.lightning_glue import EmbeddingProjector,
        ModelAutocorrelation, TrainingHelper
    """
    (_, namespace), *_ = (entry for entry in NAMESPACES if entry[0] == package)
    others = [entry for entry in NAMESPACES if entry[0] != package and _installed(entry[0])]
    text = f"{namespace} serves {package}'s Trainer, and {package} cannot be imported ({error})"
    if others:
        other, where = others[0]
        names = "EmbeddingProjector, ModelAutocorrelation, TrainingHelper"
        text += f"; with {other}, use: from {where} import {names}"
    else:
        text += "; pip install 'learnscope[lightning]'"
    return ModuleNotFoundError(text, name=error.name)


def _installed(package: str) -> bool:
    """Whether ``package`` can be found, without importing it (nor its parent, for a top name).

    Example:
        >>> _installed("json"), _installed("no_such_package_here")
        (True, False)
    """
    try:
        return importlib.util.find_spec(package.partition(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def _lightning_callback_check(callback: object) -> None:
    """Raise unless ``callback`` derives from the ``Callback`` of an imported Lightning package.

    A definition made by hand (``learnscope.lightning_glue.embedding_projector.
    EmbeddingProjector``) is no Lightning callback: a Trainer would call its hooks, but not save
    its state in checkpoints.

    Raises:
        TypeError: Naming the namespaces' callbacks to use instead.
    """
    bases = [getattr(sys.modules.get(package), "Callback", None) for package, _ in NAMESPACES]
    if any(isinstance(base, type) and isinstance(callback, base) for base in bases):
        return
    kind = type(callback)
    uses = " or ".join(f"{where}.{kind.__name__} ({package})" for package, where in NAMESPACES)
    raise TypeError(
        f"{kind.__module__}.{kind.__qualname__} is learnscope's definition of the callback, not "
        f"a Lightning callback; use {uses}"
    )


class LearnscopeCallback(_Base):
    """Common plumbing: the trainer's writer session, and diagnostics that fail softly.

    In ``setup`` a callback joins the writer session of its trainer (see
    :mod:`learnscope.lightning_glue.session`): one writer per logger, shared by every learnscope
    callback on that trainer, closed when the last one leaves in ``teardown``. Subclasses that
    override ``setup``, ``teardown`` or ``on_exception`` call ``super()`` first. They reach the
    writers with :meth:`writers` (empty on ranks other than zero), and run each diagnostic
    inside :meth:`guard`, which logs a failure once with its traceback and switches that
    diagnostic off instead of stopping training.

    It derives from no Lightning package: a namespace makes each callback from its definition
    and its package's ``Callback`` (:func:`lightning_callback`; see the module's description).

    The learnscope callbacks of one trainer share one writer session, and so its
    :class:`~learnscope.run_directory.write_limits.WriteLimits`: those that callbacks give as
    ``write_limits`` (:func:`~learnscope.lightning_glue.session.shared_limits`).

    A subclass makes its settings once, in its constructor: one frozen dataclass of its
    arguments (validated there), held as :attr:`settings` and handed to the parts that read
    them; its public attributes are read-only views of it (:func:`setting`). The run record
    shows that object's arguments (:meth:`learnscope_settings`).

    A pickled or copied callback holds no writer session: it joins one at its next ``setup``.

    Args:
        write_limits: The limits of the fit's writes, if this callback gives them.

    Example:
        >>> import lightning.pytorch as pl
        >>> class Hello(LearnscopeCallback, pl.Callback):
        ...     pass
        >>> hello = Hello()
        >>> hello.switched_off, isinstance(hello, (Hello, pl.Callback)), hello.state_key
        (set(), True, 'Hello')
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """An instance of ``cls``.

        The names of the arguments given are kept for :meth:`given`.
        """
        callback = super().__new__(cls)
        callback._given = _given_arguments(cls.__init__, args, kwargs)
        return callback

    def __init__(self, write_limits: WriteLimits | None = None) -> None:
        super().__init__()
        self.write_limits = write_limits  # shared by the trainer's callbacks: see setup
        self._session: WriterSession | None = None
        self._session_trainer: weakref.ref[Any] | None = None
        self.parts = Parts(type(self).__name__)  # its diagnostics, and which are switched off

    def __getattr__(self, name: str) -> Any:
        """Only for a missing attribute: a definition has no checkpoint key (``state_key``).

        Lightning reads a callback's ``state_key`` before any hook: a definition given to a
        Trainer fails there with the namespaces' callbacks named (:func:`lightning_callback`).
        """
        if name == "state_key":
            _lightning_callback_check(self)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __getstate__(self) -> dict[str, Any]:
        """This callback's state without the writer session and the trainer it serves."""
        state = dict(self.__dict__)
        state["_session"] = state["_session_trainer"] = None
        return state

    @override
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Join the writer session of ``trainer``.

        Raises:
            TypeError: This callback is a definition, not a Lightning callback (see
                :func:`lightning_callback`).
            ValueError: Another learnscope callback of ``trainer`` gives other
                ``write_limits``: which apply is the user's to say, not a diagnostic's.
        """
        _lightning_callback_check(self)
        session.shared_limits(trainer, self)
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
