"""Two runs (or two tags) side by side on the points they share: aligned views and overlap.

Two snapshots, one of key ``key`` (``encoder/validate``) in run A and one of ``key_b`` (the same
key by default; ``pooler/validate``, say) in run B, are compared on the ids they share (the
record's point names; rows in order when neither has ids): each run's newest step by default,
or at the page's step cursor ``at``, each run's newest snapshot at or before it (its first when
none is that early: :func:`shown_step`, the rule of every panel). A and B may be the same run,
on two keys:

* **Aligned views**: each snapshot's aligned PCA view (``xy``), centred on the shared points and
  in units of its spread, and B's rotated onto A's by orthogonal Procrustes (rotation or
  reflection only, no scaling), so that the two pictures can be read side by side; the same for
  each further aligned view (``projections``: ``umap``) that both snapshots have. The frame
  of each view holds every point of both, with room to spare (no point is drawn on its edge).
* **Neighbourhood overlap**: per shared point, ``|kNN_A ∩ kNN_B| / k`` of its ``k`` nearest
  neighbours (Euclidean, among the shared points) in each run's *full* embedding (the
  snapshot's ``tensor`` file), exact, computed a block of rows at a time so that memory stays
  bounded; its histogram (``k + 1`` bins) and the points whose neighbourhoods differ most (those
  that keep fewer than ``k``: fewest kept first, then those whose neighbours in A lie farthest
  in B, by :func:`learnscope.embeddings.neighbourhoods.neighbourhood_change`), with their metadata;
  and the overlap that chance gives, ``k / (N - 1)`` of ``N`` points compared (``chance``: the
  share two unrelated embeddings keep on average).
* **Identical snapshots** are said so (``identical``, ``verdict``), and nothing is listed as
  differing: see :func:`identical`.

At most ``max_points`` shared points are compared (20,000 by default), a fixed subsample by a
hash of the id, said in the notes. The learnscope tab answers ``/compare`` with
:func:`compare_runs` (``at``: the step cursor); ``learnscope export --compare A B`` embeds
the comparisons of each shared key (or of one pair of keys, ``--tags KEY_A KEY_B``) at the
steps the cursor can show (``compare_steps.py``).
Runs are read through their :class:`~learnscope.storage.RunFolder`, local or on an object
store (``s3://...``), the tensor files under the checks of
:func:`learnscope.plugins.views.sprite_files.read_run_file`.
Everything here is numpy: nothing imports torch.

Example:
    >>> import tempfile
    >>> from learnscope.run_directory.file_names import RECORD_FILE
    >>> from learnscope.run_directory.record import append_entries, encode_array
    >>> runs = [Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())]
    >>> rng = np.random.default_rng(0)
    >>> for run in runs:
    ...     append_entries(run / RECORD_FILE, [{"kind": "snapshot", "key": "enc", "step": 3,
    ...         "ids": [f"p{i}" for i in range(30)], "xy": encode_array(rng.normal(size=(30, 2)))}])
    >>> result = compare_runs(RunSnapshots(runs[0], "a"), RunSnapshots(runs[1], "b"), "enc")
    >>> result["shared"], result["overlap"], result["messages"]
    (30, None, ["no neighbourhood overlap: run a's snapshot at step 3 names no tensor file"])
"""

from __future__ import annotations

import base64
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from learnscope.embeddings.neighbourhoods import (
    NEIGHBOURS,
    in_spreads,
    neighbourhood_change,
    procrustes_rotation,
)
from learnscope.embeddings.scatter_frame import frame_limits
from learnscope.plugins.views.embedding_fold import (
    projection_label,
    projection_views,
    subsample_ids,
)
from learnscope.plugins.views.record_checks import DamagedEntry, array_field, rounded, typed_column
from learnscope.plugins.views.run_search import run_folder
from learnscope.plugins.views.run_view import read_record
from learnscope.plugins.views.sprite_files import read_tensor
from learnscope.run_directory.record import RecordReader
from learnscope.storage import RecordSource, RunFolder

