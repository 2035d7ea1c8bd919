"""What the views read: record files under the log directory and the sprites they name, inside
their run, nothing else; and the learnscope tab never searches the log directory on a request.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from learnscope.plugins.views import run_search, run_view, sprite_files, view_page
from learnscope.run_directory.file_names import RECORD_FILE
from tests.kit.record_entries import ALL_CALLBACKS, run_entry, snapshot_entry, write

SECRET = b"\x89PNG\r\n\x1a\n" + b"SECRET-OUTSIDE-THE-LOG-DIRECTORY" * 4
_XY = np.array([[1.0, 0.5], [-0.5, 1.0], [-1.0, -1.5], [0.5, -0.5]])


def _png() -> bytes:
    """A real 4 x 4 PNG (four 2 x 2 thumbnails)."""
    import struct
    import zlib

    rows = b"".join(b"\x00" + bytes([200, 30, 30] * 4) for _ in range(4))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def _run_with_sprite(run_dir: Path, path: str) -> None:
    sprite = {"path": path, "cell": [2, 2], "per_row": 2}
    ids = ["a", "b", "c", "d"]
    write(
        run_dir,
        run_entry(*ALL_CALLBACKS),
        snapshot_entry("enc", 1, _XY, ids, sprite=sprite),
        snapshot_entry("enc", 2, _XY * 2, ids, sprite=sprite),
    )


@pytest.fixture
def hostile_logdir(tmp_path: Path) -> Path:
    """A log directory whose records name files outside it, in every way a path can."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.png").write_bytes(SECRET)
    write(outside / "elsewhere", run_entry(*ALL_CALLBACKS, time=9e9))  # a run outside
    logdir = tmp_path / "logs"
    good = logdir / "good"
    good.mkdir(parents=True)
    (good / "sprite.png").write_bytes(_png())
    _run_with_sprite(good, "sprite.png")
    # TensorBoard's projector files are for the Projector tab; no view reads them, whatever
    # they name.
    (outside / "secret.tsv").write_text("pca_x\tpca_y\tid\tSECRET-OUTSIDE\n1\t2\ta\tx\n")
    (good / "projector_config.pbtxt").write_text(
        'embeddings {\n  tensor_name: "enc/step_000000003"\n'
        f'  metadata_path: "{outside / "secret.tsv"}"\n'
        '  sprite {\n    image_path: "../outside/secret.png"\n'
        "    single_image_dim: 2\n    single_image_dim: 2\n  }\n"
        "  tensor_shape: 1\n  tensor_shape: 2\n}\n"
    )
    _run_with_sprite(logdir / "absolute", str(outside / "secret.png"))
    _run_with_sprite(logdir / "up", "../../outside/secret.png")
    _run_with_sprite(logdir / "link", "sprite.png")
    (logdir / "link" / "sprite.png").symlink_to(outside / "secret.png")
    _run_with_sprite(logdir / "folder_link", "pictures/secret.png")
    (logdir / "folder_link" / "pictures").symlink_to(outside)
    _run_with_sprite(logdir / "fifo", "sprite.png")
    os.mkfifo(logdir / "fifo" / "sprite.png")
    _run_with_sprite(logdir / "not_png", "passwd.png")
    (logdir / "not_png" / "passwd.png").write_bytes(b"root:x:0:0:root:/root:/bin/bash\n")
    _run_with_sprite(logdir / "huge", "sprite.png")
    (logdir / "huge" / "sprite.png").write_bytes(
        _png() + b"\0" * (sprite_files.MAX_SPRITE_BYTES + 1)
    )
    (logdir / "linked_run").symlink_to(outside / "elsewhere")  # a folder link out of logdir
    (logdir / "record_link").mkdir()
    (logdir / "record_link" / RECORD_FILE).symlink_to(outside / "elsewhere" / RECORD_FILE)
    (logdir / "record_fifo").mkdir()
    os.mkfifo(logdir / "record_fifo" / RECORD_FILE)
    return logdir


