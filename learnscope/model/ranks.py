"""The collectives over the ranks of the default process group, and its size.

The stateful parts (the health checks, the sampled histories) call these; the analyses
(:mod:`learnscope.autocorrelation.analysis`) take the reduction as an argument instead, so that they
run no collective of their own. Without an initialised process group both are trivial.

Example:
    >>> import torch
    >>> sum_over_ranks(torch.ones(2)).tolist(), world_size()  # one process
    ([1.0, 1.0], 1)
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["sum_over_ranks", "world_size"]


def sum_over_ranks(tensor: Tensor) -> Tensor:
    """Sum ``tensor`` in place over every process of the default group; every rank must call.

    Without an initialised process group it is returned as it is.

    Example:
        >>> import torch
        >>> sum_over_ranks(torch.ones(2)).tolist()  # one process
        [1.0, 1.0]
    """
    distributed = torch.distributed
    if distributed.is_available() and distributed.is_initialized():
        distributed.all_reduce(tensor)
    return tensor


def world_size() -> int:
    """The number of processes of the default group (1 without one).

    Example:
        >>> world_size()
        1
    """
    distributed = torch.distributed
    if distributed.is_available() and distributed.is_initialized():
        return distributed.get_world_size()
    return 1
