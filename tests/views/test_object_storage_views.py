"""The views read runs from object storage: the learnscope tab, ``learnscope export`` and
``read_view`` find and show runs under any fsspec URL, read each record segment once, read
nothing outside a run, and say plainly when a file-system package is missing.

``memory://`` (fsspec's in-process file system) for the fast checks, counting its calls; a
real local S3 server (moto behind a counting proxy, ``tests/kit/s3_server.py``) for the end to end
ones: the export command, and the tab served by a real TensorBoard on ``--logdir s3://...``.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from learnscope.plugins.views import run_search
from learnscope.plugins.views.compare_runs import RunSnapshots, compare_runs
from learnscope.plugins.views.run_view import RunModel, read_view
from learnscope.plugins.views.view_page import export_html
from learnscope.run_directory.file_names import RECORD_FILE, RECORD_SEGMENTS
from learnscope.run_directory.record import encode_entries
from learnscope.storage import RunFolder, open_run_folder
from tests.kit.record_entries import ALL_CALLBACKS, run_entry, snapshot_entry
from tests.kit.s3_server import LocalS3

pytest_plugins = ["tests.kit.s3_server"]  # its fixtures: s3_endpoint, s3_env

PNG = b"\x89PNG\r\n\x1a\n" + b"the thumbnails of twelve points"
SECRET = b"\x89PNG\r\n\x1a\n" + b"SECRET-OUTSIDE-THE-RUN"
IDS = [f"p{i}" for i in range(12)]  # more than k = 10 neighbours: a comparison has an overlap
XY = np.random.default_rng(0).normal(size=(12, 2))
EMBEDDING = np.random.default_rng(1).normal(size=(12, 5)).astype("<f4")
SPRITE = "projector/enc/sprite.png"
TENSOR = "projector/enc/tensor.bin"


def snapshot(step: int, sprite: str = SPRITE, tensor: str = TENSOR) -> dict[str, Any]:
    """A snapshot entry of key ``enc`` naming a sprite and a tensor file."""
    entry = snapshot_entry(
        "enc", step, XY * step, IDS, sprite={"path": sprite, "cell": [2, 2], "per_row": 4}
    )
    entry["tensor"] = {"path": tensor, "shape": list(EMBEDDING.shape), "dtype": "<f4"}
    return entry


def append(folder: RunFolder, *entries: dict[str, Any]) -> None:
    """One append of the record: one segment on an object store."""
    folder.append_record(encode_entries(entries))


def write_run(folder: RunFolder, steps: tuple[int, ...] = (1,)) -> None:
    """A run: its ``run`` entry, one segment per snapshot, its sprite and tensor files."""
    folder.write(SPRITE, PNG)
    folder.write(TENSOR, EMBEDDING.tobytes())
    append(folder, run_entry(*ALL_CALLBACKS, time=5_000.0))
    for step in steps:
        append(folder, snapshot(step))


def _clear_memory() -> None:
    fs = fsspec.filesystem("memory")
    fs.store.clear()
    fs.pseudo_dirs[:] = [""]


@pytest.fixture
def memory_url() -> Iterator[str]:
    """A log directory on fsspec's in-process file system, emptied before and after."""
    _clear_memory()
    yield f"memory://views-{uuid.uuid4().hex[:8]}/runs"
    _clear_memory()


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, int]]:
    """Every listing and read of the memory file system: ``(what, path, thread)``."""
    seen: list[tuple[str, str, int]] = []
    for name in ("ls", "cat_file", "info"):
        real = getattr(MemoryFileSystem, name)

        def counted(
            self: Any, path: str, *args: Any, _real: Any = real, _name: str = name, **kwargs: Any
        ) -> Any:
            seen.append((_name, str(path), threading.get_ident()))
            return _real(self, path, *args, **kwargs)

        monkeypatch.setattr(MemoryFileSystem, name, counted)
    return seen


def _segments(folder: RunFolder) -> list[str]:
    return sorted(folder.listing(RECORD_SEGMENTS)[1])


