"""Safe file names and atomic writes, shared by every writer that puts files on disk."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import socket
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from learnscope.run_directory.file_names import (
    LAYOUT_FILE,
    PROJECTOR_CONFIG,
    RECORD_FILE,
    lock_name,
)

log = logging.getLogger("learnscope")

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_HASHED = re.compile(r"-[0-9a-f]{8}\Z")  # how a name changed by safe_name ends


def safe_name(text: str) -> str:
    """Turn any tag into one safe path component.

    Characters other than letters, digits, ``.``, ``_`` and ``-`` become ``_``, leading dots are
    dropped (no ``..``), and when anything was changed the name is cut to 80 characters and a
    short hash of the original is appended. A name that already ends like such a hash
    (``-`` and 8 hex digits) gets one too, so two different tags never share a name, and every
    name is ASCII and at most 89 characters long. Text that cannot be encoded (lone surrogates)
    is hashed all the same.

    Args:
        text: The tag, such as ``"encoder/validate"`` or ``"../../x"``.

    Returns:
        A non-empty name with no path separator.

    Example:
        >>> safe_name("encoder")
        'encoder'
        >>> safe_name("../../x").startswith("x-")
        True
        >>> safe_name("x-0123abcd") != "x-0123abcd"
        True
    """
    cleaned = _UNSAFE.sub("_", text).lstrip("._") or "embedding"
    if cleaned != text or _HASHED.search(text):
        digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        cleaned = f"{cleaned[:80]}-{digest}"
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


def write_atomic(path: Path, data: bytes | memoryview) -> None:
    """Write ``data`` to ``path`` so that a reader never sees half a file.

    The bytes go to a temporary file in the same directory, then ``os.replace`` moves it in.
    The temporary file is named ``.<name>.<pid>-<host>.<random>.tmp`` (``<host>`` is a short
    hash of the host name), so that :func:`remove_orphan_temporaries` can tell one left by a
    crashed process from one being written right now.

    Args:
        path: Destination; its parent directories are created.
        data: The whole content (any bytes-like object; a memoryview is written uncopied).

    Example:
        >>> import tempfile
        >>> target = Path(tempfile.mkdtemp()) / "a" / "b.txt"
        >>> write_atomic(target, b"hi")
        >>> target.read_bytes()
        b'hi'
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{path.name}.{os.getpid()}-{_HOST}."
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a log file is for every reader
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_HOST = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:6]
# write_atomic's temporaries: ``.<name>.<pid>-<host>.<random>.tmp``, and before that naming
# ``.<name>.<random>.tmp`` (mkstemp's 8 characters).
_TEMPORARY = re.compile(r"^\..+?\.(?:(?P<pid>\d+)-(?P<host>[0-9a-f]{6})\.)?[a-z0-9_]{8}\.tmp$")
ORPHAN_AGE_S = 300.0


def remove_orphan_temporaries(run_dir: Path, min_age_s: float = ORPHAN_AGE_S) -> list[Path]:
    """Remove temporaries that :func:`write_atomic` left behind in a crash, and stale locks.

    Only files named as :func:`write_atomic` names its temporaries are considered, directly in
    ``run_dir`` and anywhere under ``run_dir/projector`` (never through a symbolic link: a
    ``projector`` folder that is a link to a folder outside the run is left alone). One is
    removed when its writer process, on this host, is no longer running, or when it is older
    than ``min_age_s`` seconds (a temporary of another host, or of the older naming without a
    process id; no atomic write takes minutes). The lock files of learnscope's shared files in
    ``run_dir`` (``.<name>.lock``, see :func:`locked`) left by a killed process go too, each
    only when no process holds its lock (the remover takes the lock, as :func:`locked` does to
    release it).
    Any failure to list or remove is ignored.

    Args:
        run_dir: A run directory learnscope writes in.
        min_age_s: Age past which a temporary is removed whoever wrote it.

    Returns:
        The files removed.

    Example:
        >>> import tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> (run / ".tensor.bin.999999999-000000.abcd1234.tmp").write_bytes(b"x")
        1
        >>> [p.name for p in remove_orphan_temporaries(run, min_age_s=0)]
        ['.tensor.bin.999999999-000000.abcd1234.tmp']
    """
    now = time.time()
    removed = []
    folders = [run_dir]
    projector = run_dir / "projector"
    if not projector.is_symlink():  # a linked folder leads out of the run: never cleaned
        with contextlib.suppress(OSError):
            folders += [Path(root) for root, _, _ in os.walk(projector)]  # links not followed
    for folder in folders:
        try:
            names = [e.name for e in os.scandir(folder) if e.is_file(follow_symlinks=False)]
        except OSError:
            continue
        for name in names:
            match = _TEMPORARY.match(name)
            if match is None:
                continue
            path = folder / name
            try:
                old = now - path.stat().st_mtime >= min_age_s
                pid, host = match["pid"], match["host"]
                dead = pid is not None and host == _HOST and not _running(int(pid))
                if old or dead:
                    path.unlink()
                    removed.append(path)
            except OSError:
                continue
    for name in STALE_LOCK_NAMES:
        path = run_dir / lock_name(name)
        if remove_unheld_lock(path):
            removed.append(path)
    return removed


