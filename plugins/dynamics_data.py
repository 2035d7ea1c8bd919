"""Read a run directory into the training-dynamics view model: one JSON-able dict.

The view (``plugins/static/learnscope_view.js``) shows three things learnscope already wrote:

* **Embedding evolution**: per projector tag and stage (``encoder/validate``), the snapshots in
  step order, the aligned ``pca_x``/``pca_y`` metadata columns of each (the same points, matched
  by the ``id`` column), the other metadata columns, and the thumbnails of the last snapshot.
  Coordinates travel as little-endian float16, base64-encoded, ``x0 y0 x1 y1 ...`` per snapshot,
  in the order of ``ids``. At most ``max_points`` points are kept (a fixed subsample chosen by a
  hash of the id, so the same points are kept at every step and in every export), and the view
  says so.
* **Autocorrelation**: the scalars ``autocorrelation/{kind}/{group}/lag_{k}`` and
  ``.../rho1_median`` of the run's event files, as groups x lags at each analysis step.
* **Findings**: the rows of every findings table (``learnscope/findings`` in the Text tab),
  each finding once, at its own step.

What is missing is said in ``messages``, in words a user can act on. Nothing here imports
Lightning or torch: numpy, protobuf and TensorBoard's ``EventAccumulator`` only.
"""

from __future__ import annotations

import base64
import logging
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("learnscope")

FORMAT = "learnscope-view/1"
MAX_POINTS = 5_000  # points animated by default; more are subsampled by id, saying so
MAX_SPRITE_BYTES = 4_000_000  # thumbnails larger than this stay out of the view
CONFIG_NAME = "projector_config.pbtxt"
EVENTS_SUFFIX = ".learnscope"
FINDINGS_TAG = "learnscope/findings/text_summary"
ACF_PREFIX = "autocorrelation/"
PCA_HINT = "run with EmbeddingProjector(aligned_pca=True)"
_ENTRY = re.compile(r"(?s)(.*)/step_(-?\d+)")
_ACF_TAG = re.compile(r"autocorrelation/([^/]+)/(.+)/(lag_(\d+)|rho1_median)")
_ROW = re.compile(r"^\|\s*(-?\d+)\s*\|(.*)\|\s*$")
_NUMERIC_MIN_DISTINCT = 16  # a column of numbers with more distinct values gets a colour bar


def find_runs(logdir: str | Path) -> list[str]:
    """The run directories under ``logdir`` that hold learnscope data, relative, sorted.

    A run holds learnscope data when it has a projector config or a learnscope event file
    (``*.learnscope``). ``logdir`` itself is named ``"."``, as TensorBoard names it.

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / "a" / "version_0").mkdir(parents=True)
        >>> _ = (root / "a" / "version_0" / "x.tfevents.1.learnscope").write_bytes(b"")
        >>> find_runs(root)
        ['a/version_0']
    """
    root = Path(logdir)
    runs = []
    for folder in _folders(root):
        if folder.name == "projector":
            continue
        try:
            names = [p.name for p in folder.iterdir() if p.is_file()]
        except OSError:
            continue
        if CONFIG_NAME in names or any(n.endswith(EVENTS_SUFFIX) for n in names):
            relative = folder.relative_to(root).as_posix()
            runs.append(relative if relative else ".")
    return sorted(runs)


def _folders(root: Path) -> Iterator[Path]:
    """``root`` and every folder below it, not following links, skipping projector data."""
    if not root.is_dir():
        return
    yield root
    for path in sorted(root.iterdir()):
        if path.is_dir() and not path.is_symlink() and path.name not in ("projector", "wandb"):
            yield from _folders(path)