FORMAT = "learnscope-compare/1"
MAX_COMPARED = 20_000  # shared points compared; more are subsampled by a hash of the id
MOST_DIFFERENT = 20  # points listed whose neighbourhoods differ most
# The aligned views of identical snapshots coincide: B's rotated view lies within this many
# spreads (root-mean-square) of A's. Views of the same numbers differ by float rounding only
# (below 1e-12 here: both are read from the same float32 values); the views of two seeds of the
# demo differ by 0.3 to 1.
IDENTICAL_RESIDUAL = 1e-6


class RunSnapshots:
    """The ``snapshot`` entries of one run record, by key and step, read incrementally.

    A step written again replaces the earlier entry; a record that was replaced is read again.

    Args:
        run_dir: The folder that holds the run record: a local path, a URL or a run folder.
        name: The run's name in messages.
        source: Where the record's bytes come from; the folder's
            :meth:`~learnscope.storage.RunFolder.record_source` by default.

    Example:
        >>> import tempfile
        >>> snapshots = RunSnapshots(tempfile.mkdtemp(), "a")
        >>> snapshots.refresh(), snapshots.keys()
        (False, [])
    """

    def __init__(
        self, run_dir: str | Path | RunFolder, name: str, source: RecordSource | None = None
    ) -> None:
        self.folder = run_folder(run_dir)
        self.name = name
        self.reader = RecordReader(source if source is not None else self.folder.record_source())
        self.entries: dict[str, dict[int, dict[str, Any]]] = {}  # key -> step -> entry

    def refresh(self) -> bool:
        """Read the entries added since the last call; whether any came.

        Raises:
            OSError: When the record cannot be read (a link, say; a missing record is empty).
        """
        entries = read_record(self.folder, self.reader)
        if self.reader.restarted:
            self.entries = {}
        for entry in entries:
            key, step = entry.get("key"), entry.get("step")
            if entry.get("kind") == "snapshot" and isinstance(key, str) and _whole(step):
                self.entries.setdefault(key, {})[step] = entry
        return bool(entries)

    def keys(self) -> list[str]:
        """The keys with snapshots, in the order first written."""
        return list(self.entries)

    def steps(self, key: str) -> list[int]:
        """The steps of ``key``'s snapshots, in order."""
        return sorted(self.entries.get(key, {}))


def shown_step(steps: list[int], at: int | None) -> int | None:
    """The step a panel shows at cursor step ``at``, of ascending ``steps``.

    The newest at or before ``at``, else the first; the newest when ``at`` is ``None``;
    ``None`` without steps. The rule of every panel of the views (``cursor.js``'s
    ``shownIndex``).

    Example:
        >>> shown_step([20, 40, 60], 50), shown_step([20, 40, 60], 5), shown_step([20, 40], None)
        (40, 20, 40)
    """
    if not steps:
        return None
    if at is None:
        return steps[-1]
    return max((s for s in steps if s <= at), default=steps[0])


