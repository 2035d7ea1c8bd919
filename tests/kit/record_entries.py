"""Run-record entries as ``docs/run_record.md`` describes them, written by hand for view tests.

The views must read any record that follows the document, so these builders follow the
document, not the record writer's code.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from learnscope.embeddings.scatter_frame import frame_limits
from learnscope.run_directory.file_names import RECORD_FILE
from learnscope.run_directory.record import append_entries, encode_array

ALL_CALLBACKS = ("EmbeddingProjector", "ModelAutocorrelation", "TrainingHelper")


def run_entry(*callbacks: str, time: float = 1_000.0, **settings: dict[str, Any]) -> dict:
    """A ``run`` entry listing ``callbacks`` (settings per callback name as keywords)."""
    return {
        "kind": "run",
        "format": 1,
        "time": time,
        "callbacks": [{"name": n, "settings": settings.get(n, {})} for n in callbacks],
    }


def spread_of(xy: np.ndarray) -> float:
    """Root-mean-square distance from the centre (the origin), in float64."""
    xy = np.asarray(xy, np.float64)
    return float(math.sqrt((xy**2).sum(1).mean()))


def categorical(name: str, values: Sequence[Any]) -> dict[str, Any]:
    """A categorical column: every distinct value as text, numbers first by value."""
    text = [str(v) for v in values]
    categories = sorted(set(text), key=lambda t: (0, float(t), t) if _number(t) else (1, 0, t))
    index = {c: i for i, c in enumerate(categories)}
    codes = np.array([index[t] for t in text], np.int32)
    return {
        "name": name,
        "kind": "categorical",
        "categories": categories,
        "codes": encode_array(codes, "<i4"),
    }


def numeric(name: str, values: Sequence[float]) -> dict[str, Any]:
    return {"name": name, "kind": "numeric", "values": encode_array(values, "<f8")}


def snapshot_entry(
    key: str,
    step: int,
    xy: np.ndarray | None,
    ids: Sequence[str] | None = None,
    frame: Sequence[float] | None = None,
    columns: Sequence[dict[str, Any]] = (),
    sprite: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``snapshot`` entry; ``frame`` from :func:`frame_limits` of ``xy`` when not given."""
    entry: dict[str, Any] = {"kind": "snapshot", "key": key, "step": step, "ids": ids}
    if xy is not None:
        xy = np.asarray(xy, np.float64)
        spread = spread_of(xy)
        entry.update(
            points=len(xy),
            xy=encode_array(xy, "<f4"),
            spread=spread,
            frame=list(frame) if frame is not None else list(frame_limits(xy / spread)),
        )
    else:
        entry["points"] = len(ids) if ids is not None else 0
    entry["columns"] = list(columns)
    if sprite is not None:
        entry["sprite"] = sprite
    entry["dropped"] = 0
    return entry


def autocorrelation_entry(
    step: int, what: str, groups: Sequence[str], acf: np.ndarray, rho1: Sequence[float]
) -> dict[str, Any]:
    """An ``autocorrelation`` entry: ``acf`` is ``[groups, lags 0..L]``."""
    acf = np.asarray(acf, np.float64)
    return {
        "kind": "autocorrelation",
        "step": step,
        "what": what,
        "groups": list(groups),
        "lags": list(range(acf.shape[1])),
        "acf": [[None if not np.isfinite(v) else float(v) for v in row] for row in acf],
        "rho1_median": [float(r) for r in rho1],
        "rho1_q25": [float(r) - 0.1 for r in rho1],
        "rho1_q75": [float(r) + 0.1 for r in rho1],
        "tau": [None for _ in groups],
        "num_steps": [100 for _ in groups],
        "non_finite_elements": [0 for _ in groups],
    }


def findings_entry(step: int, *rows: tuple[str, str, str, int, str]) -> dict[str, Any]:
    """A ``findings`` entry: rows ``(code, subject, message, step, severity)``."""
    names = ("code", "subject", "message", "step", "severity")
    return {
        "kind": "findings",
        "step": step,
        "rows": [dict(zip(names, r, strict=True)) for r in rows],
    }


def write(run_dir: Path, *entries: dict[str, Any]) -> Path:
    """Append ``entries`` to the record of ``run_dir`` (made when missing); the record's path."""
    run_dir.mkdir(parents=True, exist_ok=True)
    append_entries(run_dir / RECORD_FILE, entries)
    return run_dir / RECORD_FILE


def drifting_points(points: int, snapshots: int, seed: int = 0) -> list[np.ndarray]:
    """``snapshots`` views of ``points`` points in 10 clusters that tighten and grow."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, points)
    centres = rng.normal(size=(10, 2)) * 4
    xy = rng.normal(size=(points, 2)) * 3
    out = []
    for s in range(snapshots):
        xy = 0.85 * xy + 0.15 * centres[labels] + rng.normal(size=(points, 2)) * 0.1
        out.append(xy * (1 + s))
    return out


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
