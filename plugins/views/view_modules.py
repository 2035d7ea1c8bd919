"""The view's front end: plain ES modules in ``static/``, served one by one or joined into one.

The learnscope tab serves each module at its own route (TensorBoard loads ``index.js`` in an
iframe, which imports the rest by relative URL). A standalone page (``learnscope export``, the
W&B panel) has no server to import from, so it gets the modules joined into one inline module
script: each module after those it imports, its ``import`` statements dropped (its ``export``
declarations stay: an inline module may export, though nothing imports it). Joined, the
modules share one scope, so the joiner accepts
only what it can join faithfully: ``import { a, b } from './module.js';`` (no renaming, no
default or namespace import), ``export`` before a ``function``, ``class``, ``const`` or ``let``
declaration, no top-level name defined in two modules and no import cycle; anything else is
refused with a ``ValueError`` that names the module and the statement. Nothing here imports
torch.

The category colours are one file, ``static/palette.json``, that the pictures read too
(:mod:`learnscope.plugins.palette`). ES modules cannot import JSON in every browser, so
``colours.js`` holds an empty object marked ``/* palette.json */`` where :func:`module_sources`
writes the file's content: the tab's route and the joined pages both serve the module with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from learnscope.plugins.palette import read_palette

STATIC = Path(__file__).parent / "static"
ENTRY = "index.js"
PALETTE_SLOT = "/* palette.json */ {}"  # in colours.js: where the palette file's content goes

_IMPORT = re.compile(r"^import\b[^;]*;[ \t]*(?:\n|$)", re.M)
_NAMED_IMPORT = re.compile(r"import\s*\{([^}]*)\}\s*from\s*'\./([\w.-]+\.js)'\s*;\s*", re.S)
_DECLARATION = r"(?:async\s+)?function\*?\s|class\s|const\s|let\s"
_OTHER_EXPORT = re.compile(rf"^export\b(?!\s+(?:{_DECLARATION}))[^\n]*", re.M)
_TOP_LEVEL = re.compile(
    r"^(export\s+)?(?:async\s+)?(?:function\*?|class|const|let|var)\s+([A-Za-z_$][\w$]*)", re.M
)


def module_sources(folder: str | Path = STATIC) -> dict[str, str]:
    """The text of every module (``*.js``) in ``folder``, by file name, as it is served.

    A module holding :data:`PALETTE_SLOT` gets the content of ``folder``'s ``palette.json`` there
    (checked by :func:`~learnscope.plugins.palette.read_palette`), so that the tab's colours are
    the pictures'.

    Example:
        >>> sources = module_sources()
        >>> "index.js" in sources, '"other": "#c8c8c8"' in sources["colours.js"]
        (True, True)
    """
    sources = {p.name: p.read_text(encoding="utf-8") for p in sorted(Path(folder).glob("*.js"))}
    if any(PALETTE_SLOT in text for text in sources.values()):
        palette = read_palette(Path(folder) / "palette.json").as_json()
        filled = PALETTE_SLOT.replace("{}", palette)
        sources = {name: text.replace(PALETTE_SLOT, filled) for name, text in sources.items()}
    return sources


def _imports(name: str, text: str) -> list[tuple[list[str], str]]:
    """``(names, module)`` of each import statement of module ``name``, checked."""
    found = []
    for match in _IMPORT.finditer(text):
        statement = match.group(0).strip()
        parsed = _NAMED_IMPORT.fullmatch(statement)
        names = [n.strip() for n in parsed.group(1).split(",") if n.strip()] if parsed else []
        if parsed is None or not all(re.fullmatch(r"[A-Za-z_$][\w$]*", n) for n in names):
            shown = " ".join(statement.split())
            raise ValueError(
                f"{name}: '{shown}' is not joined: write import {{ a, b }} from './module.js'; "
                "(no renaming, no default or namespace import)"
            )
        found.append((names, parsed.group(2)))
    return found


def _exports(text: str) -> set[str]:
    return {m.group(2) for m in _TOP_LEVEL.finditer(text) if m.group(1)}


def dependency_order(sources: Mapping[str, str], entry: str = ENTRY) -> list[str]:
    r"""The modules ``entry`` needs, each after the modules it imports, ``entry`` last.

    Raises:
        ValueError: When a module imports one that is not in ``sources``, a name the other
            does not export, or the imports form a cycle.

    Example:
        >>> dependency_order({"index.js": "import { f } from './f.js';\nf();\n",
        ...                   "f.js": "export function f() {}\n"}, "index.js")
        ['f.js', 'index.js']
    """
    if entry not in sources:
        raise ValueError(f"no module {entry} among {sorted(sources)}")
    order: list[str] = []
    path: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        if name in path:
            cycle = " -> ".join([*path[path.index(name) :], name])
            raise ValueError(f"import cycle: {cycle}")
        path.append(name)
        other = _OTHER_EXPORT.search(sources[name])
        if other is not None:
            raise ValueError(
                f"{name}: '{other.group(0).strip()}' is not joined: write export before a "
                "function, class, const or let declaration"
            )
        for names, module in _imports(name, sources[name]):
            if module not in sources:
                raise ValueError(f"{name} imports from {module}, which is not one of the modules")
            visit(module)
            missing = [n for n in names if n not in _exports(sources[module])]
            if missing:
                raise ValueError(f"{name} imports {missing[0]!r}, which {module} does not export")
        path.pop()
        order.append(name)

    visit(entry)
    return order


def join_modules(sources: Mapping[str, str], entry: str = ENTRY) -> str:
    r"""One module script that runs what the module ``entry`` runs, with what it imports.

    Args:
        sources: Module text by file name (as imported: ``'./name.js'``).
        entry: The module to run.

    Returns:
        The modules in :func:`dependency_order`, without their ``import`` statements, each
        after a ``// name`` line.

    Raises:
        ValueError: Naming the module and statement that cannot be joined faithfully.

    Example:
        >>> print(join_modules({"index.js": "import { f } from './f.js';\nf();\n",
        ...                     "f.js": "export function f() {}\n"}, "index.js"))
        // f.js
        export function f() {}
        <BLANKLINE>
        // index.js
        f();
        <BLANKLINE>
    """
    order = dependency_order(sources, entry)
    defined: dict[str, str] = {}
    parts = []
    for name in order:
        text = sources[name]
        for match in _TOP_LEVEL.finditer(text):
            first = defined.setdefault(match.group(2), name)
            if first != name:
                raise ValueError(
                    f"{match.group(2)!r} is defined in both {first} and {name} "
                    "(joined, the modules share one scope)"
                )
        parts.append(f"// {name}\n{_IMPORT.sub('', text)}")
    return "\n".join(parts)


def joined_source(folder: str | Path = STATIC) -> str:
    r"""The shipped view modules joined for an inline script (see :func:`join_modules`).

    Example:
        >>> "import " in joined_source()
        False
    """
    return join_modules(module_sources(folder), ENTRY)