def test_runs_on_an_object_store_are_found_as_on_a_disk(
    memory_url: str, calls: list[tuple[str, str, int]]
) -> None:
    root = open_run_folder(memory_url)
    write_run(root.child("exp/version_0"))
    copied = root.child("exp/version_1")  # a record file copied up whole
    copied.write(RECORD_FILE, encode_entries([run_entry(*ALL_CALLBACKS, time=6_000.0)]))
    for skipped in ("exp/version_0/projector/inner", "wandb/run-1", ".projector-refresh-1/a"):
        append(root.child(skipped), run_entry(*ALL_CALLBACKS))
    root.child("checkpoints").write("last.ckpt", b"weights")
    record = encode_entries([run_entry(*ALL_CALLBACKS, time=9e9)])
    for key in ("..", "."):  # keys an object store holds as they are: no folder below
        fsspec.filesystem("memory").pipe_file(
            f"{root.root}/{key}/elsewhere/{RECORD_SEGMENTS}/000000000001-0.jsonl", record
        )
    calls.clear()

    assert run_search.find_runs(memory_url) == ["exp/version_0", "exp/version_1"]
    listed = [path.split("/runs", 1)[1] for what, path, _ in calls if what == "ls"]
    # one listing per folder searched; no record segments, Projector, wandb or marker folder
    assert sorted(listed) == ["", "/checkpoints", "/exp", "/exp/version_0", "/exp/version_1"]
    assert [what for what, _, _ in calls] == ["ls"] * 5  # nothing read

    run = root.child("exp/version_0")
    assert run_search.run_started(run) == 5_000.0
    assert run_search.run_started(copied) == 6_000.0
    assert run_search.run_outcome(run) == {"failed": None, "has_data": True, "ended": None}
    append(
        run,
        {
            "kind": "end",
            "step": 9,
            "status": "failed",
            "error": {"type": "RuntimeError", "message": "out of memory"},
        },
    )
    assert run_search.run_outcome(f"{memory_url}/exp/version_0") == {
        "failed": "RuntimeError: out of memory",
        "has_data": True,
        "ended": {"step": 9, "status": "failed"},
    }
    stamp = run_search.record_stamp(run)
    append(run, run_entry(*ALL_CALLBACKS))
    again = run_search.record_stamp(run)
    assert again is not None and stamp is not None
    assert again.identity == stamp.identity and again.written != stamp.written


def test_a_run_on_an_object_store_is_shown_with_its_files(memory_url: str, tmp_path: Path) -> None:
    root = open_run_folder(memory_url)
    write_run(root.child("exp/version_0"), steps=(1, 2))
    write_run(root.child("exp/version_2"), steps=(1,))

    view = read_view(f"{memory_url}/exp/version_0")
    assert view["run"] == "version_0" and view["time"] == 5_000.0
    (embedding,) = view["embeddings"]
    assert embedding["steps"] == [1, 2]
    assert embedding["sprite"]["png"] == "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert view["attached"] == sorted(ALL_CALLBACKS)

    page = tmp_path / "view.html"
    export = export_html(memory_url, page, compare=("exp/version_0", "exp/version_2"))
    assert export.runs == ["exp/version_0", "exp/version_2"] and export.failed == []
    html = page.read_text(encoding="utf-8")
    assert base64.b64encode(PNG).decode() in html
    data = json.loads(html.split('id="learnscope-data">', 1)[1].split("</script>", 1)[0])
    assert [run["name"] for run in data["runs"]] == export.runs
    compared = data["compare"]["keys"]["enc"]["held"][-1]
    assert compared["shared"] == 12 and compared["overlap"] == [10] * 12  # the tensors were read
    assert compared["messages"] == []


def test_new_segments_are_read_alone(memory_url: str, calls: list[tuple[str, str, int]]) -> None:
    run = open_run_folder(f"{memory_url}/exp/version_0")
    write_run(run)
    view = RunModel(run)
    assert view.view()["embeddings"][0]["steps"] == [1]
    calls.clear()
    assert view.view()["embeddings"][0]["steps"] == [1]  # nothing new: one listing, no read
    assert [what for what, _, _ in calls] == ["ls"]
    calls.clear()

    append(run, snapshot(2))
    new = _segments(run)[-1]
    calls.clear()
    assert view.view()["embeddings"][0]["steps"] == [1, 2]
    read = [path for what, path, _ in calls if what == "cat_file"]
    assert [path.rsplit("/", 1)[-1] for path in read] == [new]  # the sprite is unchanged
    assert view.entries_read == 3