def compare_runs(
    a: RunSnapshots,
    b: RunSnapshots,
    key: str,
    step_a: int | None = None,
    step_b: int | None = None,
    k: int = NEIGHBOURS,
    max_points: int = MAX_COMPARED,
    key_b: str | None = None,
    refresh: bool = True,
    at: int | None = None,
) -> dict[str, Any]:
    """Run ``a``'s ``key`` beside run ``b``'s ``key_b`` (refreshed first), as JSON-able data.

    ``a`` and ``b`` may be the same run on two keys; the same snapshot on both sides is not
    compared (a message says to pick another run or another tag).

    Args:
        a: Run A, whose view B is rotated onto.
        b: Run B (may be ``a``).
        key: A's snapshot key, such as ``encoder/validate``.
        step_a: A's step; by default the one :func:`shown_step` picks at ``at``.
        step_b: B's step; by default the one :func:`shown_step` picks at ``at``.
        k: The neighbours compared per point.
        max_points: The most shared points compared.
        key_b: B's snapshot key; ``key`` by default.
        refresh: Read what was added to the two records first (``False`` when the caller
            just did).
        at: The step cursor's trainer step: each run's newest snapshot at or before it (its
            first when none is); ``None``: each run's newest.

    Returns:
        ``format``, ``key`` (A's), ``k``, ``a`` and ``b`` (``run``, ``key``, ``keys`` (the
        run's keys), ``step``, ``steps``, ``points``),
        ``shared`` and ``compared`` (counts), ``ids`` (the compared points), ``xy_a`` and
        ``xy_b`` (base64 ``<f4`` ``x0 y0 x1 y1 ...`` in spreads, B rotated onto A; ``None``
        without aligned PCA), ``frame``, ``rotation``, ``residual``, ``projections`` (the same
        five of each further aligned view both snapshots have, with its ``name`` and
        ``label``: ``umap``, ``UMAP``), ``overlap`` (per point,
        the neighbours in common, 0 to ``k``; ``None`` when not computed), ``histogram``
        (points per count 0 to ``k``), ``mean_overlap``, ``chance`` (the mean overlap of
        unrelated embeddings, ``k / (compared - 1)``), ``differ`` (the points whose
        neighbourhoods differ most, of those that keep fewer than ``k``: ``index``, ``id``,
        ``overlap``, ``drift``, ``metadata``), ``identical`` (whether the compared snapshots
        are the same, by :func:`identical`), ``verdict`` (a sentence that says so, or
        ``None``), ``columns`` (A's metadata of the compared points), ``messages`` and
        ``notes``.

    Raises:
        OSError: When a record cannot be read.
    """
    if refresh:
        a.refresh()
        b.refresh()
    key_b = key if key_b is None else key_b
    result = _empty(a.name, b.name, key, k, key_b)
    snapshots = []
    for run, name, step, side in ((a, key, step_a, result["a"]), (b, key_b, step_b, result["b"])):
        steps = run.steps(name)
        step = shown_step(steps, at) if step is None else step
        entry = _chosen(run, name, step)
        side.update(step=step, steps=steps)
        side["keys"] = run.keys()
        if not steps:
            result["messages"].append(missing_key(run, name))
        elif entry is None:
            result["messages"].append(f"run {run.name} has no snapshot of {name} at step {step}")
        else:
            snapshots.append(entry)
    if len(snapshots) < 2:
        return result
    same_run = a.name == b.name and a.folder.same_as(b.folder)
    if same_run and key == key_b and result["a"]["step"] == result["b"]["step"]:
        result["messages"].append(
            f"A and B are the same snapshot (run {a.name}, {key} at step {result['a']['step']}): "
            "pick another run or another tag"
        )
        return result
    try:
        _compare(result, (a, b), snapshots, k, max_points)
    except DamagedEntry as error:
        result["messages"].append(f"the snapshots cannot be compared: {error}")
    return result


def missing_key(run: RunSnapshots, key: str) -> str:
    """What to say when ``run`` has no snapshot of ``key``: the run's keys.

    Example:
        >>> import tempfile
        >>> missing_key(RunSnapshots(tempfile.mkdtemp(), "a"), "enc")
        'run a has no snapshot of enc (keys: none)'
    """
    return f"run {run.name} has no snapshot of {key} (keys: {', '.join(run.keys()) or 'none'})"


def comparison_error(
    a: str, b: str, key: str, message: str, key_b: str | None = None
) -> dict[str, Any]:
    """The comparison of runs ``a`` and ``b`` that could not be made, ``message`` saying why.

    Example:
        >>> comparison_error("a", "b", "enc", "boom")["messages"]
        ['runs a and b cannot be compared: boom']
    """
    result = _empty(a, b, key, NEIGHBOURS, key if key_b is None else key_b)
    result["messages"].append(f"runs {a} and {b} cannot be compared: {message}")
    return result


