"""Two runs (or two tags) side by side: real fits against numpy, the tab and the export.

Two real ``Trainer.fit`` runs (versions 0 and 1 of one TensorBoard log dir, different seeds,
the same validation set with ids), and one fit with two projectors (``encoder.0``, 16 wide, as
tag ``hidden``; ``encoder``, 8 wide) compared with itself tag against tag; every number is
checked against an independent float64 computation on the tensors TensorBoard's own projector
plugin serves back.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import time
import urllib.error
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learnscope.embeddings.neighbourhoods import nearest_neighbours, neighbourhood_overlap
from learnscope.plugins.views.compare_runs import Comparisons, RunSnapshots, compare_runs
from learnscope.run_directory.file_names import RECORD_FILE
from learnscope.run_directory.record import RecordReader, decode_array
from tests.kit.models import loaders, trainer
from tests.kit.readers import ProjectorReader
from tests.kit.record_entries import categorical, run_entry, snapshot_entry, write

KEY = "encoder/validate"
HIDDEN = "hidden/validate"  # the two-tag fit's other key: encoder.0's output, 16 wide
TAGS_RUN = "tags/version_0"


def _fit(
    logdir: Path, seed: int, name: str = "fit", tags: tuple[tuple[str, str], ...] = ()
) -> Path:
    """A fit of ``TinyClassifier``: a projector on ``encoder``, and one per ``(module, tag)``."""
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import TensorBoardLogger

    from learnscope.lightning_glue import EmbeddingProjector
    from tests.kit.models import TinyClassifier

    pl.seed_everything(seed)
    logger = TensorBoardLogger(str(logdir), name=name)
    options = {"metadata_fn": lambda b: {"label": b[1]}, "ids_fn": "dataset_index"}
    projectors = [
        EmbeddingProjector(module, tag=tag, aligned_pca=True, **options)  # type: ignore[arg-type]
        for module, tag in (*tags, ("encoder", "encoder"))
    ]
    train, val = loaders(n_val=48)
    trainer(logdir, logger, projectors, max_epochs=2).fit(TinyClassifier(), train, val)
    return Path(logger.log_dir)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log dir with two real fits, ``fit/version_0`` and ``fit/version_1``."""
    logdir = tmp_path_factory.mktemp("compare")
    assert _fit(logdir, 1).name == "version_0"
    assert _fit(logdir, 2).name == "version_1"
    return logdir


@pytest.fixture(scope="module")
def two_tags(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log dir with one real fit, ``tags/version_0``: ``hidden`` (16 wide), ``encoder`` (8)."""
    logdir = tmp_path_factory.mktemp("two_tags")
    assert _fit(logdir, 3, "tags", (("encoder.0", "hidden"),)).name == "version_0"
    return logdir


def _snapshots(run_dir: Path) -> list[dict[str, Any]]:
    return [e for e in RecordReader(run_dir / RECORD_FILE).read() if e["kind"] == "snapshot"]


def _distances(x: np.ndarray) -> np.ndarray:
    """The full float64 distance matrix, infinite on the diagonal."""
    x = x.astype(np.float64)
    d = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    np.fill_diagonal(d, np.inf)
    return d


def _reference_overlap(a: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    """Full float64 distance matrices, argsort per row (stable: ties by row), sets intersected."""

    def neighbours(x: np.ndarray) -> list[set[int]]:
        return [set(np.argsort(row, kind="stable")[:k].tolist()) for row in _distances(x)]

    return np.array([len(p & q) for p, q in zip(neighbours(a), neighbours(b), strict=True)])


def _reference_drift(a: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    """In ``b``, each point's mean distance to its ``k`` nearest of ``a`` over that to its own."""
    da, db = _distances(a), _distances(b)
    near_a, near_b = (np.argsort(d, axis=1, kind="stable")[:, :k] for d in (da, db))
    rows = np.arange(len(b))[:, None]
    return db[rows, near_a].mean(1) / db[rows, near_b].mean(1)


def _decode_xy(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), "<f4").reshape(-1, 2).astype(np.float64)


def test_the_record_names_each_snapshots_full_embedding_in_the_order_of_its_ids(
    fitted: Path,
) -> None:
    reader = ProjectorReader(fitted)
    for version in ("version_0", "version_1"):
        run_dir = fitted / "fit" / version
        snapshots = _snapshots(run_dir)
        assert [s["step"] for s in snapshots] == [6, 12]
        for entry in snapshots:
            tensor = entry["tensor"]
            assert tensor["dtype"] == "<f4" and tensor["shape"] == [48, 8]
            assert not Path(tensor["path"]).is_absolute() and ".." not in tensor["path"]
            on_disk = np.fromfile(run_dir / tensor["path"], "<f4").reshape(48, 8)
            name = f"{KEY}/step_{entry['step']:09d}"
            served = reader.tensor(f"fit/{version}", name)  # TensorBoard's projector reads it
            np.testing.assert_array_equal(on_disk, served)
            # the rows are the snapshot's points in the order of its ids: the metadata TSV
            # (written from the same rows) lists the same ids in the same order
            tsv = reader.metadata(f"fit/{version}", name).strip().split("\n")
            header = tsv[0].split("\t")
            ids = [line.split("\t")[header.index("id")] for line in tsv[1:]]
            assert ids == entry["ids"] and sorted(ids, key=int) == [str(i) for i in range(48)]