def test_a_path_that_leaves_the_run_is_refused(memory_url: str) -> None:
    root = open_run_folder(memory_url)
    root.write("secret.png", SECRET)
    root.write("exp/secret.bin", EMBEDDING.tobytes())
    crafted = {
        "up": ("../secret.png", "../secret.bin"),
        "up_twice": ("../../secret.png", "../../exp/secret.bin"),
        "inside_then_up": ("projector/../../secret.png", "projector/../../secret.bin"),
        "absolute": ("/secret.png", f"/{memory_url.split('://')[1]}/exp/secret.bin"),
        "url": (f"{memory_url}/secret.png", f"{memory_url}/exp/secret.bin"),
    }
    for name, (sprite, tensor) in crafted.items():
        append(root.child(f"exp/{name}"), run_entry(*ALL_CALLBACKS), snapshot(1, sprite, tensor))
    write_run(root.child("exp/good"))

    for name in crafted:
        view = read_view(f"{memory_url}/exp/{name}")
        (embedding,) = view["embeddings"]
        assert embedding["sprite"] is None, name
        assert any("leaves the run directory" in note for note in embedding["notes"]), name
        assert "SECRET" not in json.dumps(view)
        assert base64.b64encode(SECRET).decode()[:20] not in json.dumps(view)
        crafted_run = RunSnapshots(root.child(f"exp/{name}"), name)
        result = compare_runs(crafted_run, RunSnapshots(root.child("exp/good"), "good"), "enc")
        assert result["overlap"] is None
        assert any("leaves the run directory" in m for m in result["messages"]), name


_PLUGINS: list[Any] = []  # made by this module's tests, their searches ended after each


@pytest.fixture(autouse=True)
def _end_searches() -> Iterator[None]:
    """No plugin's search outlives its test (it would keep asking the session's S3 server)."""
    yield
    while _PLUGINS:
        _PLUGINS.pop().close()


def _plugin(logdir: str, interval: float) -> Any:
    from tensorboard.plugins import base_plugin

    from learnscope.plugins.tab.plugin import LearnscopePlugin

    flags = argparse.Namespace(reload_interval=interval)
    plugin = LearnscopePlugin(base_plugin.TBContext(logdir=logdir, flags=flags))
    _PLUGINS.append(plugin)
    return plugin


def test_the_tab_reads_an_object_store_on_its_search_thread_only(
    memory_url: str, calls: list[tuple[str, str, int]]
) -> None:
    from werkzeug.test import Client

    run = open_run_folder(f"{memory_url}/exp/version_0")
    write_run(run)
    plugin = _plugin(memory_url, interval=0.1)
    assert plugin.wait_for_search(30.0) and plugin.is_active()
    apps = plugin.get_plugin_apps()
    runs = Client(apps["/runs"]).get("/runs").json
    assert runs == [
        {"name": "exp/version_0", "time": 5_000.0, "failed": None, "has_data": True, "ended": None}
    ]
    view = Client(apps["/view"]).get("/view?run=exp/version_0").json
    assert view["embeddings"][0]["steps"] == [1]

    here = threading.get_ident()  # werkzeug's test client answers on this thread
    calls.clear()
    for _ in range(10):
        assert Client(apps["/runs"]).get("/runs").json == runs
        assert Client(apps["/view"]).get("/view?run=exp/version_0").json == view
    assert [c for c in calls if c[2] == here] == []  # no listing or read on a request
    compared = plugin.compare("exp/version_0", "exp/version_0", "enc")
    assert compared["messages"][0].startswith("A and B are the same snapshot")
    calls.clear()
    plugin.compare("exp/version_0", "exp/version_0", "enc")
    assert [c for c in calls if c[2] == here] == []

    append(run, snapshot(2))
    new = _segments(run)[-1]
    deadline = time.monotonic() + 30
    calls.clear()
    while plugin.view("exp/version_0")["embeddings"][0]["steps"] != [1, 2]:
        assert time.monotonic() < deadline, "the new segment never appeared"
        time.sleep(0.05)
    read = [
        path.rsplit("/", 1)[-1]
        for what, path, thread in calls
        if thread == here and what == "cat_file"
    ]
    assert read == [new]  # the request read the new segment, once, and nothing else
    listed = [path for what, path, thread in calls if thread == here and what == "ls"]
    assert all(path.endswith(RECORD_SEGMENTS) for path in listed) and len(listed) <= 2