def _empty(a: str, b: str, key: str, k: int, key_b: str) -> dict[str, Any]:
    side = {"step": None, "steps": [], "points": 0, "keys": []}
    return {
        "format": FORMAT,
        "key": key,
        "k": k,
        "a": {"run": a, "key": key, **side},
        "b": {"run": b, "key": key_b, **side},
        "shared": 0,
        "compared": 0,
        "ids": [],
        "xy_a": None,
        "xy_b": None,
        "frame": None,
        "rotation": None,
        "residual": None,
        "projections": [],
        "overlap": None,
        "histogram": None,
        "mean_overlap": None,
        "chance": None,
        "differ": [],
        "identical": False,
        "verdict": None,
        "columns": [],
        "messages": [],
        "notes": [],
    }


def _compare(
    result: dict[str, Any],
    runs: tuple[RunSnapshots, RunSnapshots],
    entries: list[dict[str, Any]],
    k: int,
    max_points: int,
) -> None:
    """Fill ``result`` with the comparison of the two snapshot ``entries``."""
    names = [run.name for run in runs]
    counts = [_points(entry) for entry in entries]
    result["a"]["points"], result["b"]["points"] = counts
    ids, rows_a, rows_b, note = shared_points(
        entries[0].get("ids"), counts[0], entries[1].get("ids"), counts[1]
    )
    result["shared"] = len(ids)
    if note:
        result["notes"].append(note)
    if len(ids) < k + 1:
        keys = [result["a"]["key"], result["b"]["key"]]
        which = f"key {keys[0]}" if keys[0] == keys[1] else f"keys {keys[0]} and {keys[1]}"
        result["messages"].append(
            f"runs {names[0]} and {names[1]} share {len(ids):,} of {counts[0]:,}/{counts[1]:,} "
            f"ids of {which}: need at least {k + 1}"
        )
        return
    if len(ids) > max_points:
        keep = set(subsample_ids(ids, max_points))
        chosen = np.array([i in keep for i in ids])
        ids, rows_a, rows_b = [i for i in ids if i in keep], rows_a[chosen], rows_b[chosen]
        result["notes"].append(
            f"{len(ids):,} of {result['shared']:,} shared points compared "
            "(a fixed subsample by id; neighbours among them)"
        )
    result["ids"] = ids
    result["compared"] = len(ids)
    result["columns"] = [
        typed_column(c, counts[0], rows_a) for c in entries[0].get("columns") or []
    ]
    _aligned_views(result, entries, rows_a, rows_b)
    vectors = []
    for run, entry, rows, count in zip(runs, entries, (rows_a, rows_b), counts, strict=True):
        why = None
        if entry.get("tensor") is None:
            why = f"run {run.name}'s snapshot at step {entry['step']} names no tensor file"
        else:
            try:
                full = read_tensor(run.folder, entry["tensor"])
            except DamagedEntry as error:
                why = f"run {run.name}: {error}"
            else:
                if len(full) != count:
                    why = f"run {run.name}'s tensor has {len(full):,} rows, not {count:,}"
        if why is not None:
            result["messages"].append(f"no neighbourhood overlap: {why}")
            return
        vectors.append(full[rows])
    overlap, drift = neighbourhood_change(vectors[0], vectors[1], k)
    result["overlap"] = overlap.tolist()
    result["histogram"] = np.bincount(overlap, minlength=k + 1).tolist()
    result["mean_overlap"] = rounded(float(overlap.mean()) / k, 6)
    result["chance"] = rounded(k / (len(ids) - 1), 6)
    result["differ"] = most_different(overlap, ids, result["columns"], k=k, drift=drift)
    result["identical"] = identical(overlap, k, result["residual"])
    if result["identical"]:
        result["verdict"] = (
            f"A and B are identical on the {len(ids):,} points compared: every one keeps its "
            f"{k} nearest neighbours and the aligned views coincide (residual "
            f"{result['residual']:.2g} spreads), so nothing differs. Two runs of the same code, "
            "data and seed give this: train B with another seed or other settings to see what "
            "changes."
        )