def test_the_tensor_rows_are_the_snapshots_points_with_non_finite_rows_dropped(
    tmp_path: Path,
) -> None:
    import torch
    from lightning.pytorch.loggers import TensorBoardLogger

    from learnscope.lightning_glue import EmbeddingProjector
    from tests.kit.models import TinyClassifier

    class SomeNanRows(TinyClassifier):
        """Its probe sees the embedding with the rows of label 0 made NaN."""

        def __init__(self) -> None:
            super().__init__()
            self.probe = torch.nn.Identity()

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            h = self.encoder(batch[0])
            self.probe(torch.where((batch[1] == 0)[:, None], float("nan"), h))
            super().validation_step(batch, batch_idx)

    logger = TensorBoardLogger(str(tmp_path), name="nan")
    model = SomeNanRows()
    projector = EmbeddingProjector("probe", ids_fn="dataset_index", aligned_pca=True)
    train, val = loaders(n_val=48)
    trainer(tmp_path, logger, [projector], max_epochs=1).fit(model, train, val)
    (entry,) = _snapshots(Path(logger.log_dir))
    assert entry["dropped"] == 16 and entry["points"] == 32
    assert entry["tensor"]["shape"] == [32, 8]
    tensor = np.fromfile(Path(logger.log_dir) / entry["tensor"]["path"], "<f4").reshape(32, 8)
    x, y = val.dataset.tensors
    with torch.no_grad():
        expected = model.encoder(x).numpy()
    rows = [int(i) for i in entry["ids"]]
    assert all(y[r] != 0 for r in rows)  # the NaN rows are the ones left out
    np.testing.assert_allclose(tensor, expected[rows], rtol=1e-5, atol=1e-6)


def test_overlaps_and_procrustes_of_two_real_fits_equal_numpy(fitted: Path) -> None:
    dirs = [fitted / "fit" / "version_0", fitted / "fit" / "version_1"]
    result = compare_runs(RunSnapshots(dirs[0], "A"), RunSnapshots(dirs[1], "B"), KEY)
    assert result["messages"] == [] and result["notes"] == []
    assert result["a"]["step"] == result["b"]["step"] == 12
    assert result["shared"] == result["compared"] == 48
    reader = ProjectorReader(fitted)
    entries = [_snapshots(d)[-1] for d in dirs]
    tensors = [reader.tensor(f"fit/{d.name}", f"{KEY}/step_000000012") for d in dirs]
    expected = _equals_numpy(result, entries, tensors)
    assert 0 < expected.mean() < 10  # two seeds: neighbourhoods neither all kept nor all lost


def _equals_numpy(
    result: dict[str, Any], entries: list[dict[str, Any]], tensors: list[np.ndarray]
) -> np.ndarray:
    """Check ``result`` (48 points) against float64 numpy on the snapshots' ``entries`` and full
    ``tensors`` (A's, B's); the reference overlap."""
    from scipy.linalg import orthogonal_procrustes

    ids = result["ids"]
    assert ids == entries[0]["ids"]  # A's order
    rows_b = [entries[1]["ids"].index(i) for i in ids]
    expected = _reference_overlap(tensors[0], tensors[1][rows_b], 10)
    assert result["overlap"] == expected.tolist()
    assert result["histogram"] == np.bincount(expected, minlength=11).tolist()
    assert result["mean_overlap"] == pytest.approx(expected.mean() / 10, abs=1e-6)
    drift = _reference_drift(tensors[0], tensors[1][rows_b], 10)
    ranked = sorted(range(len(ids)), key=lambda i: (expected[i], -drift[i], i))
    lowest = [i for i in ranked[:20] if expected[i] < 10]  # fewest kept, then farthest drift
    assert [d["id"] for d in result["differ"]] == [ids[i] for i in lowest]
    assert [d["drift"] for d in result["differ"]] == pytest.approx(drift[lowest], abs=1e-4)
    assert result["identical"] is False and result["verdict"] is None
    labels = decode_array(entries[0]["columns"][0]["codes"])
    categories = entries[0]["columns"][0]["categories"]
    for d in result["differ"]:
        assert d["overlap"] == expected[d["index"]]
        assert d["metadata"] == {"label": categories[labels[entries[0]["ids"].index(d["id"])]]}

    views = []
    for entry, rows in ((entries[0], np.arange(48)), (entries[1], np.array(rows_b))):
        xy = decode_array(entry["xy"]).astype(np.float64)[rows]
        xy -= xy.mean(0)
        views.append(xy / np.sqrt((xy**2).sum(1).mean()))
    rotation, _ = orthogonal_procrustes(views[1], views[0])
    np.testing.assert_allclose(result["rotation"], rotation, atol=1e-9)
    np.testing.assert_allclose(_decode_xy(result["xy_a"]), views[0], atol=1e-5)
    np.testing.assert_allclose(_decode_xy(result["xy_b"]), views[1] @ rotation, atol=1e-5)
    return expected


