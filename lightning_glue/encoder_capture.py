"""One forward hook on a module, shared by every callback that captures its output.

:class:`EmbeddingProjector` (on evaluation batches) and :class:`TrainingHelper` (on check steps)
both read the output of an encoder. Instead of a hook each, a callback joins the module's
:class:`EncoderCapture` and arms it for the batches it wants: the hook is registered once, when
the first callback joins, and removed when the last one leaves. On every other forward it
returns at once.

Each armed callback gets the output of the first forward after it armed (a second forward in
the same batch, such as a contrastive model's second view, is not taken), as a
:class:`CapturedOutput`: ``select`` is applied to it once per function, so two callbacks given
the same ``select`` pick the embedding once.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

Receiver = Callable[["CapturedOutput"], None]

_CAPTURES: weakref.WeakKeyDictionary[torch.nn.Module, EncoderCapture] = weakref.WeakKeyDictionary()


def submodule(pl_module: torch.nn.Module, name: str, who: str) -> torch.nn.Module:
    """The sub-module ``name`` of ``pl_module``.

    Raises:
        ValueError: It has none of that name; the message lists the names it has.

    Example:
        >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2))
        >>> submodule(model, "0", "Demo")
        Linear(in_features=2, out_features=2, bias=True)
        >>> submodule(model, "encoder", "Demo")
        Traceback (most recent call last):
        ValueError: Demo: Sequential has no sub-module 'encoder'; available: 0
    """
    try:
        return pl_module.get_submodule(name)
    except AttributeError:
        names = [name for name, _ in pl_module.named_modules() if name]
        raise ValueError(
            f"{who}: {type(pl_module).__name__} has no sub-module {name!r}; available: "
            f"{', '.join(names) or '(none)'}"
        ) from None


class CapturedOutput:
    """What one forward of the module gave, with each ``select`` applied at most once.

    Args:
        output: The module's output, as the forward hook got it.

    Example:
        >>> calls = []
        >>> def first(out):
        ...     calls.append(1)
        ...     return out[0]
        >>> captured = CapturedOutput((torch.ones(2, 3), "extra"))
        >>> captured.selected(first).shape, captured.selected(first).shape, len(calls)
        (torch.Size([2, 3]), torch.Size([2, 3]), 1)
        >>> captured.selected(None)[1]
        'extra'
    """

    def __init__(self, output: Any) -> None:
        self.output = output
        self._picked: dict[int, tuple[Callable[..., Any], Any, BaseException | None]] = {}

    def selected(self, select: Callable[..., Any] | None) -> Any:
        """``select(output)`` (the output itself without ``select``), computed once per function.

        Raises:
            Exception: What ``select`` raised, again for every caller that gives it.
        """
        if select is None:
            return self.output
        known = self._picked.get(id(select))
        if known is None or known[0] is not select:
            try:
                known = (select, select(self.output), None)
            except Exception as error:
                known = (select, None, error)
            self._picked[id(select)] = known
        if known[2] is not None:
            raise known[2]
        return known[1]


class EncoderCapture:
    """The forward hook on one module, and the callbacks that want its output.

    Get a module's capture with :meth:`of`; a callback :meth:`join` s it in ``setup`` (giving
    the function that receives the output), :meth:`arm` s it at the start of each batch it
    captures, :meth:`disarm` s it at the end of the batch, and :meth:`leave` s it in
    ``teardown``. Everything runs on the training thread.

    Example:
        >>> encoder = torch.nn.Linear(3, 2)
        >>> seen = []
        >>> owner = object()
        >>> capture = EncoderCapture.of(encoder)
        >>> _ = capture.join(owner, lambda out: seen.append(out.selected(None).shape))
        >>> _ = encoder(torch.ones(4, 3))  # not armed: nothing taken
        >>> capture.arm(owner)
        >>> _ = encoder(torch.ones(5, 3)), encoder(torch.ones(6, 3))  # only the first forward
        >>> seen
        [torch.Size([5, 2])]
        >>> EncoderCapture.of(encoder) is capture, capture.hooked
        (True, True)
        >>> capture.leave(owner)
        >>> capture.hooked, len(encoder._forward_hooks)
        (False, 0)
    """

    def __init__(self) -> None:
        self._receivers: dict[int, tuple[Any, Receiver]] = {}  # by id of the owner
        self._armed: list[int] = []  # owners waiting for the next forward, in the order armed
        self._hook: torch.utils.hooks.RemovableHandle | None = None
        self._module: weakref.ref[torch.nn.Module] | None = None

    @staticmethod
    def of(module: torch.nn.Module) -> EncoderCapture:
        """The capture of ``module``, the same for every callback (made at first use)."""
        capture = _CAPTURES.get(module)
        if capture is None:
            capture = _CAPTURES[module] = EncoderCapture()
            capture._module = weakref.ref(module)
        return capture

    @property
    def hooked(self) -> bool:
        """Whether the forward hook is registered (some callback has joined)."""
        return self._hook is not None

    def join(self, owner: object, receive: Receiver) -> EncoderCapture:
        """Give ``owner``'s captured outputs to ``receive``; registers the hook for the first.

        Joining again replaces the receiver and disarms the owner.

        Returns:
            This capture.
        """
        self._receivers[id(owner)] = (owner, receive)
        self.disarm(owner)
        module = self._module() if self._module is not None else None
        if self._hook is None and module is not None:
            self._hook = module.register_forward_hook(self._on_forward)
        return self

    def leave(self, owner: object) -> None:
        """Forget ``owner``; the hook is removed when the last callback leaves."""
        self._receivers.pop(id(owner), None)
        self.disarm(owner)
        if not self._receivers and self._hook is not None:
            self._hook.remove()
            self._hook = None

    def arm(self, owner: object) -> None:
        """Give the output of the module's next forward to ``owner`` (one forward only)."""
        if id(owner) in self._receivers and id(owner) not in self._armed:
            self._armed.append(id(owner))

    def disarm(self, owner: object) -> None:
        """Take no output for ``owner`` until it arms again."""
        if id(owner) in self._armed:
            self._armed.remove(id(owner))

    def is_armed(self, owner: object) -> bool:
        """Whether ``owner`` waits for the next forward."""
        return id(owner) in self._armed

    def _on_forward(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not self._armed:
            return  # the common case: no callback captures this forward
        armed, self._armed = self._armed, []
        captured = CapturedOutput(output)
        for key in armed:
            entry = self._receivers.get(key)
            if entry is not None:
                entry[1](captured)
