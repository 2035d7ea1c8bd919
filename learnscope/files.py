"""Safe file names and atomic writes, shared by every writer that puts files on disk."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """Turn any tag into one safe path component.

    Characters other than letters, digits, ``.``, ``_`` and ``-`` become ``_``, leading dots are
    dropped (no ``..``), and when anything was changed a short hash of the original is appended,
    so two different tags never share a name.

    Args:
        text: The tag, such as ``"encoder/validate"`` or ``"../../x"``.

    Returns:
        A non-empty name with no path separator.

    Example:
        >>> safe_name("encoder")
        'encoder'
        >>> safe_name("../../x").startswith("x-")
        True
    """
    cleaned = _UNSAFE.sub("_", text).lstrip("._") or "embedding"
    if cleaned != text:
        cleaned = f"{cleaned[:80]}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"
    return cleaned


def inside(root: Path, *parts: str) -> Path:
    """Join ``parts`` under ``root`` and check that the result stays inside ``root``.

    Args:
        root: The directory that must contain the result.
        *parts: Path components, already made safe with :func:`safe_name`.

    Returns:
        The joined path.

    Raises:
        ValueError: If the path would leave ``root``.

    Example:
        >>> inside(Path("/logs/run"), "projector", "a.bin").as_posix()
        '/logs/run/projector/a.bin'
    """
    path = root.joinpath(*parts)
    resolved_root = root.resolve()
    if resolved_root not in path.resolve().parents:
        raise ValueError(f"refusing to write {path} outside {root}")
    return path


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader never sees half a file.

    The bytes go to a temporary file in the same directory, then ``os.replace`` moves it in.

    Args:
        path: Destination; its parent directories are created.
        data: The whole content.

    Example:
        >>> import tempfile
        >>> target = Path(tempfile.mkdtemp()) / "a" / "b.txt"
        >>> write_atomic(target, b"hi")
        >>> target.read_bytes()
        b'hi'
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a log file is for every reader
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` for a read-modify-write of a shared file.

    Where the platform has no ``fcntl`` (Windows) it does not lock.

    Args:
        path: The lock file; created if missing.

    Example:
        >>> import tempfile
        >>> with locked(Path(tempfile.mkdtemp()) / ".lock"):
        ...     pass
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