def test_a_chosen_step_is_compared_and_a_missing_one_said(fitted: Path) -> None:
    dirs = [fitted / "fit" / "version_0", fitted / "fit" / "version_1"]
    a, b = RunSnapshots(dirs[0], "A"), RunSnapshots(dirs[1], "B")
    result = compare_runs(a, b, KEY, step_a=6, step_b=12)
    assert (result["a"]["step"], result["b"]["step"], result["a"]["steps"]) == (6, 12, [6, 12])
    tensors = [
        ProjectorReader(fitted).tensor(f"fit/{d.name}", f"{KEY}/step_{s:09d}")
        for d, s in zip(dirs, (6, 12), strict=True)
    ]
    entries = [_snapshots(dirs[0])[0], _snapshots(dirs[1])[1]]
    rows_b = [entries[1]["ids"].index(i) for i in entries[0]["ids"]]
    assert result["overlap"] == _reference_overlap(tensors[0], tensors[1][rows_b], 10).tolist()
    missing = compare_runs(a, b, KEY, step_a=7)
    assert missing["messages"] == [f"run A has no snapshot of {KEY} at step 7"]
    assert missing["overlap"] is None
    other = compare_runs(a, b, "head/validate")
    assert other["messages"][0] == f"run A has no snapshot of head/validate (keys: {KEY})"


def test_nearest_neighbours_in_blocks_are_those_of_the_full_matrix() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(300, 16)), rng.normal(size=(300, 5))
    small = 300 * 8 * 7  # blocks of 7 rows: every block boundary crossed
    assert np.array_equal(nearest_neighbours(a, 10, small), nearest_neighbours(a, 10))
    d = np.sqrt(((a[:, None] - a[None]) ** 2).sum(-1))
    np.fill_diagonal(d, np.inf)
    assert np.array_equal(nearest_neighbours(a, 10), np.argsort(d, 1, kind="stable")[:, :10])
    assert np.array_equal(neighbourhood_overlap(a, b, 10, small), _reference_overlap(a, b, 10))
    assert neighbourhood_overlap(a, a * 3 + 1, 10).tolist() == [10] * 300  # same neighbourhoods


def _two_runs_sharing(logdir: Path, shared: int, only_a: int, only_b: int) -> None:
    rng = np.random.default_rng(5)
    ids_a = [f"s{i}" for i in range(shared)] + [f"a{i}" for i in range(only_a)]
    ids_b = [f"b{i}" for i in range(only_b)] + [f"s{i}" for i in range(shared)]
    for name, ids in (("a", ids_a), ("b", ids_b)):
        xy = rng.normal(size=(len(ids), 2))
        columns = [categorical("c", [1] * len(ids))]
        write(
            logdir / name,
            run_entry("EmbeddingProjector"),
            snapshot_entry("enc", 4, xy, ids, columns=columns),
        )


def test_too_few_shared_ids_are_said_plainly(tmp_path: Path) -> None:
    _two_runs_sharing(tmp_path, shared=3, only_a=497, only_b=477)
    result = Comparisons().compare((tmp_path / "a", "a"), (tmp_path / "b", "b"), "enc")
    assert result["messages"] == [
        "runs a and b share 3 of 500/480 ids of key enc: need at least 11"
    ]
    assert result["overlap"] is None and result["xy_a"] is None and result["shared"] == 3


