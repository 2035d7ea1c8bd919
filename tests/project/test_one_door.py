"""Every file operation in a run directory goes through the run folder (``learnscope/storage/``).

Every module of the core (outside ``learnscope/storage/``), of ``plugins/`` and of
``lightning_glue/`` is parsed (``ast``, nothing is imported), and each call that touches the
file system directly fails the test, named with its module and line: the built-in ``open``,
``os`` calls on files and folders (``os.remove``, ``os.replace``, ``os.makedirs``,
``os.statvfs``, ...), ``os.path`` calls that ask the disk (``exists``, ``isdir``, ...),
anything of ``shutil``, ``tempfile`` or ``fcntl``, and ``pathlib`` methods that read, write,
list or remove (``write_text``, ``read_bytes``, ``mkdir``, ``unlink``, ``iterdir``, ...).
A run folder does these once for a local disk and once for an object store, so no caller asks
which kind it has.

The exceptions are named in :data:`ALLOWED`, each with why the file is no run folder's.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).parents[2]
SEARCHED = (ROOT / "learnscope", ROOT / "plugins", ROOT / "lightning_glue")
STORAGE = ROOT / "learnscope" / "storage"

OS_CALLS = frozenset(
    {
        "remove",
        "unlink",
        "replace",
        "rename",
        "renames",
        "makedirs",
        "mkdir",
        "rmdir",
        "removedirs",
        "open",
        "scandir",
        "listdir",
        "walk",
        "stat",
        "lstat",
        "statvfs",
        "chmod",
        "utime",
        "truncate",
        "ftruncate",
        "symlink",
        "link",
        "fsync",
    }
)
OS_PATH_CALLS = frozenset(
    {
        "exists",
        "lexists",
        "isdir",
        "isfile",
        "islink",
        "getsize",
        "getmtime",
        "realpath",
    }
)
MODULES = frozenset({"shutil", "tempfile", "fcntl"})
PATH_METHODS = frozenset(
    {
        "write_text",
        "write_bytes",
        "read_text",
        "read_bytes",
        "mkdir",
        "rmdir",
        "unlink",
        "iterdir",
        "glob",
        "rglob",
        "symlink_to",
        "is_dir",
        "is_file",
        "is_symlink",
        "resolve",
        "lstat",
        "chmod",
    }
)
# (module relative to the repository, the call) -> why it is allowed
ALLOWED = {
    ("plugins/views/view_page.py", "Path.write_text"): (
        "`learnscope export` writes the page to the file the user names: the user's own file, "
        "not a run folder's (a run folder would also remove debris in the user's folder)"
    ),
    ("plugins/views/view_modules.py", "Path.read_text"): (
        "the tab's own JavaScript modules, shipped in the package, not a run's files"
    ),
    ("plugins/views/view_modules.py", "Path.glob"): (
        "lists the tab's own JavaScript modules in the package"
    ),
    ("plugins/palette.py", "Path.read_text"): "the package's own palette.json",
}


def modules() -> Iterator[Path]:
    for folder in SEARCHED:
        for path in sorted(folder.rglob("*.py")):
            if STORAGE not in path.parents:
                yield path


def file_calls(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``(line, call)`` for every call in ``tree`` that touches the file system directly."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "open":
            yield node.lineno, "open"
        if not isinstance(func, ast.Attribute):
            continue
        owner = func.value
        if isinstance(owner, ast.Name) and owner.id == "os" and func.attr in OS_CALLS:
            yield node.lineno, f"os.{func.attr}"
        elif isinstance(owner, ast.Name) and owner.id in MODULES:
            yield node.lineno, f"{owner.id}.{func.attr}"
        elif (
            isinstance(owner, ast.Attribute)
            and owner.attr == "path"
            and isinstance(owner.value, ast.Name)
            and owner.value.id == "os"
            and func.attr in OS_PATH_CALLS
        ):
            yield node.lineno, f"os.path.{func.attr}"
        elif func.attr in PATH_METHODS:
            yield node.lineno, f"Path.{func.attr}"
        elif func.attr in ("statvfs", "disk_usage"):
            yield node.lineno, func.attr


def test_no_module_outside_storage_touches_the_file_system() -> None:
    found, used = [], set()
    for path in modules():
        relative = path.relative_to(ROOT).as_posix()
        for line, call in file_calls(ast.parse(path.read_text(encoding="utf-8"))):
            if (relative, call) in ALLOWED:
                used.add((relative, call))
            else:
                found.append(f"{relative}:{line}: {call}")
    assert not found, "file operations outside learnscope/storage/:\n" + "\n".join(found)
    assert used == set(ALLOWED), f"exceptions no longer needed: {set(ALLOWED) - used}"


def test_the_check_finds_each_kind_of_call() -> None:
    source = """
open("x")
os.remove(p)
os.path.exists(p)
shutil.rmtree(p)
Path(p).write_bytes(b"")
os.statvfs(p)
folder.write("x", b"")
"""
    calls = [call for _, call in file_calls(ast.parse(source))]
    assert calls == ["open", "os.remove", "os.path.exists", "shutil.rmtree"] + [
        "Path.write_bytes",
        "os.statvfs",
    ]
