"""No module holds mutable state of its own: every cache, registry and queue has an owner.

A module-level dict, list or set (or a weak dictionary, a deque, a queue, ``threading.local()``)
is state shared by every trainer, writer and thread of the process, with no lifetime and no
close: it outlives fits, leaks between them and cannot be pickled with its owner. The package's
modules (``learnscope/``, ``plugins/``, ``lightning_glue/``) are read as syntax trees, and every
assignment among their module-level statements (also inside a module-level ``if``, ``try`` or
``with``) of such a container fails the test, as does a module-level function memoised with
``functools.cache`` or ``lru_cache`` that takes arguments (its table grows with them). State
belongs to an object with a lifetime (the writer session, a writer, a view); a constant table is
a tuple, a ``frozenset`` or a ``types.MappingProxyType``. The few exceptions are listed in
:data:`ALLOWED`, each with its reason.
"""

from __future__ import annotations

import ast
import fnmatch
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("learnscope", "lightning_glue", "plugins")

# Constructors of mutable containers, registries and queues, by their last name.
MUTABLE_CALLS = frozenset(
    {
        "list",
        "dict",
        "set",
        "bytearray",
        "fromkeys",  # dict.fromkeys(...)
        "WeakKeyDictionary",
        "WeakValueDictionary",
        "WeakSet",
        "deque",
        "defaultdict",
        "OrderedDict",
        "Counter",
        "ChainMap",
        "local",  # threading.local()
        "Queue",
        "SimpleQueue",
        "LifoQueue",
        "PriorityQueue",
    }
)
MUTABLE_NODES = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
MEMOISERS = frozenset({"cache", "lru_cache"})

# A module's export list: read by ``import *`` and documentation tools, never changed.
EXEMPT_NAMES = frozenset({"__all__"})

IN_FLUX = "object storage work"  # entries of modules being rewritten: they go with that work
# (module path or fnmatch pattern, name) -> why it may stay; a pattern keeps an entry through a
# move of its module (plugins/wandb/autocorrelation.py, plugins/wandb_autocorrelation.py). Prefer
# a tuple, frozenset or MappingProxyType.
ALLOWED = {
    ("learnscope/storage/*.py", "_PACKAGES"): (
        "constant table: the package of a URL scheme's file system; its module is being written "
        "(object storage work)"
    ),
    ("plugins/__init__.py", "_MODULES"): (
        "constant table for the package's lazy __getattr__ (name -> module); never changed"
    ),
    ("lightning_glue/__init__.py", "_MODULES"): (
        "constant table for the package's lazy __getattr__ (name -> module); never changed"
    ),
    ("lightning_glue/cli.py", "COMMANDS"): "constant table of the command line's subcommands",
    ("lightning_glue/loaders.py", "STAGE_LOADERS"): (
        "constant table: a stage's trainer attribute holding its loaders; never changed"
    ),
    ("plugins/wandb*autocorrelation.py", "_KIND_WORDS"): "constant table: a kind in words",
}


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def module_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements run when the module is imported: those of ``if``, ``try``, ``with`` too."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.For, ast.While)):
            yield from module_statements(node.body + node.orelse)
        elif isinstance(node, ast.With):
            yield from module_statements(node.body)
        elif isinstance(node, ast.Try):
            handlers = [stmt for handler in node.handlers for stmt in handler.body]
            yield from module_statements(node.body + handlers + node.orelse + node.finalbody)


def call_name(node: ast.expr) -> str | None:
    """The last name of what ``node`` calls (``weakref.WeakSet()``: ``WeakSet``)."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def is_mutable(value: ast.expr | None) -> bool:
    return isinstance(value, MUTABLE_NODES) or call_name(value) in MUTABLE_CALLS


def assigned_names(node: ast.stmt) -> list[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]  # type: ignore[attr-defined]
    return [ast.unparse(target) for target in targets]


def memoised_with_arguments(node: ast.stmt) -> bool:
    """Whether ``node`` is a function with parameters memoised by ``functools.cache`` or alike."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    memoised = any(
        (call_name(d) if isinstance(d, ast.Call) else ast.unparse(d).split(".")[-1]) in MEMOISERS
        for d in node.decorator_list
    )
    arguments = node.args
    takes = arguments.posonlyargs + arguments.args + arguments.kwonlyargs
    return memoised and bool(takes or arguments.vararg or arguments.kwarg)


def module_state() -> dict[tuple[str, str], str]:
    """Every module-level mutable container or memo table: (module, name) -> where and what."""
    found = {}
    for path in modules():
        module = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in module_statements(tree.body):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for name in assigned_names(node) if is_mutable(node.value) else []:
                    if name not in EXEMPT_NAMES:
                        found[(module, name)] = f"{module}:{node.lineno} {ast.unparse(node)[:80]}"
            elif memoised_with_arguments(node):
                name = node.name  # type: ignore[attr-defined]
                found[(module, name)] = f"{module}:{node.lineno} memoised {name}(...)"
    return found


def allowed(module: str, name: str) -> bool:
    return any(fnmatch.fnmatch(module, m) and name == n for m, n in ALLOWED)