def test_a_tensor_path_outside_the_run_is_not_read_and_said(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = np.arange(40 * 3, dtype="<f4")
    (outside / "secret.bin").write_bytes(secret.tobytes())
    cases = {
        "up": ("../outside/secret.bin", "tensor path '../outside/secret.bin' leaves the run"),
        "absolute": (str(outside / "secret.bin"), f"tensor path '{outside}/secret.bin' leaves"),
        "link": ("t.bin", "tensor path 't.bin' goes through a symbolic link"),
        "fifo": ("t.bin", "tensor 't.bin' is not a regular file"),
        "short": ("t.bin", "tensor 't.bin' has 480 bytes, not 960"),
        "missing": ("gone.bin", "tensor 'gone.bin' cannot be opened (No such file or directory)"),
    }
    rng = np.random.default_rng(1)
    ids = [str(i) for i in range(40)]
    for name, (path, _) in cases.items():
        entry = snapshot_entry("enc", 1, rng.normal(size=(40, 2)), ids)
        entry["tensor"] = {"path": path, "shape": [40, 6], "dtype": "<f4"}
        write(tmp_path / "logs" / name, entry)
    (tmp_path / "logs" / "link" / "t.bin").symlink_to(outside / "secret.bin")
    os.mkfifo(tmp_path / "logs" / "fifo" / "t.bin")
    (tmp_path / "logs" / "short" / "t.bin").write_bytes(secret.tobytes())
    good = tmp_path / "logs" / "good"
    entry = snapshot_entry("enc", 1, rng.normal(size=(40, 2)), ids)
    entry["tensor"] = {"path": "t.bin", "shape": [40, 6], "dtype": "<f4"}
    write(good, entry)
    (good / "t.bin").write_bytes(rng.normal(size=(40, 6)).astype("<f4").tobytes())
    for name, (_, why) in cases.items():
        result = compare_runs(
            RunSnapshots(good, "good"), RunSnapshots(tmp_path / "logs" / name, name), "enc"
        )
        (message,) = result["messages"]
        assert message.startswith(f"no neighbourhood overlap: run {name}: {why}")
        assert result["overlap"] is None and result["histogram"] is None
        assert result["xy_a"] is not None and result["xy_b"] is not None  # the views still
    assert (
        compare_runs(RunSnapshots(good, "a"), RunSnapshots(good, "b"), "enc")["overlap"]
        == [10] * 40
    )  # the good tensor is read


def _page_data(page: Path) -> dict[str, Any]:
    found = re.search(r'id="learnscope-data">(.*?)</script>', page.read_text("utf-8"), re.S)
    assert found is not None
    return json.loads(found.group(1))


def _expected(fitted: Path, key: str = KEY, at: int | None = None) -> dict[str, Any]:
    """The comparison of the two fits (at step cursor ``at``), as JSON brings it back."""
    a, b = (RunSnapshots(fitted / "fit" / v, f"fit/{v}") for v in ("version_0", "version_1"))
    return json.loads(json.dumps(compare_runs(a, b, key, at=at)))


def test_the_tab_route_answers_the_comparison_and_says_what_is_wrong(fitted: Path) -> None:
    from tests.kit.tb_server import tensorboard

    _two_runs_sharing(fitted / "few", shared=3, only_a=497, only_b=477)
    route = "/data/plugin/learnscope/compare"
    with tensorboard(fitted) as server:
        server.wait_for("/data/plugin/learnscope/runs", lambda runs: len(runs) == 4)
        answer = server.json(route, a="fit/version_0", b="fit/version_1", key=KEY)
        assert answer == _expected(fitted)
        assert answer["overlap"] is not None and sum(answer["histogram"]) == 48
        chosen = server.json(route, a="fit/version_1", b="fit/version_0", key=KEY, step_a=6)
        assert (chosen["a"]["step"], chosen["b"]["step"]) == (6, 12)
        for at, steps in ((6, (6, 6)), (11, (6, 6)), (2, (6, 6)), (12, (12, 12)), (99, (12, 12))):
            cursor = server.json(route, a="fit/version_1", b="fit/version_0", key=KEY, at=at)
            assert (cursor["a"]["step"], cursor["b"]["step"]) == steps, at  # as every panel
        beside = server.json(route, a="fit/version_1", b="fit/version_0", key=KEY, at=6, step_b=12)
        assert (beside["a"]["step"], beside["b"]["step"]) == (6, 12)  # a step given is kept
        few = server.json(route, a="few/a", b="few/b", key="enc")
        assert few["messages"] == [
            "runs few/a and few/b share 3 of 500/480 ids of key enc: need at least 11"
        ]
        for params, status in (
            ({"a": "../fit/version_0", "b": "few/b", "key": "enc"}, 404),  # not under logdir
            ({"a": "nothing", "b": "few/b", "key": "enc"}, 404),
            ({"a": "few/a", "b": "few/b", "key": "enc", "step_a": "x"}, 400),
            ({"a": "few/a", "b": "few/b", "key": "enc", "at": "1.5"}, 400),
        ):
            with pytest.raises(urllib.error.HTTPError) as error:
                server.get(route, **params)
            assert error.value.code == status
            assert "error" in json.loads(error.value.read())


def test_the_export_holds_the_comparison_of_every_shared_key(fitted: Path, tmp_path: Path) -> None:
    from learnscope.lightning_glue.cli import main

    page = tmp_path / "compare.html"
    argv = ["export", str(fitted), "--html", str(page)]
    assert main([*argv, "--compare", "fit/version_0", "fit/version_1"]) == 0
    compare = _page_data(page)["compare"]
    assert (compare["a"], compare["b"], compare["messages"]) == (
        "fit/version_0",
        "fit/version_1",
        [],
    )
    assert list(compare["keys"]) == [KEY]
    held = compare["keys"][KEY]  # every step the cursor can show: the page's comparison moves
    assert (held["from"], held["pairs"], held["note"]) == ([6, 12], 2, None)
    assert held["held"][-1] == _expected(fitted)
    at_six = _expected(fitted, at=6)
    assert (at_six["a"]["step"], at_six["b"]["step"]) == (6, 6) and held["held"][0] == at_six
    assert main([*argv[:3], str(tmp_path / "no.html"), "--compare", "fit/version_0", "x"]) == 2
    assert not (tmp_path / "no.html").exists()


@pytest.fixture
def twins(fitted: Path, tmp_path: Path) -> Path:
    """A log dir of two copies of one real fit, ``first`` and ``second``: identical snapshots, as
    two runs of one seed and the same settings give."""
    for name in ("first", "second"):
        shutil.copytree(fitted / "fit" / "version_0", tmp_path / "twins" / name)
    return tmp_path / "twins"


def test_identical_snapshots_are_said_identical_in_the_route_and_the_export(
    twins: Path, tmp_path: Path
) -> None:
    """Overlap 10/10 everywhere and a residual of 0: the answer says so and lists no point."""
    from learnscope.lightning_glue.cli import main
    from tests.kit.tb_server import tensorboard

    with tensorboard(twins) as server:
        server.wait_for("/data/plugin/learnscope/runs", lambda runs: len(runs) == 2)
        answer = server.json("/data/plugin/learnscope/compare", a="first", b="second", key=KEY)
    assert answer["overlap"] == [10] * 48 and answer["residual"] == 0
    assert answer["identical"] is True and answer["differ"] == []
    assert answer["verdict"] == (
        "A and B are identical on the 48 points compared: every one keeps its 10 nearest "
        "neighbours and the aligned views coincide (residual 0 spreads), so nothing differs. "
        "Two runs of the same code, data and seed give this: train B with another seed or other "
        "settings to see what changes."
    )
    page = tmp_path / "twins.html"
    assert main(["export", str(twins), "--html", str(page), "--compare", "first", "second"]) == 0
    assert _page_data(page)["compare"]["keys"][KEY]["held"][-1] == answer


# ------------------------------------------------------------------------------ in Chromium

# A point of A's picture with no other within 6 px there; its positions in A and B, B's pixels
# on its ring's circle, and the pixels there before.
_ISOLATED_IN_A = """
const p = window.learnscopeView.compare;
const [a, b] = p.positions, n = p.count;
for (let k = 0; k < n; k++) {
  let near = Infinity;
  for (let j = 0; j < n; j++) {
    if (j !== k) near = Math.min(near, Math.hypot(a[2*j] - a[2*k], a[2*j+1] - a[2*k+1]));
  }
  if (near < 6) continue;
  const r = p.canvases[0].querySelector('canvas').getBoundingClientRect();
  return {k, id: p.data.ids[k], x: a[2*k], y: a[2*k+1], width: r.width, height: r.height,
          bx: b[2*k], by: b[2*k+1]};
}
return null;
"""

# Pixels of B's canvas on a circle of radius 6 around (arguments[0], arguments[1]).
_RING_PIXELS = """
const p = window.learnscopeView.compare, ctx = p.contexts[1];
const ratio = window.devicePixelRatio || 1, out = [];
for (let t = 0; t < 16; t++) {
  const angle = t * Math.PI / 8;
  const x = arguments[0] + 6 * Math.cos(angle), y = arguments[1] + 6 * Math.sin(angle);
  out.push(Array.from(ctx.getImageData(Math.round(x * ratio), Math.round(y * ratio), 1, 1).data));
}
return out;
"""


def _compare_state(driver: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    script = "const p = window.learnscopeView && learnscopeView.compare; return p && p.state.ready"
    while not driver.execute_script(script):
        assert time.monotonic() < deadline, "the comparison never opened"
        time.sleep(0.2)
    return driver.execute_script("return JSON.parse(JSON.stringify(learnscopeView.compare.state))")


def _check_panel(driver: Any, expected: dict[str, Any]) -> None:
    """The panel shows the numbers of ``expected``; hovering a point in A rings it in B."""
    from selenium.webdriver.common.action_chains import ActionChains

    state = _compare_state(driver)
    assert (state["a"], state["b"], state["key"], state["keyB"]) == (
        expected["a"]["run"],
        expected["b"]["run"],
        expected["key"],
        expected["b"]["key"],
    )
    assert state["histogram"] == expected["histogram"] and state["drawn"] == [48, 48]
    shown = driver.execute_script(
        "return Array.from(document.querySelectorAll('[data-role=compare-histogram] [data-count]'),"
        " (e) => +e.textContent)"
    )
    assert shown == expected["histogram"]
    rows = driver.execute_script(
        "return Array.from(document.querySelectorAll('[data-role=compare-differ] tr[data-index]'),"
        " (tr) => Array.from(tr.children, (td) => td.textContent))"
    )
    assert [r[:2] for r in rows] == [[d["id"], f"{d['overlap']}/10"] for d in expected["differ"]]
    assert [r[2] for r in rows] == [d["metadata"]["label"] for d in expected["differ"]]
    summary = driver.find_element("css selector", "[data-role=compare-summary]").text
    assert f"mean overlap {expected['mean_overlap'] * 100:.1f}% of 10 neighbours" in summary

    point = driver.execute_script(_ISOLATED_IN_A)
    assert point is not None
    before = driver.execute_script(_RING_PIXELS, point["bx"], point["by"])
    canvas = driver.execute_script(
        "return learnscopeView.compare.canvases[0].querySelector('canvas')"
    )
    # whole in the window (a runs table above may push it past the fold): the mouse lands there
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)
    ActionChains(driver).move_to_element_with_offset(
        canvas, round(point["x"] - point["width"] / 2), round(point["y"] - point["height"] / 2)
    ).perform()
    state = _compare_state(driver)
    assert state["hovered"] == point["k"]
    overlap = expected["overlap"][point["k"]]
    assert f"id {point['id']}" in state["tooltip"]
    assert f"{overlap}/10 neighbours in common" in state["tooltip"]
    after = driver.execute_script(_RING_PIXELS, point["bx"], point["by"])
    ringed = [p for p, q in zip(after, before, strict=True) if p != q and p[0] > 200 and p[2] < 80]
    assert len(ringed) >= 8  # orange around the same id in B
    ActionChains(driver).click().perform()
    assert _compare_state(driver)["pinned"] == point["k"]
    first = driver.find_element("css selector", "[data-role=compare-differ] tr[data-index]")
    first.click()
    assert _compare_state(driver)["pinned"] == expected["differ"][0]["index"]


@pytest.mark.browser
@pytest.mark.slow
def test_the_tab_compares_the_run_shown_with_the_run_picked(fitted: Path, browser: Any) -> None:
    from selenium.webdriver.support.ui import Select

    from tests.kit.browser import enter_learnscope_tab
    from tests.kit.tb_server import tensorboard

    with tensorboard(fitted) as server:
        server.wait_for("/data/plugin/learnscope/runs", lambda runs: len(runs) >= 2)
        expected = server.json(
            "/data/plugin/learnscope/compare", a="fit/version_1", b="fit/version_0", key=KEY
        )
        enter_learnscope_tab(browser, server.base)
        try:
            deadline = time.monotonic() + 60
            while not browser.execute_script(
                "return !!(window.learnscopeView && learnscopeView.state.ready)"
            ):
                assert time.monotonic() < deadline, "the tab never got ready"
                time.sleep(0.2)
            assert browser.execute_script("return learnscopeView.state.run") == "fit/version_1"
            picker = browser.find_element("css selector", "select[aria-label='compare with']")
            Select(picker).select_by_value("fit/version_0")
            _check_panel(browser, expected)
            # A's step menu moves the page's step cursor: every panel and both sides follow
            Select(
                browser.find_element("css selector", "select[aria-label='step A']")
            ).select_by_value("6")
            deadline = time.monotonic() + 60
            while (_compare_state(browser)["stepA"], _compare_state(browser)["stepB"]) != (6, 6):
                assert time.monotonic() < deadline, "the comparison at step 6 never came"
                time.sleep(0.2)
            at_six = server.json(
                "/data/plugin/learnscope/compare",
                a="fit/version_1",
                b="fit/version_0",
                key=KEY,
                at=6,
            )
            assert _compare_state(browser)["histogram"] == at_six["histogram"]
            cursor = browser.find_element("css selector", "[data-role=cursor-step]").text
            assert (
                cursor == "step 6"
                and browser.execute_script("return learnscopeView.state.position") == 0
            )
        finally:
            browser.switch_to.default_content()


def _open_export(browser: Any, page: Path, logdir: Path, *args: str) -> None:
    """``learnscope export LOGDIR --html PAGE --compare ARGS...``, opened in the browser."""
    from learnscope.lightning_glue.cli import main
    from tests.kit.browser import open_page

    assert main(["export", str(logdir), "--html", str(page), "--compare", *args]) == 0
    open_page(browser, page)


@pytest.mark.browser
@pytest.mark.slow
def test_the_exported_comparison_shows_the_same_numbers(
    fitted: Path, browser: Any, tmp_path: Path
) -> None:
    page = tmp_path / "compare.html"
    _open_export(browser, page, fitted, "fit/version_0", "fit/version_1")
    assert browser.execute_script("return learnscopeView.state.run") == "fit/version_0"
    _check_panel(browser, _page_data(page)["compare"]["keys"][KEY]["held"][-1])
    assert _expected(fitted)["histogram"] == _compare_state(browser)["histogram"]

    _two_runs_sharing(fitted / "few", shared=3, only_a=497, only_b=477)
    _open_export(browser, page, fitted, "few/a", "few/b")
    state = _compare_state(browser)
    message = "runs few/a and few/b share 3 of 500/480 ids of key enc: need at least 11"
    assert state["messages"] == [message]
    shown = browser.find_element("css selector", "[data-role=compare-message]").text
    assert shown == message


@pytest.mark.browser
@pytest.mark.slow
def test_the_exported_page_says_identical_snapshots_are_identical(
    twins: Path, browser: Any, tmp_path: Path
) -> None:
    page = tmp_path / "twins.html"
    _open_export(browser, page, twins, "first", "second")
    state = _compare_state(browser)
    verdict = _page_data(page)["compare"]["keys"][KEY]["held"][-1]["verdict"]
    assert state["identical"] is True and state["verdict"] == verdict and state["listed"] == []
    shown = browser.find_element("css selector", "[data-role=compare-verdict]").text
    assert shown == verdict
    summary = browser.find_element("css selector", "[data-role=compare-summary]").text
    assert "mean overlap 100.0% of 10 neighbours" in summary and "A and B are identical" in summary
    none = browser.find_element("css selector", "[data-role=compare-differ-none]").text
    assert none == "none: every point keeps its 10 nearest neighbours"
    assert not browser.find_elements("css selector", "[data-role=compare-differ]")


# ------------------------------------------------------------------------------ two tags


def _expected_tags(logdir: Path, key_b: str = KEY) -> dict[str, Any]:
    """The two-tag run's ``hidden`` beside its ``key_b``, as JSON brings it back."""
    run = RunSnapshots(logdir / TAGS_RUN, TAGS_RUN)
    return json.loads(json.dumps(compare_runs(run, run, HIDDEN, key_b=key_b)))


def _keys_written(run_dir: Path) -> str:
    """The run's snapshot keys in the order its record first names them, as messages list them."""
    return ", ".join(dict.fromkeys(e["key"] for e in _snapshots(run_dir)))


def test_two_tags_of_one_run_of_different_widths_equal_numpy(two_tags: Path) -> None:
    run = RunSnapshots(two_tags / TAGS_RUN, TAGS_RUN)
    result = compare_runs(run, run, HIDDEN, key_b=KEY)
    assert result["messages"] == [] and result["notes"] == []
    assert (result["key"], result["a"]["key"], result["b"]["key"]) == (HIDDEN, HIDDEN, KEY)
    assert sorted(result["a"]["keys"]) == sorted(result["b"]["keys"]) == sorted([HIDDEN, KEY])
    assert result["a"]["step"] == result["b"]["step"] == 12
    assert result["shared"] == result["compared"] == 48
    entries = {e["key"]: e for e in _snapshots(two_tags / TAGS_RUN) if e["step"] == 12}
    reader = ProjectorReader(two_tags)
    tensors = [reader.tensor(TAGS_RUN, f"{key}/step_000000012") for key in (HIDDEN, KEY)]
    assert [t.shape for t in tensors] == [(48, 16), (48, 8)]  # two widths
    expected = _equals_numpy(result, [entries[HIDDEN], entries[KEY]], tensors)
    assert 0 < expected.mean() < 10  # two layers: neighbourhoods neither all kept nor all lost


def test_one_run_and_one_tag_on_both_sides_is_said_plainly(two_tags: Path) -> None:
    run = RunSnapshots(two_tags / TAGS_RUN, TAGS_RUN)
    same = compare_runs(run, run, KEY)
    assert same["messages"] == [
        f"A and B are the same snapshot (run {TAGS_RUN}, {KEY} at step 12): "
        "pick another run or another tag"
    ]
    assert same["overlap"] is None and same["xy_a"] is None and same["b"]["key"] == KEY
    over_time = compare_runs(run, run, KEY, step_a=6)  # one tag at two steps is two snapshots
    assert over_time["messages"] == [] and over_time["overlap"] is not None
    missing = Comparisons().compare(
        (two_tags / TAGS_RUN, TAGS_RUN), (two_tags / TAGS_RUN, TAGS_RUN), KEY, key_b="nope"
    )
    keys = _keys_written(two_tags / TAGS_RUN)
    assert missing["messages"] == [f"run {TAGS_RUN} has no snapshot of nope (keys: {keys})"]
    assert missing["b"]["key"] == "nope" and missing["a"]["step"] == 12


def test_the_tab_route_compares_two_tags_and_keeps_each_pair(two_tags: Path) -> None:
    from tests.kit.tb_server import tensorboard

    route = "/data/plugin/learnscope/compare"
    with tensorboard(two_tags) as server:
        server.wait_for("/data/plugin/learnscope/runs", lambda runs: len(runs) == 1)
        answer = server.json(route, a=TAGS_RUN, b=TAGS_RUN, key=HIDDEN, key_b=KEY)
        assert answer == _expected_tags(two_tags)
        assert answer["b"]["key"] == KEY and sum(answer["histogram"]) == 48
        # the kept answers are keyed on both tags: the other pairs are not this one
        reverse = server.json(route, a=TAGS_RUN, b=TAGS_RUN, key=KEY, key_b=HIDDEN)
        assert (reverse["a"]["key"], reverse["b"]["key"]) == (KEY, HIDDEN)
        assert reverse["overlap"] == answer["overlap"]  # the overlap is symmetric
        assert reverse["xy_a"] != answer["xy_a"]  # A's picture is the other tag's
        same = server.json(route, a=TAGS_RUN, b=TAGS_RUN, key=HIDDEN)
        assert same["b"]["key"] == HIDDEN and same["overlap"] is None
        assert same["messages"][0].endswith("pick another run or another tag")
        assert server.json(route, a=TAGS_RUN, b=TAGS_RUN, key=HIDDEN, key_b="") == same


def test_the_export_with_tags_holds_that_pair_and_says_what_is_wrong(
    two_tags: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from learnscope.lightning_glue.cli import main

    page = tmp_path / "tags.html"
    argv = ["export", str(two_tags), "--html", str(page)]
    assert main([*argv, "--compare", TAGS_RUN, TAGS_RUN, "--tags", HIDDEN, KEY]) == 0
    compare = _page_data(page)["compare"]
    assert (compare["a"], compare["b"], compare["messages"]) == (TAGS_RUN, TAGS_RUN, [])
    assert list(compare["keys"]) == [HIDDEN]
    assert compare["keys"][HIDDEN]["held"][-1] == _expected_tags(two_tags)
    capsys.readouterr()

    with pytest.raises(SystemExit) as stop:
        main([*argv, "--tags", HIDDEN, KEY])
    assert stop.value.code == 2
    assert "error: --tags TAG_A TAG_B needs --compare RUN_A RUN_B" in capsys.readouterr().err
    other = ["export", str(two_tags), "--html", str(tmp_path / "no.html"), "--compare", TAGS_RUN]
    assert main([*other, TAGS_RUN, "--tags", HIDDEN, "nope/validate"]) == 2
    keys = _keys_written(two_tags / TAGS_RUN)
    assert capsys.readouterr().err == (
        f"learnscope export: run {TAGS_RUN} has no snapshot of nope/validate (keys: {keys})\n"
    )
    assert main([*other, TAGS_RUN]) == 2  # one run, no tags: nothing to compare
    assert "pick another run or two tags (--tags)" in capsys.readouterr().err
    assert not (tmp_path / "no.html").exists()


def _select(driver: Any, label: str) -> Any:
    from selenium.webdriver.support.ui import Select

    return Select(driver.find_element("css selector", f"select[aria-label='{label}']"))


@pytest.mark.browser
@pytest.mark.slow
def test_the_with_tag_choice_and_the_exported_pair_show_the_routes_numbers(
    two_tags: Path, browser: Any, tmp_path: Path
) -> None:
    from tests.kit.browser import enter_learnscope_tab, wait_view_ready
    from tests.kit.tb_server import tensorboard

    with tensorboard(two_tags) as server:
        server.wait_for("/data/plugin/learnscope/runs", lambda runs: len(runs) == 1)
        route = "/data/plugin/learnscope/compare"
        expected = server.json(route, a=TAGS_RUN, b=TAGS_RUN, key=HIDDEN, key_b=KEY)
        enter_learnscope_tab(browser, server.base)
        try:
            wait_view_ready(browser)
            _select(browser, "compare tag").select_by_value(HIDDEN)
            _select(browser, "compare with").select_by_value(TAGS_RUN)  # the run shown
            shown = browser.find_element("css selector", "[data-role=compare-message]").text
            assert shown.endswith("pick another run or another tag (with tag)")
            assert browser.execute_script("return learnscopeView.compare") is None
            tags = [o.get_attribute("value") for o in _select(browser, "compare with tag").options]
            assert sorted(tags) == sorted([HIDDEN, KEY])
            _select(browser, "compare with tag").select_by_value(KEY)
            _check_panel(browser, expected)
            assert _select(browser, "compare with tag").first_selected_option.text == KEY
            heading = browser.find_element("css selector", "[data-role=compare] h2").text
            assert heading == (
                f"Compare {TAGS_RUN} {HIDDEN} (A) with {TAGS_RUN} {KEY} (B) (aligned PCA)"
            )
        finally:
            browser.switch_to.default_content()

    # the exported page with --tags opens on that pair, with the route's numbers
    page = tmp_path / "tags.html"
    _open_export(browser, page, two_tags, TAGS_RUN, TAGS_RUN, "--tags", HIDDEN, KEY)
    assert _page_data(page)["compare"]["keys"][HIDDEN]["held"][-1] == expected
    _check_panel(browser, expected)
    chosen = [
        _select(browser, label).first_selected_option.get_attribute("value")
        for label in ("compare with", "compare tag", "compare with tag")
    ]
    assert chosen == [TAGS_RUN, HIDDEN, KEY]
