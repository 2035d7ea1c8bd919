"""The training-dynamics view: built from the run record only, in the tab, the export and W&B.

Most tests write records by hand, as ``docs/run_record.md`` describes them
(``tests/kit/record_entries.py``); the end-to-end tests read the records real fits leave.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learnscope.plugins.views import run_status, run_view, view_page
from learnscope.run_directory.file_names import RECORD_FILE
from learnscope.run_directory.record import append_entries
from tests.kit.browser import (
    enter_learnscope_tab,
    open_page,
    play_until_moved,
    ready_view_state,
    unavailable_reason,
)
from tests.kit.models import ZeroBranch, ZeroBranchWithProbe, loaders, trainer
from tests.kit.readers import page_views, parse_metadata, wandb_run_dir, wandb_view_pages
from tests.kit.record_entries import (
    ALL_CALLBACKS,
    autocorrelation_entry,
    categorical,
    drifting_points,
    findings_entry,
    numeric,
    run_entry,
    snapshot_entry,
    spread_of,
    write,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

needs_browser = pytest.mark.skipif(
    unavailable_reason() is not None, reason=str(unavailable_reason())
)

# An isolated point (no other within 4 px), its page coordinates, its canvas pixel, its tooltip.
_ISOLATED_POINT = """
const v = window.learnscopeView;
const pos = v.pos, n = v.state.points;
for (let k = 0; k < n; k++) {
  let near = Infinity;
  for (let j = 0; j < n; j++) {
    if (j === k) continue;
    near = Math.min(near, Math.hypot(pos[2*j] - pos[2*k], pos[2*j+1] - pos[2*k+1]));
  }
  if (near < 4) continue;
  const r = v.canvas.getBoundingClientRect();
  const pixel = v.embedding.scatter.pixel(pos[2*k], pos[2*k+1]);  // the points' layer
  return {k, id: v.current.ids[k], x: pos[2*k], y: pos[2*k+1], width: r.width,
          height: r.height, pixel, canvasWidth: v.width, canvasHeight: v.height,
          renderer: v.state.renderer};
}
return null;
"""

LABELS = 12  # integer classes: categories in the picture and in every view


def _decode(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), "<f2").reshape(-1, 2).astype(np.float64)


def write_full_run(run_dir: Path, points: int = 40, steps: tuple[int, ...] = (10, 20, 30)) -> dict:
    """A finished run with every kind of entry; what was written, for the checks."""
    rng = np.random.default_rng(3)
    ids = [f"p{i}" for i in range(points)]
    labels = rng.integers(0, LABELS, points)
    labels[:LABELS] = np.arange(LABELS)  # every class present
    loss = rng.random(points)
    views = drifting_points(points, len(steps), seed=1)
    entries: list[dict] = [run_entry(*ALL_CALLBACKS, time=500.0)]
    orders = []
    for step, xy in zip(steps, views, strict=True):
        order = rng.permutation(points)  # rows in another order at each step
        orders.append(order)
        entries.append(
            snapshot_entry(
                "encoder/validate",
                step,
                xy[order],
                [ids[i] for i in order],
                frame=[-4.0, 4.0, -4.0, 4.0],
                columns=[
                    categorical("label", labels[order].tolist()),
                    numeric("loss", loss[order].tolist()),
                ],
            )
        )
    acf = np.array([[1.0, 0.9, 0.8, 0.7, 0.6, 0.5], [1.0, -0.2, 0.1, 0.0, 0.05, np.nan]])
    for step in (15, 30):
        entries.append(autocorrelation_entry(step, "params", ["encoder", "head"], acf, [0.9, -0.2]))
        entries.append(
            autocorrelation_entry(step, "grads", ["encoder", "head"], acf / 2, [0.4, 0.1])
        )
    first = ("zero-gradient", "head.bias", "gradient is | exactly zero", 12, "warning")
    second = ("dead-units", "encoder.0", "half the units never fire", 25, "error")
    entries.append(findings_entry(12, first))
    entries.append(findings_entry(25, first, second))
    entries.append({"kind": "end", "step": 30, "status": "finished"})
    write(run_dir, *entries)
    return {
        "ids": ids,
        "labels": labels,
        "loss": loss,
        "views": views,
        "steps": steps,
        "acf": acf,
        "findings": [first, second],
    }


def test_the_view_is_the_record_folded(tmp_path: Path) -> None:
    written = write_full_run(tmp_path / "run")
    view = run_view.read_view(tmp_path / "run")
    json.dumps(view)  # JSON-able
    (embedding,) = view["embeddings"]
    assert embedding["key"] == "encoder/validate" and embedding["steps"] == [10, 20, 30]
    assert embedding["points_shown"] == embedding["points_total"] == 40
    assert embedding["frame"] == [-4.0, 4.0, -4.0, 4.0]
    position = {point: i for i, point in enumerate(written["ids"])}
    rows = [position[i] for i in embedding["ids"]]
    for xy, spread, truth in zip(
        embedding["xy"], embedding["spreads"], written["views"], strict=True
    ):
        reference = truth / spread_of(truth)  # float64: in units of the snapshot's spread
        assert spread == pytest.approx(spread_of(truth), rel=1e-6)
        np.testing.assert_allclose(_decode(xy), reference[rows], rtol=1e-3, atol=2e-3)
    label, loss = embedding["columns"]
    assert label["kind"] == "categorical" and len(label["categories"]) == LABELS
    assert [int(label["categories"][c]) for c in label["codes"]] == written["labels"][rows].tolist()
    assert len(label["coloured"]) == 10  # the 10 most frequent, as the Images picture
    assert loss["kind"] == "numeric"
    np.testing.assert_allclose(loss["values"], written["loss"][rows], atol=1e-6)

    kinds = {k["kind"]: k for k in view["autocorrelation"]}
    assert list(kinds) == ["params", "grads"]
    for name, scale in (("params", 1.0), ("grads", 0.5)):
        kind = kinds[name]
        assert kind["groups"] == ["encoder", "head"] and kind["steps"] == [15, 30]
        assert kind["lags"] == [1, 2, 5]  # ModelAutocorrelation's default lags that are there
        expected = [[round(v * scale, 4) for v in written["acf"][g, [1, 2, 5]]] for g in (0, 1)]
        expected[1][2] = None  # NaN in the record
        assert kind["values"] == [expected, expected]
    assert kinds["params"]["rho1"] == [[0.9, 0.9], [-0.2, -0.2]]

    names = ("code", "subject", "message", "step", "severity")
    assert view["findings"] == [  # the newest table, whole; rows of before issue 37 still hold
        {
            **dict(zip(names, row, strict=True)),
            "first_step": row[3],
            "resolved_step": None,
            "advice": "",
            "holds": True,
            "life": f"found at step {row[3]}; still holds",
        }
        for row in written["findings"]
    ]
    assert view["messages"] == []
    assert view["status"] == {"embeddings": None, "autocorrelation": None, "findings": None}
    assert view["attached"] == sorted(ALL_CALLBACKS) and view["time"] == 500.0
    assert view["ended"] == {"step": 30, "status": "finished"}


def test_what_is_attached_comes_from_the_run_entry(tmp_path: Path) -> None:
    record = write(tmp_path / "run", run_entry(*ALL_CALLBACKS))
    run = run_view.RunModel(tmp_path / "run")
    view = run.view()
    assert view["messages"] == []  # nothing says "attach" what is attached
    assert view["status"] == {
        "embeddings": "waiting for the first snapshot",
        "autocorrelation": "waiting for the first autocorrelation analysis",
        "findings": "no findings yet",
    }
    append_entries(record, [findings_entry(5)])  # a table with no row yet
    assert run.view()["status"]["findings"] == "no findings yet"
    append_entries(record, [{"kind": "end", "step": 9, "status": "finished"}])
    view = run.view()
    assert view["status"]["findings"] == "no findings"
    assert view["status"]["embeddings"] == "EmbeddingProjector wrote no snapshot in this run"
    assert view["messages"] == []

    write(tmp_path / "only", run_entry("EmbeddingProjector"))
    view = run_view.read_view(tmp_path / "only")
    assert view["messages"] == [
        "no autocorrelation (attach ModelAutocorrelation)",
        "no health checks (attach TrainingHelper)",
    ]
    assert view["status"]["embeddings"] == "waiting for the first snapshot"
    assert view["status"]["findings"] == "no findings table (attach TrainingHelper)"


def test_a_new_run_entry_after_an_end_is_a_run_going_on(tmp_path: Path) -> None:
    write(
        tmp_path / "run",
        run_entry(*ALL_CALLBACKS, time=1.0),
        {"kind": "end", "step": 4, "status": "finished"},
        run_entry("TrainingHelper", time=2.0),
    )
    view = run_view.read_view(tmp_path / "run")
    assert view["ended"] is None and view["time"] == 2.0
    assert view["status"]["findings"] == "no findings yet"
    assert view["attached"] == sorted(ALL_CALLBACKS)  # attached to this record's runs


def test_snapshots_without_aligned_pca_say_how_to_get_it(tmp_path: Path) -> None:
    write(
        tmp_path / "run",
        run_entry("EmbeddingProjector"),
        snapshot_entry("enc", 1, None, ["a", "b"], columns=[categorical("c", ["x", "y"])]),
    )
    view = run_view.read_view(tmp_path / "run")
    assert view["embeddings"] == []
    assert run_status.PCA_HINT in view["status"]["embeddings"]
    assert any(run_status.PCA_HINT in m for m in view["messages"])


def test_a_plain_loops_snapshots_without_aligned_pca_get_the_core_call(tmp_path: Path) -> None:
    """A record with no ``run`` entry (a plain loop's) is not told to pass a callback argument."""
    write(
        tmp_path / "run",
        snapshot_entry("enc", 1, None, ["a", "b"], columns=[categorical("c", ["x", "y"])]),
    )
    view = run_view.read_view(tmp_path / "run")
    said = [view["status"]["embeddings"], *view["messages"]]
    assert all("EmbeddingProjector" not in words for words in said)
    assert run_status.LOOP_PCA_HINT in view["status"]["embeddings"]
    assert any(run_status.LOOP_PCA_HINT in m for m in view["messages"])
    assert "AlignedViews().add(snapshot)" in run_status.LOOP_PCA_HINT


def test_points_are_matched_by_id_and_subsampled_the_same_way_every_time(tmp_path: Path) -> None:
    ids = [f"p{i}" for i in range(300)]
    entries = [run_entry(*ALL_CALLBACKS)]
    for step in (1, 2):
        order = np.random.default_rng(step).permutation(300)
        xy = np.stack([order.astype(float) + 1, -order.astype(float) - 1], axis=1)
        entries.append(snapshot_entry("enc", step, xy, [ids[i] for i in order]))
    write(tmp_path / "big", *entries)
    view = run_view.read_view(tmp_path / "big", max_points=100)
    (embedding,) = view["embeddings"]
    assert embedding["points_shown"] == 100 and embedding["points_total"] == 300
    assert any("100 of 300 points shown" in m for m in view["messages"])
    shown = embedding["ids"]
    assert shown == run_view.read_view(tmp_path / "big", max_points=100)["embeddings"][0]["ids"]
    for xy, spread in zip(embedding["xy"], embedding["spreads"], strict=True):
        expected = np.array([float(i[1:]) + 1 for i in shown]) / spread
        np.testing.assert_allclose(_decode(xy)[:, 0], expected, rtol=1e-3)


def test_only_points_in_every_snapshot_are_shown_and_a_rewritten_step_replaces(
    tmp_path: Path,
) -> None:
    xy = np.arange(20, dtype=float).reshape(10, 2) + 1
    ids = [str(i) for i in range(10)]
    record = write(
        tmp_path / "run",
        run_entry(*ALL_CALLBACKS),
        snapshot_entry("enc", 1, xy, ids),
        snapshot_entry("enc", 2, xy[:8], ids[:8]),  # two points left out
    )
    run = run_view.RunModel(tmp_path / "run")
    (embedding,) = run.view()["embeddings"]
    assert embedding["ids"] == ids[:8] and embedding["steps"] == [1, 2]
    assert "only points present in every snapshot are shown" in embedding["notes"]
    assert all(len(_decode(x)) == 8 for x in embedding["xy"])
    append_entries(record, [snapshot_entry("enc", 2, -xy[:8], ids[:8])])  # step 2 again
    (embedding,) = run.view()["embeddings"]
    assert embedding["steps"] == [1, 2]
    np.testing.assert_allclose(
        _decode(embedding["xy"][1]), -xy[:8] / spread_of(xy[:8]), rtol=1e-3, atol=1e-3
    )


def test_a_refresh_reads_only_new_lines_and_encodes_only_the_new_snapshot(tmp_path: Path) -> None:
    """The cost of a refresh is flat: one new snapshot is one entry read and one encoded."""
    points = 50
    ids = [f"p{i}" for i in range(points)]
    views = drifting_points(points, 301, seed=2)
    record = write(
        tmp_path / "run",
        run_entry(*ALL_CALLBACKS),
        *[snapshot_entry("enc", s, views[s], ids) for s in range(300)],
    )
    run = run_view.RunModel(tmp_path / "run")
    first = run.view()
    assert run.entries_read == 301 and run.snapshots_encoded == 300
    assert run.view() is first  # nothing new: the same view, nothing read
    append_entries(record, [snapshot_entry("enc", 300, views[300], ids)])
    view = run.view()
    assert run.entries_read == 302 and run.snapshots_encoded == 301
    (embedding,) = view["embeddings"]
    assert len(embedding["xy"]) == 301 and embedding["xy"][:300] == first["embeddings"][0]["xy"]
    np.testing.assert_allclose(
        _decode(embedding["xy"][-1]), views[300] / spread_of(views[300]), rtol=1e-3, atol=2e-3
    )


def test_damaged_entries_are_skipped_and_named(tmp_path: Path) -> None:
    xy = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    record = write(
        tmp_path / "run",
        run_entry(*ALL_CALLBACKS),
        snapshot_entry("enc", 1, xy, ["a", "b", "c"]),
        {"kind": "snapshot", "step": 2, "xy": {"dtype": "<f4", "shape": [3, 2], "b64": "AAAA"}},
        {**snapshot_entry("enc", 3, xy, ["a", "b", "c"]), "ids": ["a", "b"]},
        snapshot_entry("enc", 4, xy, None),  # no ids where the key's snapshots have them
        {**snapshot_entry("enc", 5, xy, ["a", "b", "c"]), "frame": [1, 0, 0, 1]},
        {"kind": "findings", "step": 6, "rows": [{"code": "x"}]},
        {
            "kind": "autocorrelation",
            "step": 7,
            "what": "params",
            "groups": ["a"],
            "lags": [0],
            "acf": [[1.0, 2.0]],
        },
        snapshot_entry("enc", 8, xy * 2, ["a", "b", "c"]),
    )
    with open(record, "ab") as file:
        file.write(b"not json\n")
    view = run_view.read_view(tmp_path / "run")
    (embedding,) = view["embeddings"]
    assert embedding["steps"] == [1, 8]  # what could be read is shown
    messages = view["messages"]
    assert "1 damaged line(s) of the record skipped" in messages
    assert "snapshot at step 2 skipped: it has no key" in messages
    assert "snapshot enc at step 3 skipped: ids is not a list of 3 ids" in messages
    assert "snapshot enc at step 4 skipped: it has no ids, the key's snapshots ids" in messages
    assert any(m.startswith("snapshot enc at step 5 skipped: frame [1, 0, 0, 1]") for m in messages)
    assert "findings at step 6 skipped: a row of its table has no text 'severity'" in messages
    assert "autocorrelation params at step 7 skipped: acf is not [1 groups][1 lags]" in messages
    assert view["autocorrelation"] == [] and view["findings"] == []


def test_export_writes_every_readable_run_and_lists_the_others(tmp_path: Path) -> None:
    write_full_run(tmp_path / "logs" / "good" / "version_0")
    write(tmp_path / "logs" / "garbled" / "version_0", run_entry(*ALL_CALLBACKS))
    with open(tmp_path / "logs" / "garbled" / "version_0" / RECORD_FILE, "ab") as file:
        file.write(b'{"kind": "snapshot", "key": "enc", "step": "3"}\n\x00\xff\n')
    fifo = tmp_path / "logs" / "fifo" / "version_0"
    fifo.mkdir(parents=True)
    os.mkfifo(fifo / RECORD_FILE)
    page = tmp_path / "view.html"
    export = view_page.export_html(tmp_path / "logs", page)
    assert export.runs == ["garbled/version_0", "good/version_0"]
    assert [name for name, _ in export.failed] == ["fifo/version_0"]
    assert "not a regular file" in export.failed[0][1]
    shown = _page_views(page.read_text(encoding="utf-8"))
    assert shown["garbled/version_0"]["messages"] == [
        "1 damaged line(s) of the record skipped",
        "snapshot enc at step '3' skipped: step is '3', not a whole number",
    ]
    assert len(shown["good/version_0"]["embeddings"][0]["steps"]) == 3

    result = subprocess.run(
        [
            shutil.which("learnscope") or "learnscope",
            "export",
            str(tmp_path / "logs"),
            "--html",
            str(tmp_path / "cli.html"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "left out fifo/version_0" in result.stderr and "2 run(s)" in result.stdout


def test_export_and_help_import_no_torch(tmp_path: Path) -> None:
    write_full_run(tmp_path / "logs" / "run")
    code = (
        "import sys, time\n"
        "from learnscope.lightning_glue.cli import main\n"
        f"status = main(['export', {str(tmp_path / 'logs')!r}, '--html', "
        f"{str(tmp_path / 'v.html')!r}])\n"
        "print(status, sorted(m for m in ('torch', 'lightning', 'tensorboard', 'wandb') "
        "if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "0 []"
    assert (tmp_path / "v.html").stat().st_size > 0


def test_export_says_when_there_is_nothing(tmp_path: Path, capsys: Any) -> None:
    from learnscope.lightning_glue.cli import main

    assert main(["export", str(tmp_path), "--html", str(tmp_path / "v.html")]) == 1
    assert "no learnscope run" in capsys.readouterr().err
    assert not (tmp_path / "v.html").exists()
    assert shutil.which("learnscope") is not None


def _page_views(html: str) -> dict[str, dict]:
    data = re.search(r'id="learnscope-data">(.*?)</script>', html, re.S)
    assert data is not None
    return {r["name"]: r["view"] for r in json.loads(data[1])["runs"]}


# ------------------------------------------------------------------------------ W&B


def test_wandb_page_is_made_from_the_record_folder_alone(tmp_path: Path, wandb_dir: Path) -> None:
    import wandb

    from learnscope.plugins.wandb.page_writer import VIEW_KEY, RecordPage

    run = wandb.init(project="view", dir=str(wandb_dir))
    record_dir = Path(run.dir)  # the W&B writer's own folder; no TensorBoard anywhere
    points, ids = 30, [f"p{i}" for i in range(30)]
    views = drifting_points(points, 3)
    write(record_dir, run_entry(*ALL_CALLBACKS))
    page = RecordPage(record_dir)  # as a W&B writer keeps it
    for step, xy in enumerate(views):
        append_entries(record_dir / RECORD_FILE, [snapshot_entry("enc", step, xy, ids)])
        page.log(run, step, "trainer/global_step")
    folded = page.run_view
    assert folded.entries_read == 4 and folded.snapshots_encoded == 3  # each line read once
    run.finish()
    pages = sorted(
        (wandb_run_dir(wandb_dir) / "files" / "media" / "html").rglob("*.html"),
        key=lambda p: p.stat().st_mtime_ns,
    )
    assert len(pages) == 3
    html = pages[-1].read_text(encoding="utf-8")
    assert "export async function render()" in html and "stylesheet" not in html
    (shown,) = _page_views(html).values()
    view = run_view.read_view(record_dir, max_points=2_000, sprites=False)
    assert shown["embeddings"][0]["xy"] == view["embeddings"][0]["xy"]
    assert shown["embeddings"][0]["steps"] == [0, 1, 2]
    assert shown["status"]["findings"] == "no findings yet" and shown["messages"] == []
    assert VIEW_KEY == "~learnscope/view"


def test_a_fit_with_only_a_wandb_logger_logs_a_true_page_first_and_last(
    tmp_path: Path, wandb_dir: Path
) -> None:
    from lightning.pytorch.loggers import WandbLogger

    from learnscope.lightning_glue import EmbeddingProjector, TrainingHelper

    wb = WandbLogger(project="t", save_dir=str(wandb_dir))  # no TensorBoard anywhere
    projector = EmbeddingProjector(
        metadata_fn=lambda b: {"label": b[1]}, ids_fn="dataset_index", aligned_pca=True
    )
    callbacks = [projector, TrainingHelper(check_every_n_steps=3)]
    trainer(tmp_path, wb, callbacks, max_epochs=2).fit(ZeroBranch(), *loaders())
    record_dir = Path(wb.experiment.dir)
    wb.experiment.finish()
    pages = sorted(
        (wandb_run_dir(wandb_dir) / "files" / "media" / "html").rglob("*.html"),
        key=lambda p: p.stat().st_mtime_ns,
    )
    assert len(pages) == 2  # after the first snapshot, and the final page
    first, last = (next(iter(_page_views(p.read_text("utf-8")).values())) for p in pages)
    assert first["embeddings"][0]["steps"] == [6] and last["embeddings"][0]["steps"] == [6, 12]
    assert first["messages"] == [
        "encoder/validate: one snapshot only: nothing moves yet",
        "no autocorrelation (attach ModelAutocorrelation)",  # the one callback not attached
    ]
    assert last["messages"] == ["no autocorrelation (attach ModelAutocorrelation)"]
    view = run_view.read_view(record_dir, max_points=2_000, sprites=False)
    assert last["embeddings"][0]["xy"] == view["embeddings"][0]["xy"]
    assert ("zero-gradient", "branch") in {(f["code"], f["subject"]) for f in view["findings"]}
    assert not list(tmp_path.rglob("*tfevents*"))


@needs_browser
def test_a_wandb_fit_of_8_snapshots_logs_at_most_3_pages_the_last_showing_the_end(
    tmp_path: Path, wandb_dir: Path, browser: Any
) -> None:
    """W&B keeps every copy of the page: a fit of 8 snapshots in well under two minutes logs
    the page after its first snapshot and once at the end (at most once a minute between), and
    the final page is the record's whole view: the analysis made at the fit's end, the end."""
    from lightning.pytorch.loggers import WandbLogger

    from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper

    wb = WandbLogger(project="t", save_dir=str(wandb_dir))
    projector = EmbeddingProjector(
        metadata_fn=lambda b: {"label": b[1]}, ids_fn="dataset_index", aligned_pca=True
    )
    callbacks = [projector, TrainingHelper(check_every_n_steps=3), ModelAutocorrelation()]
    started = time.monotonic()
    trainer(tmp_path, wb, callbacks, max_epochs=8).fit(ZeroBranch(), *loaders())
    seconds = time.monotonic() - started
    record_dir = Path(wb.experiment.dir)
    wb.experiment.finish()
    record = run_view.read_view(record_dir, max_points=2_000, sprites=False)
    assert record["embeddings"][0]["steps"] == [6 * (epoch + 1) for epoch in range(8)]
    assert record["ended"] == {"step": 48, "status": "finished"}

    pages = wandb_view_pages(wandb_run_dir(wandb_dir))
    assert 2 <= len(pages) <= 3, (len(pages), seconds)
    first = next(iter(page_views(pages[0][1]).values()))
    assert first["embeddings"][0]["steps"] == [6] and first["ended"] is None
    step, html = pages[-1]
    (last,) = page_views(html).values()
    assert step == 48
    for field in ("ended", "status", "messages", "embeddings", "autocorrelation", "findings"):
        assert last[field] == record[field], field

    final = tmp_path / "final.html"
    final.write_text(html, encoding="utf-8")
    open_page(browser, final)
    text = browser.find_element("tag name", "body").text
    assert "waiting" not in text.lower(), text  # the run is over: nothing is still to come
    for status in filter(None, record["status"].values()):
        assert status[0].upper() + status[1:] in text


def test_wandb_page_stays_under_its_size_by_showing_fewer_snapshots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from learnscope.plugins.wandb import page_writer as wandb_view

    monkeypatch.setattr(wandb_view, "MAX_BYTES", 2_000_000)  # 500 x 2,000 points: 5.4 MB
    ids = [f"p{i}" for i in range(2_000)]
    views = drifting_points(2_000, 2)
    entries = [snapshot_entry("enc", s, views[s % 2] * (1 + s), ids) for s in range(500)]
    write(tmp_path / "run", run_entry(*ALL_CALLBACKS), *entries)
    html = wandb_view.wandb_view_html(tmp_path / "run")
    assert len(html.encode("utf-8")) <= wandb_view.MAX_BYTES
    (shown,) = _page_views(html).values()
    steps = shown["embeddings"][0]["steps"]
    assert steps[0] == 0 and steps[-1] == 499 and 2 < len(steps) < 500
    assert f"enc: {len(steps)} of 500 snapshots shown (evenly spaced)" in shown["messages"]


# ------------------------------------------------------------------------------ browsers


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real fit (the demo: 3 epochs, 3 snapshots, 2 autocorrelation analyses)."""
    from learnscope.lightning_glue.demo import run_demo

    logdir = tmp_path_factory.mktemp("view") / "runs"
    return run_demo(logdir, epochs=3, all_scalars=True).tensorboard  # lag_5 checked below


@pytest.fixture(scope="module")
def two_runs(demo_run: Path) -> Path:
    """The demo run and an older one first by name (``archive``), with findings."""
    logdir = demo_run.parent.parent
    write_full_run(logdir / "archive" / "version_0", points=60)
    record = logdir / "archive" / "version_0" / RECORD_FILE
    lines = record.read_text(encoding="utf-8").split("\n")
    first = json.loads(lines[0])
    first["time"] = 2_000.0  # started long before the demo
    record.write_text("\n".join([json.dumps(first), *lines[1:]]), encoding="utf-8")
    os.utime(record, (time.time() + 3_600,) * 2)  # changed last: the start decides, not mtime
    return logdir


@needs_browser
def test_exported_page_plays_offline_and_opens_the_newest_run(
    two_runs: Path, browser: Any, tmp_path: Path
) -> None:
    from learnscope.lightning_glue.cli import main

    page = tmp_path / "view.html"
    assert main(["export", str(two_runs), "--html", str(page)]) == 0
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["http://*", "https://*", "ws*"]})
    try:
        browser.get(page.as_uri())
        state = ready_view_state(browser)
        requests = browser.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)"
        )
    finally:
        browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
    assert [r for r in requests if not r.startswith(("data:", "blob:", "file:"))] == []
    assert state["run"] == "demo/version_0"  # the newest, not the first by name
    assert state["points"] == state["drawnPoints"] == 540 and state["steps"] == [20, 40, 60]
    view = _page_views(page.read_text(encoding="utf-8"))["demo/version_0"]
    _check_point_in_frame(browser, view)
    _hover_and_pin(browser, view)
    play_until_moved(browser)  # playing draws frames and moves along the steps

    browser.execute_script("window.learnscopeView.findMovers()")
    movers = browser.execute_script("return window.learnscopeView.state.movers")
    assert len(movers) == 20 and all(0 <= m["change"] <= 1 for m in movers)
    assert movers == sorted(movers, key=lambda m: -m["change"])


@needs_browser
def test_tensorboard_tab_shows_the_newest_run(two_runs: Path, demo_run: Path, browser: Any) -> None:
    from tests.kit.tb_server import tensorboard

    with tensorboard(two_runs) as server:
        listing = server.wait_for(
            "/data/plugins_listing", lambda v: v.get("learnscope", {}).get("enabled")
        )
        assert "learnscope" in listing, "the tensorboard_plugins entry point is not installed"
        runs = server.json("/data/plugin/learnscope/runs")
        started = run_view.read_view(demo_run)["time"]
        assert runs == [
            {
                "name": "archive/version_0",
                "time": 2_000.0,
                "failed": None,
                "has_data": True,
                "ended": {"step": 30, "status": "finished"},
            },
            {
                "name": "demo/version_0",
                "time": started,
                "failed": None,
                "has_data": True,
                "ended": {"step": 60, "status": "finished"},
            },
        ]
        view = server.json("/data/plugin/learnscope/view", run="demo/version_0")
        enter_learnscope_tab(browser, server.base)
        try:
            state = ready_view_state(browser)
            assert state["run"] == "demo/version_0"
            assert state["points"] == state["drawnPoints"] == 540
            _check_point_in_frame(browser, view)
            _hover_and_pin(browser, view)
            play_until_moved(browser)
            text = browser.find_element("tag name", "body").text
            assert "No findings." in text and "attach" not in text
            browser.execute_script("window.learnscopeView.loadRun('archive/version_0')")
            ready_view_state(browser)
            text = browser.find_element("tag name", "body").text
            assert "dead-units" in text and "encoder.0" in text  # the findings timeline
        finally:
            browser.switch_to.default_content()
        shots = os.environ.get("LEARNSCOPE_SCREENSHOT_DIR")
        if shots:
            Path(shots).mkdir(parents=True, exist_ok=True)
            browser.save_screenshot(str(Path(shots) / "learnscope_tab.png"))


# ------------------------------------------------------------------------------ real fits


def _tsv(path: Path) -> dict[str, list[str]]:
    header, rows = parse_metadata(path.read_text(encoding="utf-8"))
    assert header is not None
    return {name: [row[i] for row in rows] for i, name in enumerate(header)}


def test_the_view_of_a_real_fit_is_what_its_writers_wrote(demo_run: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    view = run_view.read_view(demo_run)
    (embedding,) = view["embeddings"]
    assert embedding["key"] == "encoder/validate"
    folders = sorted((demo_run / "projector" / "encoder" / "validate").iterdir())
    assert embedding["steps"] == [int(f.name.split("_")[1]) for f in folders] == [20, 40, 60]
    assert embedding["points_shown"] == embedding["points_total"] == 540
    for folder, xy in zip(folders, embedding["xy"], strict=True):
        table = _tsv(folder / "metadata.tsv")  # what the Projector tab shows
        coords = np.array([table["pca_x"], table["pca_y"]], np.float64).T
        reference = coords / spread_of(coords)  # float64, in units of the spread
        row = {point: r for r, point in enumerate(table["id"])}
        rows = [row[i] for i in embedding["ids"]]
        np.testing.assert_allclose(_decode(xy), reference[rows], rtol=2e-3, atol=2e-3)
    (label,) = embedding["columns"]
    last = _tsv(folders[-1] / "metadata.tsv")
    labels = dict(zip(last["id"], last["label"], strict=True))
    assert [label["categories"][c] for c in label["codes"]] == [labels[i] for i in embedding["ids"]]
    sprite = (folders[-1] / "sprite.png").read_bytes()
    assert (
        embedding["sprite"]["png"] == "data:image/png;base64," + base64.b64encode(sprite).decode()
    )

    kinds = {k["kind"]: k for k in view["autocorrelation"]}
    assert list(kinds) == ["params", "grads"]
    events = EventAccumulator(str(demo_run), size_guidance={"scalars": 0})
    events.Reload()  # every event file of the run
    for kind in kinds.values():
        assert kind["groups"] == ["encoder", "head"] and kind["lags"] == [1, 2, 5, 10, 20]
        assert kind["steps"] == sorted(kind["steps"]) and len(kind["steps"]) >= 2
        for s, step in enumerate(kind["steps"]):
            for g, group in enumerate(kind["groups"]):
                scalars = events.Scalars(
                    f"~learnscope/autocorrelation/{kind['kind']}/{group}/lag_5"
                )
                value = next(e.value for e in scalars if e.step == step)
                assert kind["values"][s][g][2] == pytest.approx(value, abs=1e-4)
    assert view["findings"] == [] and view["messages"] == []
    assert view["status"] == {
        "embeddings": None,
        "autocorrelation": None,
        "findings": "no findings",
    }


def test_a_real_record_read_mid_run_says_what_is_coming(demo_run: Path, tmp_path: Path) -> None:
    """The record of a fit cut where training was: no "attach" for what is attached."""
    lines = (demo_run / RECORD_FILE).read_bytes().splitlines(keepends=True)
    kinds = [json.loads(line)["kind"] for line in lines]
    first = kinds.index("snapshot")
    (tmp_path / "run").mkdir()
    record = tmp_path / "run" / RECORD_FILE
    record.write_bytes(b"".join(lines[:first]))
    run = run_view.RunModel(tmp_path / "run", sprites=False)  # the record alone
    view = run.view()
    assert view["messages"] == []
    assert view["status"] == {
        "embeddings": "waiting for the first snapshot",
        "autocorrelation": "waiting for the first autocorrelation analysis, at step 40 "
        "(analyze_every_n_steps=20) or at the end of the fit",  # the demo's: lags up to 20
        "findings": "no findings yet",
    }
    with open(record, "ab") as file:
        file.write(lines[first])
    view = run.view()
    assert view["embeddings"][0]["steps"] == [20]
    assert view["messages"] == ["encoder/validate: one snapshot only: nothing moves yet"]
    assert view["status"]["findings"] == "no findings yet"


def test_after_a_nan_run_the_view_says_nothing_false(tmp_path: Path) -> None:
    from lightning.pytorch.loggers import TensorBoardLogger

    from learnscope.lightning_glue import EmbeddingProjector, TrainingHelper

    tb = TensorBoardLogger(str(tmp_path), name="tb")
    callbacks = [EmbeddingProjector("probe"), TrainingHelper(check_every_n_steps=2)]
    trainer(tmp_path, tb, callbacks, max_epochs=1).fit(ZeroBranchWithProbe(), *loaders())
    view = run_view.read_view(tb.log_dir)
    codes = {(f["code"], f["subject"]) for f in view["findings"]}
    assert ("non-finite-output", "probe/validate") in codes  # the projector's
    assert ("zero-gradient", "branch") in codes  # TrainingHelper's
    assert view["messages"] == ["no autocorrelation (attach ModelAutocorrelation)"]
    assert view["status"]["embeddings"] == (
        "EmbeddingProjector wrote no snapshot in this run: it captures the stages ['validate'] "
        "every epoch (every_n_epochs=1), and leaves out rows with NaN or Inf"
    )
    assert view["status"]["findings"] is None


def _check_point_in_frame(browser: Any, view: dict) -> None:
    """A point is drawn where its coordinates, in spreads, fall in the record's frame."""
    embedding = view["embeddings"][0]
    point = browser.execute_script(_ISOLATED_POINT)
    assert point is not None
    x, y = _decode(embedding["xy"][-1])[point["k"]]
    x0, x1, y0, y1 = embedding["frame"]
    width, height = point["canvasWidth"], point["canvasHeight"]
    scale = min(width / (x1 - x0), height / (y1 - y0))  # one scale: the frame keeps its shape
    left, top = (width - (x1 - x0) * scale) / 2, (height - (y1 - y0) * scale) / 2
    x, y = min(x1, max(x0, x)), min(y1, max(y0, y))
    assert point["x"] == pytest.approx(left + (x - x0) * scale, abs=0.01)
    assert point["y"] == pytest.approx(top + (y1 - y) * scale, abs=0.01)


def _hover_and_pin(browser: Any, view: dict) -> None:
    """Move the mouse onto a point: the tooltip names its id and label; a click pins it."""
    from selenium.webdriver.common.action_chains import ActionChains

    embedding = view["embeddings"][0]
    point = browser.execute_script(_ISOLATED_POINT)
    assert point is not None
    assert point["pixel"][3] == 255  # the points' layer drew the point there
    assert point["renderer"] == "webgl"  # Chromium's software GL here
    canvas = browser.execute_script("return window.learnscopeView.canvas")
    ActionChains(browser).move_to_element_with_offset(
        canvas, round(point["x"] - point["width"] / 2), round(point["y"] - point["height"] / 2)
    ).perform()
    state = browser.execute_script("return JSON.parse(JSON.stringify(window.learnscopeView.state))")
    label = embedding["columns"][0]
    text = label["categories"][label["codes"][embedding["ids"].index(point["id"])]]
    assert state["hovered"] == point["k"]
    assert f"id {point['id']}" in state["tooltip"] and f"label: {text}" in state["tooltip"]
    ActionChains(browser).click().perform()
    assert browser.execute_script("return window.learnscopeView.state.pinned") == point["k"]
