"""The tab's movers (``static/movers.js``) and the comparison of two runs define a changed
neighbourhood alike: ``learnscope.embeddings.neighbourhoods.neighbourhood_change``, run in node."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from learnscope.embeddings.neighbourhoods import neighbourhood_change

NODE = shutil.which("node")
STATIC = Path(__file__).resolve().parents[2] / "plugins" / "views" / "static"


def _movers_in_node(a: np.ndarray, b: np.ndarray, k: int, tmp_path: Path) -> dict[str, list]:
    """``neighbourChange`` of movers.js on two 2-D frames, as node computes it."""
    for name in ("movers", "dom"):
        text = (STATIC / f"{name}.js").read_text("utf-8").replace("'./dom.js'", "'./dom.mjs'")
        (tmp_path / f"{name}.mjs").write_text(text, "utf-8")
    script = tmp_path / "run.mjs"
    script.write_text(
        "import { neighbourChange } from './movers.mjs';\n"
        f"const a = Float32Array.from({json.dumps(a.ravel().tolist())});\n"
        f"const b = Float32Array.from({json.dumps(b.ravel().tolist())});\n"
        f"const {{ change, drift }} = neighbourChange(a, b, {len(a)}, {k});\n"
        "console.log(JSON.stringify({change: Array.from(change), drift: Array.from(drift)}));\n",
        "utf-8",
    )
    done = subprocess.run([NODE, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_movers_rank_by_the_neighbourhood_change_of_the_comparison(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    a = rng.normal(size=(80, 2)).astype(np.float32)
    b = (a + rng.normal(scale=0.5, size=a.shape)).astype(np.float32)
    kept, drift = neighbourhood_change(a, b, 10)
    js = _movers_in_node(a, b, 10, tmp_path)
    np.testing.assert_allclose(js["change"], 1 - kept / 10, atol=1e-6)
    np.testing.assert_allclose(js["drift"], drift, rtol=1e-5)
    assert np.bincount(kept).max() > 1 and len(set(drift.round(6))) == len(drift)  # ties broken


def test_the_movers_count_the_k_the_view_model_gives_as_the_comparison_does(
    tmp_path: Path,
) -> None:
    from learnscope.embeddings.neighbourhoods import NEIGHBOURS
    from learnscope.plugins.views import compare_runs
    from learnscope.plugins.views.run_view import read_view
    from learnscope.run_directory.file_names import RECORD_FILE
    from learnscope.run_directory.record import append_entries
    from tests.kit.record_entries import snapshot_entry

    ids = [str(i) for i in range(12)]
    xy = np.random.default_rng(0).normal(size=(12, 2))
    append_entries(tmp_path / RECORD_FILE, [snapshot_entry("enc", 3, xy, ids)])
    (embedding,) = read_view(tmp_path)["embeddings"]
    assert (
        embedding["neighbours"] == NEIGHBOURS
    )  # one k, defined in learnscope.embeddings.neighbourhoods
    assert compare_runs.NEIGHBOURS is NEIGHBOURS
    movers = (STATIC / "movers.js").read_text("utf-8")
    assert "e.neighbours" in movers and "const NEIGHBOURS" not in movers
