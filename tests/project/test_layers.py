"""The import graph of the package, read from the source: no circles, and layers kept apart.

Every module of ``learnscope`` (the core), ``learnscope.plugins`` (``plugins/``) and
``learnscope.lightning_glue`` (``lightning_glue/``) is parsed (``ast``, nothing is imported) and
each ``import`` statement becomes an edge of one of three kinds:

* ``module``: run when the module is imported (at its top level, in a class body, in an ``if``
  or ``try`` there);
* ``function``: run when a function is called (an import inside a ``def`` or ``lambda``);
* ``type``: never run, under ``if TYPE_CHECKING:``.

A circle of ``module`` and ``function`` edges fails, named edge by edge with where each import
is. So does a circle in the core (``learnscope/`` without the writers and callbacks) that needs a
``type`` edge: the core's modules are layered, and a circle there hides behind a lazy import.

The pure analyses (:data:`PURE`) hold no state and run no collective: none of them imports,
even indirectly, the histories, buffers, health checks or collectives (:data:`STATEFUL`) or
``torch.distributed``; the caller passes the reduction over ranks in. And, as
docs/architecture.md says, the core never imports Lightning, TensorBoard or wandb, and the
writers never import Lightning.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
# Each installed package and the folder it comes from (pyproject's package-dir).
PACKAGES = {
    "learnscope": ROOT / "learnscope",
    "learnscope.plugins": ROOT / "plugins",
    "learnscope.lightning_glue": ROOT / "lightning_glue",
}
LAYERED = ("module", "function")  # the kinds of edge that close a failing circle
PURE = (
    "learnscope.autocorrelation.analysis",
    "learnscope.collapse.metrics",
    "learnscope.embeddings.neighbourhoods",
)
# Modules that hold state or run collectives (a package stands for all its modules).
STATEFUL = (
    "learnscope.autocorrelation.sampled_history",
    "learnscope.autocorrelation.sampled_columns",
    "learnscope.autocorrelation.sampled_gradients",
    "learnscope.autocorrelation.ring_buffer",
    "learnscope.autocorrelation.optimizer_histories",
    "learnscope.collapse.row_buffer",
    "learnscope.model.ranks",
    "learnscope.health",
    "learnscope.plugins",
    "learnscope.lightning_glue",
)
DISTRIBUTED = "torch.distributed"
DASHBOARDS = ("lightning", "pytorch_lightning", "lightning_fabric", "tensorboard", "wandb")
LIGHTNING = ("lightning", "pytorch_lightning", "lightning_fabric")


@dataclass(frozen=True)
class Edge:
    """One import statement: who imports what, of which kind, and where."""

    source: str
    target: str  # a package module, or the dotted name of an outside module
    kind: str  # "module", "function" or "type"
    where: str  # path:line

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({self.kind}, {self.where})"


def module_files() -> dict[str, Path]:
    """Every module of the package by its installed name (a package by its own name)."""
    found = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


MODULES = module_files()


def within(name: str, prefix: str) -> bool:
    """Whether the dotted ``name`` is ``prefix`` or lies inside it."""
    return name == prefix or name.startswith(prefix + ".")


def package_module(name: str) -> str | None:
    """The package module that importing ``name`` runs last: ``name`` or its nearest parent."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(
    node: ast.AST, kind: str = "module"
) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement in ``node`` with its kind (``node``'s own kind being ``kind``)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node, kind
        return
    if kind == "module" and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        kind = "function"
    if isinstance(node, ast.If) and is_type_checking(node.test):
        for child in node.body:
            yield from imports(child, "type")
        for child in node.orelse:
            yield from imports(child, kind)
        return
    for child in ast.iter_child_nodes(node):
        yield from imports(child, kind)


def targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement brings in: package modules where it names them."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parent = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            parent = parent.rpartition(".")[0]
        base = f"{parent}.{base}" if base else parent
    named = [f"{base}.{alias.name}" for alias in node.names]
    submodules = [name for name in named if name in MODULES]
    return submodules if len(submodules) == len(named) else [base, *submodules]


def edges_of(module: str) -> list[Edge]:
    """The import edges of one module, to package modules and to outside modules."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node, kind in imports(tree):
        where = f"{path.relative_to(ROOT)}:{node.lineno}"
        for name in targets(node, module, path.name == "__init__.py"):
            target = package_module(name) or name
            if target != module:
                found.append(Edge(module, target, kind, where))
    return found


GRAPH = {module: edges_of(module) for module in MODULES}


def inside_edges(kinds: Iterable[str], modules: Iterable[str] = MODULES) -> dict[str, list[Edge]]:
    """The edges of ``kinds`` between package modules among ``modules``."""
    chosen = set(modules)
    return {
        module: [e for e in GRAPH[module] if e.kind in kinds and e.target in chosen]
        for module in chosen
    }


def circles(graph: dict[str, list[Edge]]) -> list[list[Edge]]:
    """One circle, as its edges, in each strongly connected part of ``graph`` (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    parts: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for edge in graph[module]:
            if edge.target not in index:
                visit(edge.target)
                low[module] = min(low[module], low[edge.target])
            elif edge.target in stack:
                low[module] = min(low[module], index[edge.target])
        if low[module] == index[module]:
            part = set()
            while True:
                member = stack.pop()
                part.add(member)
                if member == module:
                    break
            if len(part) > 1:
                parts.append(part)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [circle_in(graph, part) for part in parts]


def circle_in(graph: dict[str, list[Edge]], part: set[str]) -> list[Edge]:
    """A shortest circle through the first module of a strongly connected ``part``."""
    start = min(part)
    paths: dict[str, list[Edge]] = {start: []}
    queue = [start]
    for module in queue:
        for edge in graph[module]:
            if edge.target == start:
                return [*paths[module], edge]
            if edge.target in part and edge.target not in paths:
                paths[edge.target] = [*paths[module], edge]
                queue.append(edge.target)
    raise AssertionError(f"no circle through {start}")  # a strongly connected part has one


def described(found: list[list[Edge]]) -> str:
    return "\n\n".join("\n".join(f"  {edge}" for edge in circle) for circle in found)


def reachable(start: str, kinds: Iterable[str]) -> dict[str, Edge | None]:
    """Every module that importing ``start`` may import, with the edge that first reached it.

    Importing a module runs its parent packages first: they are reached too.
    """
    reached: dict[str, Edge | None] = {start: None}
    queue = [start]
    for module in queue:
        parents = [module.rsplit(".", depth)[0] for depth in range(1, module.count(".") + 1)]
        outgoing = [e for e in GRAPH.get(module, []) if e.kind in kinds]
        outgoing += [Edge(module, parent, "parent", "-") for parent in parents]
        for edge in outgoing:
            if edge.target not in reached:
                reached[edge.target] = edge
                if edge.target in MODULES:
                    queue.append(edge.target)
    return reached


def chain(reached: dict[str, Edge | None], module: str) -> str:
    """How ``module`` was reached: the edges from the start."""
    edges = []
    edge = reached[module]
    while edge is not None:
        edges.append(edge)
        edge = reached[edge.source]
    return " <- ".join(str(edge) for edge in edges)


def test_the_graph_is_read() -> None:
    """The graph holds the package's modules and its known edges of each kind."""
    assert {"learnscope.autocorrelation.analysis", "learnscope.plugins.pipeline.figures"} <= set(
        MODULES
    )
    assert "learnscope.lightning_glue.model_autocorrelation" in MODULES
    edges = {(e.source, e.target, e.kind) for module in GRAPH for e in GRAPH[module]}
    assert (
        "learnscope.autocorrelation.optimizer_histories",
        "learnscope.autocorrelation.analysis",
        "module",
    ) in edges
    assert (
        "learnscope.model.parameter_shards",
        DISTRIBUTED + ".tensor._utils",
        "function",
    ) in edges
    assert any(kind == "type" for _, _, kind in edges)


def test_no_import_circle() -> None:
    """No circle of imports that run, at import or in a function, among the package's modules."""
    found = circles(inside_edges(LAYERED))
    assert not found, "import circles (edges that run):\n" + described(found)


def test_no_circle_in_the_core_even_for_type_checkers() -> None:
    """The core's modules are layered: not even a ``TYPE_CHECKING`` import closes a circle."""
    core = [m for m in MODULES if not within(m, "learnscope.plugins")]
    core = [m for m in core if not within(m, "learnscope.lightning_glue")]
    found = circles(inside_edges((*LAYERED, "type"), core))
    assert not found, "import circles in the core:\n" + described(found)


@pytest.mark.parametrize("module", PURE)
def test_the_pure_analyses_import_no_state_and_no_collective(module: str) -> None:
    """Nothing a pure analysis imports, directly or not, holds state or talks to other ranks."""
    reached = reachable(module, ("module", "function", "type"))
    bad = [
        name
        for name in reached
        if within(name, DISTRIBUTED) or any(within(name, stateful) for stateful in STATEFUL)
    ]
    assert not bad, "\n".join(f"{name}: {chain(reached, name)}" for name in bad)


def test_the_core_imports_no_dashboard_and_the_writers_no_lightning() -> None:
    """docs/architecture.md: the core never imports Lightning, TensorBoard or wandb; the writers
    (and views) never import Lightning. Only the callbacks do."""
    wrong = []
    for module, edges in GRAPH.items():
        if within(module, "learnscope.lightning_glue"):
            continue
        banned = LIGHTNING if within(module, "learnscope.plugins") else DASHBOARDS
        wrong += [e for e in edges if any(within(e.target, name) for name in banned)]
    assert not wrong, "\n".join(str(edge) for edge in wrong)
