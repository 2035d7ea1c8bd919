"""A small disk for the tests of a full disk: a tmpfs of a few hundred KiB, filled on demand."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

DISK_KIB = 1024


@contextlib.contextmanager
def small_disk(path: Path, size_kib: int = DISK_KIB) -> Iterator[Path]:
    """A ``tmpfs`` of ``size_kib`` KiB mounted at ``path``; unmounted afterwards."""
    path.mkdir(parents=True)
    command = ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "learnscope-test", str(path)]
    try:
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as error:
        said = getattr(error, "stderr", None) or error
        said = " ".join(str(said).split())
        pytest.skip(f"cannot mount a small tmpfs ({said}); needs root or CAP_SYS_ADMIN")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def fill(disk: Path, leave: int = 0) -> int:
    """Write a file that takes all free space of ``disk`` but ``leave`` bytes; the bytes free."""
    free = free_bytes(disk)
    with (disk / "filler").open("ab") as handle:
        while free > leave:
            try:
                handle.write(b"\0" * min(free - leave, 1 << 16))
                handle.flush()
            except OSError:
                break
            free = free_bytes(disk)
    return free_bytes(disk)


def free_bytes(disk: Path) -> int:
    """The bytes free on ``disk`` for an unprivileged writer."""
    stat = os.statvfs(disk)
    return stat.f_bavail * stat.f_frsize