def _points(entry: Mapping[str, Any]) -> int:
    """The points of a snapshot entry: its ``points``, else its ids or xy rows."""
    points = entry.get("points")
    if _whole(points) and points >= 0:
        return int(points)
    if isinstance(entry.get("ids"), list):
        return len(entry["ids"])
    raise DamagedEntry("it says neither how many points it has nor their ids")


def shared_points(
    ids_a: Any, points_a: int, ids_b: Any, points_b: int
) -> tuple[list[str], np.ndarray, np.ndarray, str | None]:
    """The points two snapshots share: their ids (in A's order), rows in A and in B, a note.

    Points are matched by id; when neither snapshot has ids, by row (a note says so). When
    only one has ids, nothing is matched.

    Raises:
        DamagedEntry: When ``ids`` is not a list of ``points`` unique ids.

    Example:
        >>> ids, rows_a, rows_b, note = shared_points(["x", "y", "z"], 3, ["z", "x"], 2)
        >>> ids, rows_a.tolist(), rows_b.tolist(), note
        (['x', 'z'], [0, 2], [1, 0], None)
    """
    if ids_a is None and ids_b is None:
        count = min(points_a, points_b)
        rows = np.arange(count)
        return [str(i) for i in range(count)], rows, rows, "no ids: points matched by row"
    if ids_a is None or ids_b is None:
        which = "A" if ids_a is None else "B"
        return (
            [],
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
            (f"run {which} has no ids: points cannot be matched"),
        )
    index_b = _index(ids_b, points_b)
    _index(ids_a, points_a)
    pairs = [(str(i), row, index_b[str(i)]) for row, i in enumerate(ids_a) if str(i) in index_b]
    ids = [p[0] for p in pairs]
    return (
        ids,
        np.array([p[1] for p in pairs], np.int64),
        np.array([p[2] for p in pairs], np.int64),
        None,
    )


def _index(ids: Any, points: int) -> dict[str, int]:
    if not isinstance(ids, list) or len(ids) != points:
        raise DamagedEntry(f"ids is not a list of {points} ids")
    index = {str(i): row for row, i in enumerate(ids)}
    if len(index) != len(ids):
        raise DamagedEntry("its ids are not unique")
    return index


def _aligned_views(
    result: dict[str, Any], entries: list[dict[str, Any]], rows_a: np.ndarray, rows_b: np.ndarray
) -> None:
    """Fill ``xy_a``, ``xy_b`` (B rotated onto A), ``frame``, ``rotation``, ``residual``.

    And ``projections``: the same of each further view (``umap``) both snapshots have.
    """
    rows = (rows_a, rows_b)
    if entries[0].get("xy") is None or entries[1].get("xy") is None:
        result["notes"].append("no aligned PCA view in one of the runs: no pictures")
    else:
        result.update(_aligned_pair([array_field(e, "xy") for e in entries], rows))
    sides = [projection_views(e, _points(e))[0] for e in entries]
    for name in sides[0]:
        if name not in sides[1]:
            continue
        try:
            pair = _aligned_pair([side[name].xy for side in sides], rows)
        except DamagedEntry as error:
            result["notes"].append(f"no {projection_label(name)} pictures: {error}")
            continue
        result["projections"].append({"name": name, "label": projection_label(name), **pair})
    names = {*sides[0], *sides[1]}
    for name in sorted(names - (sides[0].keys() & sides[1].keys())):
        result["notes"].append(
            f"only one of the snapshots has an aligned {projection_label(name)} view: "
            f"no {projection_label(name)} pictures"
        )


