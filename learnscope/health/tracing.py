"""Name the first module whose output is not finite, with hooks armed for one step."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn


class NonFiniteOutputTracer:
    """Name the first module whose output is not finite, with hooks armed for one step.

    :meth:`arm` puts a forward hook on every module; each hook queues, on the device, whether
    the module's floating-point inputs and outputs hold a NaN or an infinity. :meth:`disarm`
    removes the hooks and brings the flags to the host in one transfer. Hooks fire when a module
    finishes, so inner modules come before the module that calls them. The module named is the
    first whose output is not finite; when its inputs were finite it produced the values itself
    (and its own non-finite parameters, if any, are counted with one more transfer), otherwise
    they came from the data or from code outside any module.

    Args:
        model: The model to trace.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
        >>> with torch.no_grad():
        ...     _ = model[1].weight.fill_(float("nan"))
        >>> tracer = NonFiniteOutputTracer(model)
        >>> tracer.arm()
        >>> _ = model(torch.ones(1, 2))
        >>> module, message = tracer.disarm()
        >>> module
        '1'
        >>> message
        "module '1' gave a non-finite output from finite inputs; 1 of its parameters are not finite"
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._flags: list[tuple[str, Tensor, Tensor]] = []

    @property
    def armed(self) -> bool:
        """Whether the hooks are in place.

        Example:
            >>> import torch
            >>> NonFiniteOutputTracer(torch.nn.Linear(1, 1)).armed
            False
        """
        return bool(self._handles)

    def arm(self) -> None:
        """Hook every module until :meth:`disarm` (a no-op when already armed).

        Example:
            >>> import torch
            >>> tracer = NonFiniteOutputTracer(torch.nn.Linear(1, 1))
            >>> tracer.arm()
            >>> tracer.armed
            True
        """
        if self.armed:
            return
        self._flags = []
        for name, module in self.model.named_modules():
            label = name or type(module).__name__
            self._handles.append(module.register_forward_hook(self._hook_for(label)))

    def _hook_for(self, label: str) -> Callable[[nn.Module, Any, Any], None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            outputs = _floating_tensors(output)
            if outputs:
                with torch.no_grad():
                    self._flags.append(
                        (label, _any_nonfinite(_floating_tensors(args)), _any_nonfinite(outputs))
                    )

        return hook

    def disarm(self) -> tuple[str, str] | None:
        """Remove the hooks; return the first module with a non-finite output, and a message.

        Returns:
            ``(module name, message)``, or ``None`` when every output was finite.

        Example:
            >>> import torch
            >>> tracer = NonFiniteOutputTracer(torch.nn.Linear(1, 1))
            >>> tracer.arm()
            >>> _ = tracer.model(torch.ones(1, 1))
            >>> tracer.disarm() is None
            True
        """
        for handle in self._handles:
            handle.remove()
        self._handles = []
        flags, self._flags = self._flags, []
        if not flags:
            return None
        device = flags[0][1].device
        with torch.no_grad():
            values = torch.stack([t.to(device) for _, i, o in flags for t in (i, o)]).tolist()
        for index, (label, _, _) in enumerate(flags):
            bad_in, bad_out = values[2 * index], values[2 * index + 1]
            if bad_out:
                return label, self._describe(label, bool(bad_in))

        return None

    def _describe(self, label: str, bad_in: bool) -> str:
        if bad_in:
            return (
                f"module {label!r} is the first whose output is not finite, and its inputs were "
                "already not finite: check the batch, or code that runs outside any module"
            )
        module = dict(self.model.named_modules()).get(label, self.model)
        params = list(module.parameters(recurse=False))
        with torch.no_grad():
            bad = int(torch.stack([_any_nonfinite([p]) for p in params]).sum()) if params else 0
        tail = f"; {bad} of its parameters are not finite" if bad else ""
        return f"module {label!r} gave a non-finite output from finite inputs{tail}"


def _floating_tensors(value: Any) -> list[Tensor]:
    """The floating-point tensors in a (nested) output: tensor, tuple, list or dict."""
    if isinstance(value, Tensor):
        return [value] if value.is_floating_point() or value.is_complex() else []
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _floating_tensors(item)]
    if isinstance(value, Mapping):
        return [t for item in value.values() for t in _floating_tensors(item)]
    return []


def _any_nonfinite(tensors: Sequence[Tensor]) -> Tensor:
    """A 0-d bool tensor, on the device of the first tensor: any NaN or infinity in them."""
    if not tensors:
        return torch.zeros((), dtype=torch.bool)
    device = tensors[0].device
    flags = [(~torch.isfinite(t.detach())).any().to(device) for t in tensors]
    return flags[0] if len(flags) == 1 else torch.stack(flags).any()
