"""One forward hook on a module, shared by every callback that captures its output.

:class:`EmbeddingProjector` (on evaluation batches) and :class:`TrainingHelper` (on check steps)
both read the output of an encoder. Instead of a hook each, a callback joins the module's
:class:`EncoderCapture` and arms it for the batches it wants: the hook is registered once, when
the first callback joins, and removed when the last one leaves. On every other forward it
returns at once.

**Who owns it.** The module does, through that hook: there is no registry. The capture is found
among the module's forward hooks (:meth:`EncoderCapture.of`), lives while the hook is registered
and is dropped with it. A module pickled or deep-copied while the hook is registered (during a
fit) carries a capture that gives nothing to anyone, so ``torch.save(model)`` and
``copy.deepcopy(model)`` work then too, and ``state_dict`` is never touched.

Each armed callback gets the output of the first forward after it armed (a second forward in
the same batch, such as a contrastive model's second view, is not taken), as a
:class:`CapturedOutput`: ``select`` is applied to it once per function, so two callbacks given
the same ``select`` pick the embedding once.

**Compiled models.** Under ``torch.compile`` the hook runs inside the traced graph, and every
Python value it reads becomes a guard of that graph: a value that changes from step to step
(which callbacks are armed, a step number) would compile the graph again at every capture,
until torch's recompile limit stops compiling it (or, with ``fullgraph=True``, stops the fit).
So there the hook decides nothing: it keeps the first output of each batch in one slot, read
through one flag that is ``False`` at the start of every batch (the callbacks call
:meth:`EncoderCapture.batch_started` at every batch start, armed or not), and the output goes to
the armed callbacks at the batch's end (:meth:`EncoderCapture.batch_ended`), on the training
thread, outside the graph. The graph is then the same at every step: learnscope adds no
compilation to a fit. (A forward called twice in one batch as two compiled calls, such as an
LBFGS closure, compiles one variant more for the second call, once.) The output is read at the
batch's end rather than during the forward, so an in-place change the model makes to it later
in the same forward shows in the rows.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from learnscope.embeddings.module_output import embedding_tensor
from learnscope.user_functions import calling

Receiver = Callable[["CapturedOutput"], None]

# torch.compile's "am I being traced?": constant True inside a traced graph (torch 2.3 and newer
# have it in torch.compiler, older ones in torch._dynamo).
_compiling: Callable[[], bool] = getattr(torch.compiler, "is_compiling", None) or (
    torch._dynamo.is_compiling
)


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
        module: The module that gave it (its declared layout tells which axis is the batch's:
            :mod:`learnscope.embeddings.batch_axis`).

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

    def __init__(self, output: Any, module: torch.nn.Module | None = None) -> None:
        self.output = output
        self.module = module
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

    def embedding(self, select: Callable[..., Any] | None, who: str, module: str) -> torch.Tensor:
        """The embedding tensor: ``select(output)``, or the output itself without ``select``.

        The one rule both callbacks read an output by
        (:func:`learnscope.embeddings.module_output.embedding_tensor`).

        Args:
            select: Picks the embedding out of the output; ``None``: the output is it.
            who: The callback, for messages (``"TrainingHelper"``).
            module: The module's dotted name, for messages.

        Raises:
            TypeError: What was given is not a tensor; the message says what it is (its keys,
                items or fields) and the ``select=`` that picks one.
            Exception: What ``select`` raised, with a note naming it.

        Example:
            >>> CapturedOutput({"energy": torch.zeros(4)}).embedding(None, "Demo", "model")
            Traceback (most recent call last):
            ...
            TypeError: Demo: module 'model' gave a dict with keys 'energy' (a tensor of shape \
(4,)), not a tensor. Pass select= a function that picks the embedding out of it, such as \
select=lambda out: out["energy"]; the embedding is a tensor [batch, dim], [nodes, dim] or \
[batch, tokens, dim] (or a feature map [batch, channels, *spatial], with spatial=)
        """
        if select is None:
            return embedding_tensor(self.output, who, module)
        with calling("select", who, self.output, f"the output of module {module!r}"):
            value = self.selected(select)
        return embedding_tensor(value, who, module, selected=True, output=self.output)


class EncoderCapture:
    """The forward hook on one module, and the callbacks that want its output.

    Get a module's capture with :meth:`of`; a callback :meth:`join` s it in ``setup`` (giving
    the function that receives the output), calls :meth:`batch_started` at the start of every
    batch and :meth:`arm` s it on the batches it captures, calls :meth:`batch_ended` then
    :meth:`disarm` at the end of the batch, and :meth:`leave` s it in ``teardown``. Everything
    runs on the training thread.

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
        >>> import copy
        >>> copied = copy.deepcopy(encoder)  # a copy's hook gives nothing to anyone
        >>> capture.arm(owner)
        >>> _ = copied(torch.ones(3, 3))
        >>> EncoderCapture.of(copied) is capture, len(seen)
        (False, 1)
        >>> capture.disarm(owner)
        >>> capture.leave(owner)
        >>> capture.hooked, len(encoder._forward_hooks)
        (False, 0)
    """

    def __init__(self) -> None:
        self._receivers: dict[int, tuple[Any, Receiver]] = {}  # by id of the owner
        self._armed: list[int] = []  # owners waiting for the next forward, in the order armed
        self._hook: torch.utils.hooks.RemovableHandle | None = None
        self._module: weakref.ref[torch.nn.Module] | None = None
        # What a compiled forward left for the batch's end (see the module's description):
        # the flag is the only value the traced hook reads, False at every batch start.
        self._traced_taken = False
        self._traced_output: Any = None

    def __reduce__(self) -> tuple[type[EncoderCapture], tuple[()]]:
        """Pickled or copied (with a module, during a fit): a capture no callback has joined."""
        return (EncoderCapture, ())

    @staticmethod
    def of(module: torch.nn.Module) -> EncoderCapture:
        """The capture of ``module``, the same for every callback (made at first use).

        It is found among the module's forward hooks, the one a callback's :meth:`join`
        registered; without one, a new capture (its hook registered by its first :meth:`join`).
        """
        for hook in list(module._forward_hooks.values()):
            capture = getattr(hook, "__self__", None)
            if isinstance(capture, EncoderCapture) and capture.captures(module):
                return capture
        capture = EncoderCapture()
        capture._module = weakref.ref(module)
        return capture

    def captures(self, module: torch.nn.Module) -> bool:
        """Whether this is the capture of ``module`` (not of a module it was copied from)."""
        return self._module is not None and self._module() is module

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
            self.batch_started()  # drop what a compiled forward kept

    def arm(self, owner: object) -> None:
        """Give the output of the module's next forward to ``owner`` (one forward only)."""
        if id(owner) in self._receivers and id(owner) not in self._armed:
            self._armed.append(id(owner))

    def disarm(self, owner: object) -> None:
        """Take no output for ``owner`` until it arms again."""
        if id(owner) in self._armed:
            self._armed.remove(id(owner))

    def batch_started(self) -> None:
        """A batch starts: under ``torch.compile``, its first forward's output will be kept.

        Called by every joined callback at every batch start, armed or not, so that the traced
        hook finds the same state at every step (see the module's description).
        """
        self._traced_taken = False
        self._traced_output = None

    def batch_ended(self) -> None:
        """A batch ended: what a compiled forward kept goes to the callbacks armed for it.

        Eager forwards were given out by the hook itself; this hands out the output that a
        compiled forward kept (the first of the batch), then empties the slot.
        """
        output = self._traced_output
        self.batch_started()
        if output is not None and self._armed:
            self._give(output, self._module() if self._module is not None else None)

    def _on_forward(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if _compiling():
            self._keep_traced(output)
        elif self._armed:  # else the common case: no callback captures this forward
            self._give(output, module)

    def _keep_traced(self, output: Any) -> None:
        """Inside a compiled graph: keep the batch's first output, deciding nothing else."""
        if not self._traced_taken:
            self._traced_taken = True
            self._traced_output = output

    def _give(self, output: Any, module: torch.nn.Module | None) -> None:
        """Hand ``module``'s ``output`` to every armed callback (once each), disarming them."""
        armed, self._armed = self._armed, []
        captured = CapturedOutput(output, module)
        for key in armed:
            entry = self._receivers.get(key)
            if entry is not None:
                entry[1](captured)