@pytest.mark.skipif(importlib.util.find_spec("gcsfs") is not None, reason="gcsfs is installed here")
def test_a_missing_file_system_package_is_said_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from werkzeug.test import Client

    from learnscope.lightning_glue.cli import main

    page = tmp_path / "view.html"
    assert main(["export", "gs://bucket/runs", "--html", str(page)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and not page.exists()
    assert err == (
        "learnscope export: learnscope cannot write to or read gs://bucket/runs: its file system "
        "needs the package 'gcsfs' (pip install gcsfs)\n"
    )

    plugin = _plugin("gs://bucket/runs", interval=0)
    assert plugin.wait_for_search(1.0) and plugin.is_active()
    apps = plugin.get_plugin_apps()
    (entry,) = Client(apps["/runs"]).get("/runs").json
    assert entry["name"] == "gs://bucket/runs" and "pip install gcsfs" in entry["failed"]
    response = Client(apps["/view"]).get("/view", query_string={"run": "gs://bucket/runs"})
    assert response.status_code == 200
    assert response.json["messages"] == [entry["failed"]]
    assert response.json["embeddings"] == []


def _s3_run(s3: LocalS3, steps: tuple[int, ...] = (1,)) -> tuple[str, RunFolder]:
    """A log directory ``s3://BUCKET/runs`` with one run, ``exp/version_0``."""
    url = f"s3://{s3.bucket()}/runs"
    run = open_run_folder(f"{url}/exp/version_0")
    write_run(run, steps)
    s3.requests.reset()
    return url, run


def _ours(s3: LocalS3) -> list[tuple[str, str]]:
    """The requests made through s3fs (``list-type=2`` listings, reads of the run's objects).

    TensorBoard's own loader lists with the first version of ``ListObjects`` and reads only
    event files.
    """
    return [
        (method, target)
        for method, target in s3.requests.seen
        if "list-type=2" in target or "/exp/version_0/" in target
    ]


def test_the_export_command_writes_the_runs_of_an_s3_log_directory(
    s3_env: LocalS3, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from learnscope.lightning_glue.cli import main

    url, run = _s3_run(s3_env, steps=(1, 2))
    page = tmp_path / "view.html"
    assert main(["export", url, "--html", str(page)]) == 0
    seen = s3_env.requests.seen
    assert capsys.readouterr().out == f"wrote {page}: 1 run(s): exp/version_0\n"
    html = page.read_text(encoding="utf-8")
    assert base64.b64encode(PNG).decode() in html and '"name":"exp/version_0"' in html
    # 3 listings to find the run (runs/, exp/, version_0/), 1 of its segments, 1 read of each
    # segment, the sprite stamped and read: nothing else
    assert sorted({m for m, _ in seen}) == ["GET", "HEAD"]
    reads = [t for m, t in seen if m == "GET" and "list-type=2" not in t]
    assert sorted(t.rsplit("/", 1)[-1] for t in reads) == sorted([*_segments(run), "sprite.png"])
    assert len([t for _, t in seen if "list-type=2" in t]) == 4
    assert [t for m, t in seen if m == "HEAD"] == [t for t in reads if t.endswith("sprite.png")]


def test_a_view_reads_only_the_new_segment_from_s3(s3_env: LocalS3) -> None:
    _, run = _s3_run(s3_env)
    view = RunModel(run)
    assert view.view()["embeddings"][0]["steps"] == [1]
    append(run, snapshot(2))
    new = _segments(run)[-1]
    s3_env.requests.reset()
    assert view.view()["embeddings"][0]["steps"] == [1, 2]
    seen = s3_env.requests.seen
    listings = [t for _, t in seen if "list-type=2" in t]
    assert len(listings) == 1 and RECORD_SEGMENTS in listings[0]
    reads = [t for m, t in seen if m == "GET" and "list-type=2" not in t]
    assert [t.rsplit("/", 1)[-1] for t in reads] == [new]
    assert [m for m, _ in seen if m != "GET"] == ["HEAD"]  # the sprite's stamp: unchanged


@pytest.mark.slow
def test_the_tab_of_a_real_tensorboard_on_s3_lists_and_shows_the_run(s3_env: LocalS3) -> None:
    from tests.kit.tb_server import tensorboard

    url, run = _s3_run(s3_env, steps=(1, 2))
    # 0: TensorBoard loads once and the tab searches once, so every request to the store
    # after that is one a request of the tab made
    with tensorboard(url, args=("--reload_interval", "0")) as server:
        runs = server.wait_for("/data/plugin/learnscope/runs", lambda r: len(r) == 1)
        assert runs[0]["name"] == "exp/version_0" and runs[0]["has_data"]
        assert server.json("/data/plugins_listing")["learnscope"]["enabled"]
        s3_env.requests.reset()
        view = server.json("/data/plugin/learnscope/view", run="exp/version_0")
        assert view["embeddings"][0]["steps"] == [1, 2]
        assert view["embeddings"][0]["sprite"]["png"].endswith(base64.b64encode(PNG).decode())
        opened = _ours(s3_env)
        segments = _segments(run)
        # opening the run: its segments listed (twice: until nothing more comes), each read
        # once, the sprite stamped and read
        reads = sorted(t.rsplit("/", 1)[-1] for m, t in opened if m == "GET" and "list" not in t)
        assert reads == sorted([*segments, "sprite.png"])
        assert len([t for _, t in opened if "list-type=2" in t]) <= 2
        s3_env.requests.reset()
        for _ in range(5):
            assert server.json("/data/plugin/learnscope/runs") == runs
            assert server.json("/data/plugin/learnscope/view", run="exp/version_0") == view
        assert _ours(s3_env) == []  # the search owns the listing: requests read its result


def test_a_log_directory_that_cannot_be_listed_is_said_not_hidden(
    s3_env: LocalS3, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from learnscope.lightning_glue.cli import main

    url, _ = _s3_run(s3_env)
    s3_env.faults.refuse(403, "AccessDenied", methods={"GET"}, match="list-type=2")
    page = tmp_path / "view.html"
    assert main(["export", url, "--html", str(page)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"learnscope export: cannot list {url}: ") and "Access Denied" in err
    assert err.count("\n") == 1 and not page.exists()

    plugin = _plugin(url, interval=0.1)
    assert plugin.wait_for_search(30.0) and plugin.is_active()
    (entry,) = plugin.runs()
    assert entry["name"] == url and entry["failed"].startswith(f"cannot list {url}: ")
    assert plugin.view(url)["messages"] == [entry["failed"]]
    s3_env.faults.clear()  # allowed again: the next search finds the run
    deadline = time.monotonic() + 30
    while [r["name"] for r in plugin.runs()] != ["exp/version_0"]:
        assert time.monotonic() < deadline, "the run never appeared"
        time.sleep(0.05)
    assert plugin.problem is None and plugin.view(url) is None


def test_a_bucket_that_does_not_exist_is_said_so_not_an_empty_log_directory(
    s3_env: LocalS3, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from learnscope.lightning_glue.cli import main

    url = "s3://no-such-bucket-here/runs"
    page = tmp_path / "view.html"
    assert main(["export", url, "--html", str(page)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"learnscope export: cannot list {url}: ")
    assert "there is no bucket 'no-such-bucket-here'" in err and not page.exists()

    empty = f"s3://{s3_env.bucket()}/runs"  # a bucket with nothing under the prefix yet
    assert main(["export", empty, "--html", str(page)]) == 1
    assert "no bucket" not in capsys.readouterr().err