# The shared files of a run directory that learnscope updates under a lock (see run_files).
STALE_LOCK_NAMES = (PROJECTOR_CONFIG, LAYOUT_FILE, RECORD_FILE)


def remove_unheld_lock(path: Path) -> bool:
    """Remove the lock file ``path`` of :func:`locked` when no process holds its lock.

    Returns:
        Whether it was removed (``False`` when missing, held, or on any failure).

    Example:
        >>> import tempfile
        >>> lock = Path(tempfile.mkdtemp()) / ".config.lock"
        >>> _ = lock.write_bytes(b"")
        >>> remove_unheld_lock(lock), lock.exists()
        (True, False)
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return False
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by a live process: BlockingIOError
        now, held = os.stat(path), os.fstat(fd)
        if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino) or not stat.S_ISREG(held.st_mode):
            return False
        os.unlink(path)  # while locked, as locked() releases: a waiter then retries
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def move_aside(path: Path, error: Exception, what: str, then: str) -> Path:
    """Rename the unreadable file ``path`` to ``<name>.corrupt-<UTC time>``, with a warning.

    Args:
        path: The file that cannot be read.
        error: Why not.
        what: What it is, for the message (``"the projector config"``).
        then: What happens next, for the message (``"a new config is started"``).

    Returns:
        Where it was moved.

    Example:
        >>> import tempfile
        >>> bad = Path(tempfile.mkdtemp()) / "layout.json"
        >>> _ = bad.write_text("{")
        >>> move_aside(bad, ValueError("cut short"), "the layout", "a new one is started").name
        'layout.json.corrupt-...'
    """
    aside = path.with_name(aside_name(path.name, lambda name: path.with_name(name).exists()))
    os.replace(path, aside)
    say_moved_aside(str(path), what, error, aside.name, then)
    return aside


def aside_name(name: str, taken: Callable[[str], bool]) -> str:
    """``<name>.corrupt-<UTC time>``, with ``-2``, ``-3``, ... while ``taken`` says it is used.

    Example:
        >>> aside_name("layout.json", lambda name: False).startswith("layout.json.corrupt-")
        True
    """
    moment = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = f"{name}.corrupt-{moment}"
    n = 1
    while taken(aside):
        n += 1
        aside = f"{name}.corrupt-{moment}-{n}"
    return aside


def say_moved_aside(location: str, what: str, error: Exception, aside: str, then: str) -> None:
    """The one warning that an unreadable file was moved aside (see :func:`move_aside`)."""
    log.warning(
        "learnscope: %s %s cannot be read (%s: %s); it is moved aside to %s and %s",
        what,
        location,
        type(error).__name__,
        error,
        aside,
        then,
    )


def _running(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (``True`` when unsure)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` for a read-modify-write of a shared file.

    The lock file is created, locked, and removed again before the lock is released, so no
    empty ``.lock`` file stays in the run directory. A process that was waiting on a file
    removed meanwhile sees that ``path`` no longer names the file it locked and tries again,
    so two processes never both hold the lock. Where the platform has no ``fcntl`` (Windows)
    it does not lock.

    Args:
        path: The lock file; created if missing, removed on release.

    Example:
        >>> import tempfile
        >>> lock = Path(tempfile.mkdtemp()) / ".lock"
        >>> with locked(lock):
        ...     lock.exists()
        True
        >>> lock.exists()
        False
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                now = os.stat(path)
            except FileNotFoundError:
                continue  # removed by the holder we waited for: lock the next one
            held = os.fstat(fd)
            if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
                continue  # replaced by a newer lock file
            try:
                yield
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(path)  # while still locked: a waiter then retries
            return
        finally:
            os.close(fd)  # releases the lock


def append_lines(path: Path, data: bytes) -> None:
    r"""Append ``data`` (whole lines) to the file ``path`` in one write, under its lock.

    A file whose last line was cut short (by a crash) is first ended with a newline, so that
    the cut line never glues itself to the next one. Never through a link.

    Raises:
        OSError: When the file cannot be written (a full disk); it is then cut back to its
            length before the call, so nothing of ``data`` is left in it.

    Example:
        >>> import tempfile
        >>> log_file = Path(tempfile.mkdtemp()) / "log.jsonl"
        >>> append_lines(log_file, b"a\n")
        >>> append_lines(log_file, b"b\n")
        >>> log_file.read_bytes()
        b'a\nb\n'
    """
    with locked(path.parent / lock_name(path.name)):
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(fd, view) :]
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)  # no cut line left, and its pages free again
                raise
        finally:
            os.close(fd)