def _aligned_pair(views: list[np.ndarray], rows: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    """One view of A and B on the shared ``rows``: B rotated onto A, in spreads, encoded.

    The frame holds every point of both (:func:`~learnscope.embeddings.scatter_frame.frame_limits`
    of all of them, with its room to spare), so that no point is drawn on the frame's edge.
    """
    shared = []
    for xy, chosen in zip(views, rows, strict=True):
        if xy.ndim != 2 or xy.shape[1] != 2 or len(xy) <= int(chosen.max(initial=-1)):
            raise DamagedEntry(f"xy has shape {list(xy.shape)}, not [points, 2]")
        shared.append(in_spreads(xy[chosen].astype(np.float64)))
    rotation = procrustes_rotation(shared[1], shared[0])
    rotated = shared[1] @ rotation
    return {
        "xy_a": _encoded(shared[0]),
        "xy_b": _encoded(rotated),
        "frame": list(frame_limits(np.vstack([shared[0], rotated]), keep=1.0)),
        "rotation": rotation.tolist(),
        "residual": rounded(float(np.sqrt(((shared[0] - rotated) ** 2).sum(1).mean())), 6),
    }


def _encoded(xy: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(xy, "<f4").tobytes()).decode("ascii")


def identical(overlap: np.ndarray, k: int, residual: float | None) -> bool:
    """Whether two snapshots compared are the same: ``overlap`` and views leave nothing apart.

    The rule: every compared point keeps all ``k`` of its nearest neighbours (overlap ``k`` of
    ``k``) and the aligned views coincide: the root-mean-square distance between A's view and
    B's rotated onto it (``residual``, in units of the spread) is at most
    :data:`IDENTICAL_RESIDUAL`. Without aligned views (``residual`` is ``None``) the pictures
    cannot be checked, and the snapshots are not called identical.

    Example:
        >>> identical(np.array([10, 10]), 10, 0.0), identical(np.array([10, 9]), 10, 0.0)
        (True, False)
        >>> identical(np.array([10, 10]), 10, 0.01), identical(np.array([10, 10]), 10, None)
        (False, False)
    """
    if residual is None or len(overlap) == 0:
        return False
    return bool((overlap == k).all()) and residual <= IDENTICAL_RESIDUAL


def most_different(
    overlap: np.ndarray,
    ids: list[str],
    columns: list[dict[str, Any]],
    most: int = MOST_DIFFERENT,
    k: int = NEIGHBOURS,
    drift: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """The ``most`` points whose neighbourhoods differ most, with their metadata.

    Lowest ``overlap`` first, then largest ``drift`` (how far a point's neighbours in A lie in
    B: :func:`learnscope.embeddings.neighbourhoods.neighbourhood_change`), then in the order of
    ``ids``. Only points that keep fewer than ``k`` neighbours are listed: a point that keeps all
    ``k`` does not differ (the list is empty when none differs).

    Example:
        >>> rows = most_different(np.array([0, 0, 2, 3]), list("abcd"), [], 3, 3, np.ones(4) * 2)
        >>> [(row["id"], row["overlap"], row["drift"]) for row in rows]
        [('a', 0, 2.0), ('b', 0, 2.0), ('c', 2, 2.0)]
        >>> [row["id"] for row in most_different(np.array([0, 0]), ["a", "b"], [], k=3,
        ...                                      drift=np.array([1.5, 4.0]))]
        ['b', 'a']
        >>> most_different(np.array([3, 3]), ["a", "b"], [], k=3)
        []
    """
    drift = np.ones(len(overlap)) if drift is None else drift
    order = [i for i in np.lexsort((-drift, overlap))[:most] if overlap[i] < k]
    return [
        {
            "index": int(i),
            "id": ids[i],
            "overlap": int(overlap[i]),
            "drift": rounded(float(drift[i])),
            "metadata": {c["name"]: _value(c, int(i)) for c in columns},
        }
        for i in order
    ]


def _value(column: Mapping[str, Any], i: int) -> Any:
    if column["kind"] == "categorical":
        code = column["codes"][i]
        return column["categories"][code] if 0 <= code < len(column["categories"]) else "other"
    return column["values"][i]


def _chosen(run: RunSnapshots, key: str, step: int | None) -> dict[str, Any] | None:
    """The entry of ``key`` at ``step`` (the newest when ``None``) in ``run``, or ``None``."""
    steps = run.steps(key)
    if step is None and steps:
        step = steps[-1]
    return run.entries.get(key, {}).get(step)  # type: ignore[arg-type]


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Comparisons:
    """The comparisons a server answers: each run's snapshots kept, recent answers kept.

    A comparison is computed again only when one of its two snapshot entries changed.

    Args:
        most_runs: Runs whose snapshots are kept (the least recently used goes first).
        most_answers: Comparisons kept.

    Example:
        >>> import tempfile
        >>> comparisons = Comparisons()
        >>> run = Path(tempfile.mkdtemp())
        >>> comparisons.compare((run, "a"), (run, "b"), "enc")["messages"][0]
        'run a has no snapshot of enc (keys: none)'
    """

    def __init__(self, most_runs: int = 8, most_answers: int = 8) -> None:
        self.most_runs = most_runs
        self.most_answers = most_answers
        self.runs: OrderedDict[str, RunSnapshots] = OrderedDict()
        self.answers: OrderedDict[tuple, dict[str, Any]] = OrderedDict()

    def run(
        self, run_dir: str | Path | RunFolder, name: str, source: RecordSource | None = None
    ) -> RunSnapshots:
        """The kept snapshots of run ``name`` (made on first use, reading ``source``)."""
        held = self.runs.get(name)
        if held is None:
            held = self.runs[name] = RunSnapshots(run_dir, name, source)
            while len(self.runs) > self.most_runs:
                self.runs.popitem(last=False)
        self.runs.move_to_end(name)
        return held

    def compare(
        self,
        a: tuple[str | Path | RunFolder, str] | tuple[RunFolder, str, RecordSource],
        b: tuple[str | Path | RunFolder, str] | tuple[RunFolder, str, RecordSource],
        key: str,
        step_a: int | None = None,
        step_b: int | None = None,
        key_b: str | None = None,
        at: int | None = None,
    ) -> dict[str, Any]:
        """:func:`compare_runs` of runs ``a`` and ``b``, kept.

        Args:
            a: Run A: ``(run_dir, name)``, or ``(run_dir, name, source)`` to read its record
                from ``source`` (see :class:`RunSnapshots`) when it is first kept.
            b: Run B, the same way.
            key: A's key.
            step_a: A's step; by default the one :func:`shown_step` picks at ``at``.
            step_b: B's step; by default the one :func:`shown_step` picks at ``at``.
            key_b: B's key; ``key`` by default.
            at: The step cursor's trainer step (``None``: each run's newest snapshot).

        Raises:
            OSError: When a record cannot be read.
        """
        key_b = key if key_b is None else key_b
        run_a, run_b = self.run(*a), self.run(*b)
        run_a.refresh()
        run_b.refresh()
        if step_a is None:
            step_a = shown_step(run_a.steps(key), at)
        if step_b is None:
            step_b = shown_step(run_b.steps(key_b), at)
        entries = (_chosen(run_a, key, step_a), _chosen(run_b, key_b, step_b))
        keys = (run_a.keys(), run_b.keys())  # the answer lists them: a new key asks again
        question = (a[1], b[1], key, key_b, step_a, step_b)
        held = self.answers.get(question)
        if held is not None and held["keys"] == keys and _same(held["entries"], entries):
            self.answers.move_to_end(question)
            return held["answer"]
        answer = compare_runs(run_a, run_b, key, step_a, step_b, key_b=key_b, refresh=False)
        # the entries are held, so that their ids stay those of live objects
        self.answers[question] = {"entries": entries, "keys": keys, "answer": answer}
        while len(self.answers) > self.most_answers:
            self.answers.popitem(last=False)
        return answer


def _same(held: tuple, entries: tuple) -> bool:
    """Whether the kept snapshot entries are the very ones of now (not only equal)."""
    return all(x is y for x, y in zip(held, entries, strict=True))