def read_view(run_dir: str | Path, max_points: int = MAX_POINTS, sprites: bool = True) -> dict:
    """The view model of one run directory (see the module docstring for what it holds).

    Args:
        run_dir: A TensorBoard run directory written by learnscope.
        max_points: The most points per tag kept for the animation.
        sprites: Include the thumbnails of each tag's last snapshot (as a PNG data URL).

    Returns:
        A dict that ``json.dumps`` takes: ``format``, ``run``, ``embeddings``,
        ``autocorrelation``, ``findings``, ``messages``.

    Example:
        >>> import tempfile
        >>> view = read_view(tempfile.mkdtemp())
        >>> view["embeddings"], view["messages"][0]
        ([], 'no embedding snapshots (attach EmbeddingProjector)')
    """
    run_dir = Path(run_dir)
    messages: list[str] = []
    embeddings = read_embeddings(run_dir, max_points, sprites, messages)
    scalars, texts = _read_events(run_dir)
    autocorrelation = autocorrelation_view(scalars)
    if not autocorrelation:
        messages.append("no autocorrelation scalars (attach ModelAutocorrelation)")
    findings = findings_view(texts)
    if not texts:
        messages.append("no findings table (attach TrainingHelper)")
    return {
        "format": FORMAT,
        "run": run_dir.name,
        "embeddings": embeddings,
        "autocorrelation": autocorrelation,
        "findings": findings,
        "messages": messages,
    }


def read_embeddings(
    run_dir: Path, max_points: int = MAX_POINTS, sprites: bool = True, messages: list | None = None
) -> list[dict[str, Any]]:
    """One entry per projector tag and stage: its snapshots' aligned PCA coordinates.

    Args:
        run_dir: The run directory.
        max_points: The most points kept per tag.
        sprites: Include the last snapshot's thumbnails.
        messages: Where to say what is missing or was left out.

    Returns:
        Dicts with ``key``, ``steps``, ``ids``, ``xy`` (one float16 base64 string per step),
        ``columns``, ``points_total``, ``points_shown``, ``sprite`` (or ``None``), ``note``.
    """
    messages = messages if messages is not None else []
    by_key: dict[str, list[tuple[int, Any]]] = {}
    for entry in _config_entries(run_dir):
        match = _ENTRY.fullmatch(entry.tensor_name)
        if match is not None and entry.metadata_path:
            by_key.setdefault(match[1], []).append((int(match[2]), entry))
    if not by_key:
        messages.append("no embedding snapshots (attach EmbeddingProjector)")
    views = []
    for key, entries in by_key.items():
        entries.sort(key=lambda pair: pair[0])
        view = _tag_view(run_dir, key, entries, max_points, sprites, messages)
        if view is not None:
            views.append(view)
    return views


def _config_entries(run_dir: Path) -> list[Any]:
    path = run_dir / CONFIG_NAME
    if not path.is_file():
        return []
    from google.protobuf import text_format
    from tensorboard.plugins.projector import projector_config_pb2

    config = projector_config_pb2.ProjectorConfig()
    try:
        text_format.Parse(path.read_text(encoding="utf-8"), config)
    except (text_format.ParseError, UnicodeDecodeError, OSError) as error:
        log.warning("learnscope view: cannot read %s: %s", path, error)
        return []
    return list(config.embeddings)


