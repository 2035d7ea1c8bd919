"""The flat run summary recomputed from a run's own files, by the rules of ``docs/summary.md``.

Independent of learnscope's fold: the record's lines are read with ``json``, each snapshot's
ranks are recomputed in float64 numpy (:mod:`tests.kit.references`) from the full embedding the
TensorBoard writer wrote (the snapshot's ``tensor`` file), and each view's label silhouette with
scikit-learn on the record's 2-D coordinates. The tests compare learnscope's summary, wherever it
shows (``read_summaries``, W&B, HParams, the runs table, the export), with this.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import silhouette_score

from learnscope.finding_codes import FINDING_CODES
from learnscope.run_directory.file_names import RECORD_FILE
from tests.kit.references import effective_rank, rankme

STEP_KINDS = ("snapshot", "autocorrelation", "findings", "end")
NON_FINITE = {"non-finite-loss", "non-finite-gradient", "non-finite-output"}


def record_lines(run_dir: Path) -> list[dict[str, Any]]:
    """The run record's entries, read with ``json``."""
    text = (run_dir / RECORD_FILE).read_text("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def array(field: dict[str, Any]) -> np.ndarray:
    """A record array (``{"dtype", "shape", "b64"}``) as numpy."""
    raw = base64.b64decode(field["b64"])
    return np.frombuffer(raw, dtype=field["dtype"]).reshape(field["shape"])


def expected_summary(run_dir: Path, measures: str = "recompute") -> dict[str, Any]:
    """The flat summary of the run in ``run_dir``.

    Args:
        run_dir: The run directory (with the run record).
        measures: ``"recompute"``: the ranks from the snapshot's ``tensor`` file (numpy),
            the silhouettes with scikit-learn; ``"record"``: as the record gives them (a
            record without tensor files, such as a W&B run's).
    """
    entries = record_lines(run_dir)
    ends = [e for e in entries if e["kind"] == "end" or e["kind"] == "run"]
    newest = ends[-1] if ends else {"kind": "run"}
    status = newest["status"] if newest["kind"] == "end" else "running"
    flat: dict[str, Any] = {"learnscope/status": status}
    if status == "failed":
        error = newest["error"]
        flat["learnscope/error"] = f"{error['type']}: {error['message']}"
    steps = [e["step"] for e in entries if e["kind"] in STEP_KINDS]
    if steps:
        flat["learnscope/last_step"] = max(steps)
    flat.update(_findings(entries))
    flat.update(_analyses(entries))
    snapshots = [e for e in entries if e["kind"] == "snapshot"]
    for key in dict.fromkeys(e["key"] for e in snapshots):
        of_key = [e for e in snapshots if e["key"] == key]
        part = _part(key)
        flat[f"learnscope/snapshots/{part}/count"] = len(of_key)
        flat[f"learnscope/snapshots/{part}/last_step"] = max(e["step"] for e in of_key)
        flat.update(_measures(run_dir, part, of_key, measures))
    return flat


def _findings(entries: list[dict[str, Any]]) -> dict[str, Any]:
    tables = [e["rows"] for e in entries if e["kind"] == "findings"]
    rows = tables[-1] if tables else []
    flat: dict[str, Any] = {}
    for code in {*FINDING_CODES, *(r["code"] for r in rows)}:
        of_code = [r for r in rows if r["code"] == code]
        flat[f"learnscope/findings/{code}"] = sum(r["resolved_step"] is None for r in of_code)
        flat[f"learnscope/findings_seen/{code}"] = len(of_code)
    flat["learnscope/finding_count"] = sum(r["resolved_step"] is None for r in rows)
    flat["learnscope/finding_count_seen"] = len(rows)
    if rows:
        first = sorted(rows, key=lambda r: r["first_step"])[0]
        flat["learnscope/first_finding/code"] = first["code"]
        flat["learnscope/first_finding/subject"] = first["subject"]
        flat["learnscope/first_finding/step"] = first["first_step"]
    for name, wanted in (
        ("collapse", {"embedding-collapse"}),
        ("oversmoothing", {"oversmoothing"}),
        ("non-finite", NON_FINITE),
    ):
        found = [r["first_step"] for r in rows if r["code"] in wanted]
        if found:
            flat[f"learnscope/first_step/{name}"] = min(found)
    return flat


def _analyses(entries: list[dict[str, Any]]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for what in ("params", "grads"):
        analyses = [e for e in entries if e["kind"] == "autocorrelation" and e["what"] == what]
        if not analyses:
            continue
        last = analyses[-1]
        flat[f"learnscope/acf_step/{what}"] = last["step"]
        for i, group in enumerate(last["groups"]):
            for field in ("rho1_median", "tau"):
                if last[field][i] is not None:
                    flat[f"learnscope/acf/{what}/{_part(group)}/{field}"] = last[field][i]
    return flat


def _measures(
    run_dir: Path, part: str, snapshots: list[dict[str, Any]], measures: str
) -> dict[str, Any]:
    """A key's ranks (last, lowest) and its newest snapshot's silhouette per view."""
    ranks = [_ranks(run_dir, e, measures) for e in snapshots]
    newest = max(range(len(snapshots)), key=lambda i: (snapshots[i]["step"], i))
    flat: dict[str, Any] = {}
    for field in ("rankme", "effective_rank"):
        values = [r[field] for r in ranks if r is not None]
        if values:
            flat[f"learnscope/{field}/{part}/lowest"] = min(values)
        if ranks[newest] is not None:
            flat[f"learnscope/{field}/{part}/last"] = ranks[newest][field]
    for projection, value in _silhouettes(snapshots[newest], measures).items():
        flat[f"learnscope/silhouette/{part}/{projection}"] = value
    return flat


def _ranks(run_dir: Path, snapshot: dict[str, Any], measures: str) -> dict[str, float] | None:
    if measures == "record":
        return snapshot.get("ranks")
    tensor = snapshot["tensor"]
    rows = np.fromfile(run_dir / tensor["path"], dtype="<f4").reshape(tensor["shape"])
    return {"rankme": rankme(rows), "effective_rank": effective_rank(rows)}


def _silhouettes(snapshot: dict[str, Any], measures: str) -> dict[str, float]:
    if measures == "record":
        return dict(snapshot.get("silhouette", {}).get("views", {}))
    columns = {c["name"]: c for c in snapshot.get("columns", [])}
    label = columns.get("label")
    if label is None or label["kind"] != "categorical" or "xy" not in snapshot:
        return {}
    codes = array(label["codes"])
    assert len(codes) <= 2000, "past 2,000 points learnscope measures a subsample by id"
    views = {"pca": snapshot["xy"]}
    views.update({name: view["xy"] for name, view in snapshot.get("projections", {}).items()})
    if not 2 <= len(set(codes.tolist())) < len(codes):
        return {}
    return {
        name: float(silhouette_score(array(xy).astype(np.float64), codes))
        for name, xy in views.items()
    }


def _part(name: str) -> str:
    return name.replace("/", ":").replace(".", ":")


def assert_same_summary(shown: dict[str, Any], expected: dict[str, Any], rel: float = 1e-6) -> None:
    """``shown`` has exactly the names of ``expected``, the same text, numbers within ``rel``.

    Numbers that went through float32 (TensorBoard's scalars) need ``rel=1e-6`` or more.
    """
    assert sorted(shown) == sorted(expected), set(shown) ^ set(expected)
    for name, value in expected.items():
        if isinstance(value, str):
            assert shown[name] == value, name
        else:
            assert shown[name] == pytest.approx(value, rel=rel, abs=1e-9), name