def _leaks(text: str) -> list[str]:
    """The pieces of an outside file found in ``text``."""
    found = []
    for name, piece in (
        ("secret text", "SECRET-OUTSIDE"),
        ("secret as base64", base64.b64encode(SECRET).decode()),
        ("passwd text", "root:x:0:0"),
        ("passwd as base64", base64.b64encode(b"root:x:0:0:root").decode()[:16]),
        ("run outside", "9000000000"),
    ):
        if piece in text:
            found.append(name)
    return found


def test_runs_are_found_without_following_folder_links(hostile_logdir: Path) -> None:
    assert run_search.find_runs(hostile_logdir) == sorted(
        [
            "absolute",
            "fifo",
            "folder_link",
            "good",
            "huge",
            "link",
            "not_png",
            "record_fifo",
            "record_link",
            "up",
        ]
    )
    assert "linked_run" not in run_search.find_runs(hostile_logdir)


def test_the_export_reads_nothing_outside_and_never_blocks(hostile_logdir: Path) -> None:
    page = hostile_logdir.parent / "view.html"
    result = subprocess.run(
        [
            shutil.which("learnscope") or "learnscope",
            "export",
            str(hostile_logdir),
            "--html",
            str(page),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    html = page.read_text(encoding="utf-8")
    assert _leaks(html) == []
    assert "left out record_fifo: learnscope_record.jsonl is not a regular file" in result.stderr
    assert "left out record_link: learnscope_record.jsonl is a symbolic link" in result.stderr
    export = view_page.export_html(hostile_logdir, page)
    assert len(export.runs) == 8
    views = {name: run_view.read_view(hostile_logdir / name) for name in export.runs}
    assert views["good"]["embeddings"][0]["sprite"]["png"] == (
        "data:image/png;base64," + base64.b64encode(_png()).decode()
    )  # the one sprite inside its run is shown
    reasons = {
        "absolute": "leaves the run directory",
        "up": "leaves the run directory",
        "link": "goes through a symbolic link",
        "folder_link": "goes through a symbolic link",
        "fifo": "is not a regular file",
        "not_png": "is not a PNG file",
        "huge": f"(at most {sprite_files.MAX_SPRITE_BYTES:,})",
    }
    for name, reason in reasons.items():
        (embedding,) = views[name]["embeddings"]
        assert embedding["sprite"] is None
        assert any("thumbnails not shown" in n and reason in n for n in embedding["notes"]), name
        assert len(embedding["steps"]) == 2  # the rest of the run is shown


def test_the_tab_reads_nothing_outside_never_blocks_and_never_fails(hostile_logdir: Path) -> None:
    from tests.kit.tb_server import tensorboard

    with tensorboard(hostile_logdir) as server:
        runs = server.wait_for("/data/plugin/learnscope/runs", lambda r: len(r) == 10)
        for run in [r["name"] for r in runs] + ["linked_run", "../outside/elsewhere"]:
            try:
                body = server.get("/data/plugin/learnscope/view", run=run).decode("utf-8")
            except Exception as error:  # urllib raises on 4xx and 5xx
                code = getattr(error, "code", None)
                assert code == 404 and run in ("linked_run", "../outside/elsewhere"), (run, error)
                continue
            assert _leaks(body) == [], run
        fifo = server.json("/data/plugin/learnscope/view", run="record_fifo")
        assert fifo["messages"] == [
            "record_fifo cannot be read: learnscope_record.jsonl is not a regular file"
        ]


def test_the_wandb_page_reads_nothing_outside(hostile_logdir: Path) -> None:
    from learnscope.plugins.wandb.page_writer import wandb_view_html

    for name in ("absolute", "up", "link", "folder_link", "fifo", "not_png", "good"):
        assert _leaks(wandb_view_html(hostile_logdir / name)) == [], name
    for name in ("record_fifo", "record_link"):
        with pytest.raises(OSError, match="not a regular file|symbolic link"):
            wandb_view_html(hostile_logdir / name)


def _plugin(logdir: Path, interval: float):
    from tensorboard.plugins import base_plugin

    from learnscope.plugins.tab.plugin import LearnscopePlugin

    flags = argparse.Namespace(reload_interval=interval)
    return LearnscopePlugin(base_plugin.TBContext(logdir=str(logdir), flags=flags))


def test_is_active_and_runs_answer_from_the_background_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request thread never searches the log directory; new runs appear after a search."""
    searched_on: list[int] = []
    real = run_search.find_runs

    def find_runs(logdir: str | Path) -> list[str]:
        searched_on.append(threading.get_ident())
        return real(logdir)

    monkeypatch.setattr(run_search, "find_runs", find_runs)
    for i in range(30):
        for folder in ("checkpoints", "hparams"):
            (tmp_path / f"exp_{i}" / "version_0" / folder).mkdir(parents=True)
        write(tmp_path / f"exp_{i}" / "version_0", run_entry(*ALL_CALLBACKS, time=float(i)))
    plugin = _plugin(tmp_path, interval=0.2)
    assert plugin.wait_for_search(30.0)
    assert plugin.is_active()
    runs = plugin.runs()
    assert [r["name"] for r in runs] == sorted(f"exp_{i}/version_0" for i in range(30))
    assert max(runs, key=lambda r: r["time"])["name"] == "exp_29/version_0"
    assert searched_on  # the search ran, on its own thread
    assert threading.get_ident() not in searched_on  # no search on this (a request's) thread
    write(tmp_path / "exp_new" / "version_0", run_entry(*ALL_CALLBACKS, time=1e6))
    deadline = time.monotonic() + 30
    while "exp_new/version_0" not in [r["name"] for r in plugin.runs()]:
        assert time.monotonic() < deadline, "the new run never appeared"
        time.sleep(0.05)
    assert threading.get_ident() not in searched_on


def test_a_view_that_fails_answers_with_what_went_wrong(tmp_path: Path) -> None:
    from werkzeug.test import Client

    write(tmp_path / "run", run_entry(*ALL_CALLBACKS), snapshot_entry("enc", 1, _XY, list("abcd")))
    plugin = _plugin(tmp_path, interval=0)
    assert plugin.wait_for_search(30.0)
    client = Client(plugin.get_plugin_apps()["/view"])
    assert client.get("/view?run=run").status_code == 200
    (tmp_path / "run" / RECORD_FILE).unlink()
    os.mkfifo(tmp_path / "run" / RECORD_FILE)  # replaced by a FIFO after the search
    response = client.get("/view?run=run")
    assert response.status_code == 200
    assert response.json["messages"] == [
        "run cannot be read: learnscope_record.jsonl is not a regular file"
    ]
    assert client.get("/view?run=../run").status_code == 404


def test_the_wandb_page_stops_growing_after_a_hundred_snapshots(tmp_path: Path) -> None:
    import json
    import re

    from learnscope.plugins.wandb.page_writer import MAX_SNAPSHOTS, wandb_view_html

    ids = [str(i) for i in range(20)]
    points = np.random.default_rng(0).normal(size=(20, 2))
    sizes = {}
    for count in (MAX_SNAPSHOTS, 3 * MAX_SNAPSHOTS // 2, 3 * MAX_SNAPSHOTS):
        folder = tmp_path / str(count)
        entries = [snapshot_entry("enc", step, points * (1 + step), ids) for step in range(count)]
        write(folder, run_entry(*ALL_CALLBACKS), *entries)
        page = wandb_view_html(folder)
        data = re.search(r'id="learnscope-data">(.*?)</script>', page, re.S)[1]
        (run,) = json.loads(data)["runs"]
        (embedding,) = run["view"]["embeddings"]
        steps = embedding["steps"]
        assert len(steps) == MAX_SNAPSHOTS and steps[0] == 0 and steps[-1] == count - 1
        said = [m for m in run["view"]["messages"] if "snapshots shown" in m]
        assert said == (
            []
            if count == MAX_SNAPSHOTS
            else [f"enc: 100 of {count} snapshots shown (evenly spaced)"]
        )
        sizes[count] = len(page)
    assert sizes[3 * MAX_SNAPSHOTS] <= sizes[MAX_SNAPSHOTS] * 1.01  # no larger with more