def read_metadata(path: Path) -> dict[str, list[str]]:
    r"""The columns of a projector metadata TSV (one unnamed ``label`` column when no header).

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "m.tsv"
        >>> _ = path.write_text("label\tid\n3\t7\n1\t8\n")
        >>> read_metadata(path)
        {'label': ['3', '1'], 'id': ['7', '8']}
    """
    lines = [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
    if not lines:
        return {}
    if "\t" not in lines[0]:
        return {"label": lines}
    names = lines[0].split("\t")
    rows = [line.split("\t") for line in lines[1:]]
    return {name: [row[i] if i < len(row) else "" for row in rows] for i, name in enumerate(names)}


def _tag_view(
    run_dir: Path,
    key: str,
    entries: list[tuple[int, Any]],
    max_points: int,
    sprites: bool,
    messages: list[str],
) -> dict[str, Any] | None:
    tables = []
    for step, entry in entries:
        try:
            tables.append((step, entry, read_metadata(run_dir / entry.metadata_path)))
        except (OSError, UnicodeDecodeError) as error:
            messages.append(f"{key}: step {step} skipped, its metadata cannot be read ({error})")
    tables = [t for t in tables if "pca_x" in t[2] and "pca_y" in t[2]]
    if not tables:
        messages.append(f"{key}: no pca_x/pca_y columns; {PCA_HINT}")
        return None
    notes = []
    if "id" in tables[0][2]:
        ids_per_step = [t[2]["id"] for t in tables]
    else:
        sizes = {len(t[2]["pca_x"]) for t in tables}
        if len(sizes) > 1:
            messages.append(f"{key}: no id column and snapshots differ in size; {PCA_HINT}")
            return None
        ids_per_step = [[str(i) for i in range(sizes.pop())] for _ in tables]
        notes.append("no id column: points matched by row")
    common = set(ids_per_step[0]).intersection(*ids_per_step[1:])
    if len(common) < len(set(ids_per_step[0]).union(*ids_per_step[1:])):
        notes.append("only points present in every snapshot are shown")
    ids = [i for i in dict.fromkeys(ids_per_step[-1]) if i in common]
    total = len(ids)
    if total > max_points:
        ids = subsample_ids(ids, max_points)
        notes.append(f"{len(ids):,} of {total:,} points shown (a fixed subsample by id)")
    xy = []
    for (_, _, table), step_ids in zip(tables, ids_per_step, strict=True):
        row = {point: r for r, point in enumerate(step_ids)}
        rows = np.array([row[i] for i in ids], dtype=np.int64)
        coords = np.stack(
            [_floats(table["pca_x"])[rows], _floats(table["pca_y"])[rows]], axis=1
        ).astype("<f2")
        xy.append(base64.b64encode(coords.tobytes()).decode("ascii"))
    last_step, last_entry, last_table = tables[-1]
    last_rows = {point: r for r, point in enumerate(ids_per_step[-1])}
    keep_rows = [last_rows[i] for i in ids]
    columns = [
        _column(name, [values[r] for r in keep_rows])
        for name, values in last_table.items()
        if name not in ("id", "pca_x", "pca_y", "pca_z")
    ]
    sprite = _sprite(run_dir, last_entry, keep_rows) if sprites else None
    if len(tables) == 1:
        notes.append("one snapshot only: nothing moves yet")
    for note in notes:
        messages.append(f"{key}: {note}")
    return {
        "key": key,
        "steps": [t[0] for t in tables],
        "ids": ids,
        "xy": xy,
        "encoding": "float16-le-base64",
        "columns": columns,
        "points_total": total,
        "points_shown": len(ids),
        "sprite": sprite,
        "notes": notes,
    }


def subsample_ids(ids: list[str], count: int) -> list[str]:
    """``count`` of ``ids``, always the same ones for the same ids, kept in their order.

    Each id is ranked by the CRC-32 of its text, so a point is kept or dropped the same way in
    every snapshot, every run that shares its ids, and every export.

    Example:
        >>> subsample_ids([str(i) for i in range(10)], 3) == subsample_ids(
        ...     [str(i) for i in reversed(range(10))], 3)[::-1]
        True
    """
    ranked = sorted(ids, key=lambda i: (zlib.crc32(i.encode("utf-8", "surrogatepass")), i))
    keep = set(ranked[:count])
    return [i for i in ids if i in keep]


def _floats(values: list[str]) -> np.ndarray:
    out = np.empty(len(values), np.float64)
    for i, value in enumerate(values):
        try:
            out[i] = float(value)
        except ValueError:
            out[i] = np.nan
    return out


def _column(name: str, values: list[str]) -> dict[str, Any]:
    """A metadata column: categories and a code per point, or numbers for a colour bar."""
    numbers = _floats(values)
    distinct = sorted(set(values))
    if np.isfinite(numbers).all() and len(distinct) > _NUMERIC_MIN_DISTINCT:
        return {"name": name, "kind": "numeric", "values": [round(float(v), 6) for v in numbers]}
    if np.isfinite(numbers).all():
        distinct.sort(key=float)
    code = {value: i for i, value in enumerate(distinct)}
    return {
        "name": name,
        "kind": "categorical",
        "categories": distinct,
        "codes": [code[v] for v in values],
    }


def _sprite(run_dir: Path, entry: Any, rows: list[int]) -> dict[str, Any] | None:
    if not entry.sprite.image_path or len(entry.sprite.single_image_dim) != 2:
        return None
    path = run_dir / entry.sprite.image_path
    try:
        if path.stat().st_size > MAX_SPRITE_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    width, height = entry.sprite.single_image_dim
    return {
        "png": "data:image/png;base64," + base64.b64encode(data).decode("ascii"),
        "width": int(width),
        "height": int(height),
        "per_row": int(np.ceil(np.sqrt(int(entry.tensor_shape[0])))) if entry.tensor_shape else 1,
        "rows": rows,
    }


def _read_events(run_dir: Path) -> tuple[dict[str, list[tuple[int, float]]], list[tuple]]:
    """Scalars ``autocorrelation/...`` and findings texts of the run's own event files."""
    files = sorted(p for p in run_dir.glob("*tfevents*") if p.is_file())
    if not files:
        return {}, []
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scalars: dict[str, list[tuple[int, float]]] = {}
    texts: list[tuple[int, str]] = []
    for path in files:
        events = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
        try:
            events.Reload()
        except Exception as error:  # a truncated or foreign file: say so, read the rest
            log.warning("learnscope view: cannot read %s: %s", path, error)
            continue
        tags = events.Tags()
        for tag in tags.get("scalars", []):
            if tag.startswith(ACF_PREFIX):
                scalars.setdefault(tag, []).extend((e.step, e.value) for e in events.Scalars(tag))
        if FINDINGS_TAG in tags.get("tensors", []):
            for event in events.Tensors(FINDINGS_TAG):
                for value in event.tensor_proto.string_val:
                    texts.append((event.step, value.decode("utf-8", "replace")))
    return scalars, texts


def autocorrelation_view(scalars: dict[str, list[tuple[int, float]]]) -> list[dict[str, Any]]:
    """Per kind: groups x lags at each analysis step, and lag-1 (median) over steps per group.

    Example:
        >>> view = autocorrelation_view({
        ...     "autocorrelation/grads/head/lag_1": [(20, 0.5), (40, 0.25)],
        ...     "autocorrelation/grads/head/lag_5": [(40, -0.5)],
        ...     "autocorrelation/grads/head/rho1_median": [(20, 0.4), (40, 0.2)]})
        >>> kind = view[0]
        >>> kind["kind"], kind["groups"], kind["lags"], kind["steps"]
        ('grads', ['head'], [1, 5], [20, 40])
        >>> kind["values"][1], kind["rho1"]
        ([[0.25, -0.5]], [[0.4, 0.2]])
    """
    kinds: dict[str, dict[str, Any]] = {}
    for tag, points in scalars.items():
        match = _ACF_TAG.fullmatch(tag)
        if match is None:
            continue
        kind = kinds.setdefault(match[1], {"groups": {}, "lags": set(), "steps": set()})
        group = kind["groups"].setdefault(match[2], {"lags": {}, "rho1": {}})
        for step, value in points:
            kind["steps"].add(step)
            if match[4] is not None:
                lag = int(match[4])
                kind["lags"].add(lag)
                group["lags"].setdefault(lag, {})[step] = value
            else:
                group["rho1"][step] = value
    out = []
    for name, kind in kinds.items():
        groups = list(kind["groups"])
        lags = sorted(kind["lags"])
        steps = sorted(kind["steps"])

        def _value(table: dict[int, float], step: int) -> float | None:
            value = table.get(step)
            return None if value is None or not np.isfinite(value) else round(float(value), 4)

        values = [
            [[_value(kind["groups"][g]["lags"].get(lag, {}), s) for lag in lags] for g in groups]
            for s in steps
        ]
        rho1 = [
            [
                _value(kind["groups"][g]["rho1"] or kind["groups"][g]["lags"].get(1, {}), s)
                for s in steps
            ]
            for g in groups
        ]
        out.append(
            {"kind": name, "groups": groups, "lags": lags, "steps": steps, "values": values,
             "rho1": rho1}
        )  # fmt: skip
    order = {"params": 0, "grads": 1}
    out.sort(key=lambda k: (order.get(k["kind"], 2), k["kind"]))
    return out


def findings_view(texts: list[tuple[int, str]]) -> list[dict[str, Any]]:
    r"""Each finding of every findings table once, by step, with when it was last reported.

    Example:
        >>> table = ("| step | severity | code | subject | message |\n|---:|---|---|---|---|\n"
        ...          "| 3 | warning | zero-gradient | `head.bias` | is \\| zero |")
        >>> (row,) = findings_view([(3, table), (9, table)])
        >>> row["step"], row["code"], row["subject"], row["message"], row["last_seen"]
        (3, 'zero-gradient', 'head.bias', 'is | zero', 9)
    """
    found: dict[tuple, dict[str, Any]] = {}
    for table_step, text in sorted(texts, key=lambda t: t[0]):
        for line in text.split("\n"):
            match = _ROW.match(line.strip())
            if match is None:
                continue
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", match[2])]
            if len(cells) != 4:
                continue
            severity, code, subject, message = cells
            subject = subject.strip("`")
            row = {
                "step": int(match[1]),
                "severity": severity,
                "code": code,
                "subject": subject,
                "message": message,
            }
            key = tuple(row.values())
            found.setdefault(key, row)["last_seen"] = table_step
    return sorted(found.values(), key=lambda r: (r["step"], r["code"], r["subject"]))


def module_source() -> str:
    """The view's ES module (``static/learnscope_view.js``), shipped with the package.

    Example:
        >>> "export async function render()" in module_source()
        True
    """
    return (Path(__file__).parent / "static" / "learnscope_view.js").read_text(encoding="utf-8")


def page_html(runs: list[tuple[str, dict]], title: str = "learnscope: training dynamics") -> str:
    """One self-contained HTML page: the views as inline JSON and the module inline.

    The page loads nothing from the network and opens from ``file://``.

    Args:
        runs: ``(name, view)`` pairs, views as :func:`read_view` returns them.
        title: The page title.

    Returns:
        The HTML text.

    Example:
        >>> html = page_html([("run", {"embeddings": [], "autocorrelation": [], "findings": [],
        ...                           "messages": []})])
        >>> html.count("<script"), html.count("</script")
        (2, 2)
    """
    import html
    import json

    data = json.dumps({"runs": [{"name": n, "view": v} for n, v in runs]}, separators=(",", ":"))
    data = data.replace("<", "\\u003c")  # no "</script>" can end the JSON block early
    module = module_source()
    if "<script" in module.lower() or "</script" in module.lower() or "<!--" in module:
        raise ValueError("the view module must not contain '<script', '</script' or '<!--'")
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head><body>\n"
        f'<script type="application/json" id="learnscope-data">{data}</script>\n'
        f'<script type="module">\n{module}\n</script>\n</body></html>\n'
    )


def export_html(
    logdir: str | Path, out: str | Path, max_points: int = MAX_POINTS, sprites: bool = True
) -> list[str]:
    """Write the view of every learnscope run under ``logdir`` as one page ``out``.

    Args:
        logdir: A log directory (or one run directory).
        out: The HTML file to write.
        max_points: The most points per tag.
        sprites: Include thumbnails.

    Returns:
        The names of the runs in the page (empty, and no file written, when there are none).
    """
    root = Path(logdir)
    names = find_runs(root)
    if not names:
        return []
    runs = [
        (root.resolve().name if name == "." else name, read_view(root / name, max_points, sprites))
        for name in names
    ]
    Path(out).write_text(page_html(runs), encoding="utf-8")
    return [name for name, _ in runs]