def test_no_module_holds_a_mutable_container_a_registry_or_a_cache() -> None:
    unowned = [
        where for (module, name), where in module_state().items() if not allowed(module, name)
    ]
    assert not unowned, (
        "module-level mutable state (give it an owner with a lifetime, or make a constant "
        "table a tuple, frozenset or MappingProxyType):\n" + "\n".join(unowned)
    )


def test_every_allowed_entry_names_state_that_is_still_there() -> None:
    found = module_state()
    stale = [
        f"{module}: {name}"
        for (module, name), why in ALLOWED.items()
        if not any(fnmatch.fnmatch(m, module) and n == name for m, n in found)
        and IN_FLUX not in why  # that work removes its own
    ]
    assert not stale, f"ALLOWED lists state that is gone; remove the entries: {stale}"


def test_the_scan_finds_each_kind_of_module_state() -> None:
    """The scan itself: each kind is found, constant tables and functions' own state are not."""
    source = """
import functools, threading, weakref, collections, types
A = {}
B: list[int] = []
C = set()
D = weakref.WeakKeyDictionary()
E = collections.deque()
F = threading.local()
if True:
    G = dict.fromkeys("ab")
    G |= {"c": None}
try:
    H = collections.OrderedDict()
except ImportError:
    pass
K = (1, 2)
L = frozenset({1})
M = types.MappingProxyType({"a": 1})
__all__ = ["A"]
@functools.lru_cache(8)
def memo(x): return x
@functools.cache
def constant(): return 1
def f():
    local = {}
    return local
"""
    tree = ast.parse(source)
    names = [
        name
        for node in module_statements(tree.body)
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and is_mutable(node.value)
        for name in assigned_names(node)
    ]
    assert names == ["A", "B", "C", "D", "E", "F", "G", "G", "H", "__all__"]
    memoised = [n.name for n in tree.body if memoised_with_arguments(n)]  # type: ignore[attr-defined]
    assert memoised == ["memo"]


# Calls that make an object whose state changes as it is used: at module level it is state of the
# process (a counter, a lock guarding process-wide values, a context variable read by whoever
# runs later on the thread).
STATEFUL_CALLS = frozenset(
    {"ContextVar", "count", "Lock", "RLock", "Condition", "Event", "Semaphore", "BoundedSemaphore"}
)
# (module, what) -> why it may stay, for now: each names the work that removes it.
STATE_PENDING: dict[tuple[str, str], str] = {}


# Attributes whose assignment changes what a class derives from, or what class an object is.
REPARENTING = frozenset({"__bases__", "__class__"})


def reparented(node: ast.AST) -> list[str]:
    """What ``node`` re-parents: ``K.__bases__`` assigned (also augmented, annotated, unpacked
    or by ``setattr(K, "__bases__", ...)``) or an object's ``__class__`` changed."""
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [
            ast.unparse(part)
            for target in targets
            for part in ast.walk(target)
            if isinstance(part, ast.Attribute) and part.attr in REPARENTING
        ]
    if call_name(node) == "setattr" and len(node.args) >= 2:  # type: ignore[attr-defined]
        name = node.args[1]  # type: ignore[attr-defined]
        if isinstance(name, ast.Constant) and name.value in REPARENTING:
            return [f"{ast.unparse(node.args[0])}.{name.value}"]  # type: ignore[attr-defined]
    return []


def process_state(sources: dict[str, str]) -> dict[tuple[str, str], str]:
    """``global`` statements, module-level stateful objects and re-parented classes."""
    found = {}
    for module, text in sources.items():
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                for name in node.names:
                    found[(module, f"global {name}")] = f"{module}:{node.lineno} global {name}"
            for what in reparented(node):
                found[(module, what)] = f"{module}:{node.lineno} {what} = ..."
        for node in module_statements(tree.body):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and (
                call_name(node.value) in STATEFUL_CALLS
            ):
                for name in assigned_names(node):
                    found[(module, name)] = f"{module}:{node.lineno} {ast.unparse(node)[:80]}"
    return found


def package_sources() -> dict[str, str]:
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in modules()}


def test_no_global_statement_stateful_module_object_or_reparented_class() -> None:
    found = process_state(package_sources())
    unowned = [where for key, where in found.items() if key not in STATE_PENDING]
    assert not unowned, (
        "process-wide state (give it an owner with a lifetime and pass it where it is needed):\n"
        + "\n".join(unowned)
    )
    stale = [key for key in STATE_PENDING if key not in found]
    assert not stale, f"STATE_PENDING lists state that is gone; remove the entries: {stale}"


def test_the_state_scan_finds_globals_stateful_objects_and_reparenting() -> None:
    source = """
import contextvars, itertools, threading
A = contextvars.ContextVar("a", default=None)
B = itertools.count()
C: threading.Lock = threading.Lock()
D = (1, 2)
def f():
    global D
    lock = threading.Lock()
class K:
    pass
K.__bases__ = (object,)
def g(cls, obj):
    cls.__bases__ += (K,)
    setattr(cls, "__bases__", (K,))
    obj.__class__ = K
    L.__bases__, n = (K,), 1
"""
    found = process_state({"m.py": source})
    assert sorted(name for _, name in found) == [
        "A",
        "B",
        "C",
        "K.__bases__",
        "L.__bases__",
        "cls.__bases__",
        "global D",
        "obj.__class__",
    ]
