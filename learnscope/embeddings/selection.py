"""Choose the same points at every snapshot: a fixed, id-based sample that needs no first pass.

Each point's id is hashed to a 62-bit key, and a snapshot keeps the ``max_points`` points with
the smallest keys (a bottom-k sample). The choice depends only on the ids, never on the order in
which batches arrive, so a shuffled loader, a resumed run, or another rank picks the same points.
When a snapshot sees only part of the data (``limit_val_batches``, an interrupted epoch), it
keeps the smallest keys among what it saw: the same points as the full snapshots wherever the
two overlap, instead of a set frozen by whatever the first snapshot happened to see.
"""

from __future__ import annotations

import hashlib
import numbers
from collections.abc import Sequence
from typing import Any

import torch

_MASK32 = 0xFFFFFFFF
_SEEDS = (0x9E3779B9, 0x85EBCA6B)


def id_keys(ids: torch.Tensor | Sequence[Any]) -> torch.Tensor:
    """Stable 62-bit selection keys of ids, as ``int64``, on the device of ``ids``.

    Integer ids (a tensor or a list of ints) are hashed with integer arithmetic on their device
    (no host transfer); any other ids (strings, tuples) are hashed on the host from their text.
    The same id always gets the same key, in every process and on every run.

    Args:
        ids: One id per point: an integer tensor, or a sequence of integers (Python or numpy)
            or strings.

    Returns:
        ``int64`` keys in ``[0, 2**62)``, one per id.

    Raises:
        TypeError: For a floating-point or boolean tensor of ids.

    Example:
        >>> keys = id_keys([3, 1, 2])
        >>> bool((keys == id_keys(torch.tensor([3, 1, 2]))).all()), keys.dtype
        (True, torch.int64)
    """
    if isinstance(ids, torch.Tensor):
        if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
            raise TypeError(f"ids must be integers or strings, got a {ids.dtype} tensor")
        return _int_keys(ids.reshape(-1).to(torch.int64))
    values = list(ids)
    if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values):
        return _int_keys(torch.tensor([int(v) for v in values], dtype=torch.int64).reshape(-1))
    return torch.tensor([_text_key(str(v)) for v in values], dtype=torch.int64)


def mix_keys(keys: torch.Tensor, salt: torch.Tensor) -> torch.Tensor:
    """New keys from ``keys`` and a small integer ``salt`` (such as a token position).

    Example:
        >>> a = mix_keys(id_keys([7, 7]), torch.tensor([0, 1]))
        >>> bool(a[0] != a[1])
        True
    """
    return _int_keys(keys ^ salt.to(keys.device, torch.int64))


def smallest(keys: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the ``k`` smallest distinct keys, ordered by key (all when there are fewer).

    A key that appears more than once (the same id seen by two processes) counts once: the
    index of its first occurrence is kept.

    Args:
        keys: ``int64`` keys from :func:`id_keys`.
        k: How many to keep.

    Returns:
        ``int64`` indices on the device of ``keys``.

    Example:
        >>> smallest(torch.tensor([30, 10, 20, 10]), 2).tolist()
        [1, 2]
    """
    order = torch.argsort(keys, stable=True)
    ordered = keys[order]
    first = torch.ones_like(ordered, dtype=torch.bool)
    first[1:] = ordered[1:] != ordered[:-1]
    return order[first][:k]


def _int_keys(x: torch.Tensor) -> torch.Tensor:
    # Fold to 32 bits, then two independent 32-bit integer hashes (every product stays below
    # 2**59, so int64 arithmetic never overflows), packed into 62 bits.
    folded = (x ^ (x >> 32)) & _MASK32
    halves = []
    for seed in _SEEDS:
        h = folded ^ seed
        h = (((h >> 16) ^ h) * 0x45D9F3B) & _MASK32
        h = (((h >> 16) ^ h) * 0x45D9F3B) & _MASK32
        halves.append(((h >> 16) ^ h) >> 1)
    return (halves[0] << 31) | halves[1]


def _text_key(text: str) -> int:
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 2
