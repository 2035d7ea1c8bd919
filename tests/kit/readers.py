"""Read back what learnscope wrote, the way the dashboards read it (no mocks).

* TensorBoard projector: the real ``ProjectorPlugin`` over a real event multiplexer, queried
  through its own HTTP routes with werkzeug's test client.
* wandb offline runs: the run's ``.wandb`` record log (LevelDB-style blocks of
  ``wandb_internal_pb2.Record``) and the table JSON files under ``files/media/table``.
"""

from __future__ import annotations

import csv
import json
import re
import struct
import time
from pathlib import Path
from typing import Any

import numpy as np

from learnscope.plugins.tensorboard.projector_refresh import MARKER_PREFIX

VIEW = "~learnscope/view"  # the W&B view page's key


class ProjectorReader:
    """The TensorBoard projector plugin, serving one log directory."""

    def __init__(self, logdir: str | Path) -> None:
        from tensorboard.backend.event_processing import data_provider
        from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
        from tensorboard.plugins import base_plugin
        from tensorboard.plugins.projector.projector_plugin import ProjectorPlugin
        from werkzeug.test import Client

        logdir = str(logdir)
        mux = pem.EventMultiplexer()
        mux.AddRunsFromDirectory(logdir)
        mux.Reload()
        provider = data_provider.MultiplexerDataProvider(mux, logdir)
        context = base_plugin.TBContext(logdir=logdir, data_provider=provider, multiplexer=mux)
        self._apps = ProjectorPlugin(context).get_plugin_apps()
        self._client = Client

    def get(self, route: str, **params: Any) -> bytes:
        response = self._client(self._apps[f"/{route}"]).get(f"/{route}", query_string=params)
        assert response.status_code == 200, response.get_data(as_text=True)
        return response.get_data()

    def runs(self) -> list[str]:
        return json.loads(self.get("runs"))

    def info(self, run: str) -> dict[str, Any]:
        return json.loads(self.get("info", run=run))

    def names(self, run: str) -> list[str]:
        return [e["tensorName"] for e in self.info(run)["embeddings"]]

    def tensor(self, run: str, name: str) -> np.ndarray:
        entry = next(e for e in self.info(run)["embeddings"] if e["tensorName"] == name)
        return np.frombuffer(self.get("tensor", run=run, name=name), np.float32).reshape(
            [int(x) for x in entry["tensorShape"]]
        )

    def metadata(self, run: str, name: str) -> str:
        return self.get("metadata", run=run, name=name).decode("utf-8")

    def sprite(self, run: str, name: str) -> bytes:
        return self.get("sprite_image", run=run, name=name)


def parse_metadata(text: str) -> tuple[list[str] | None, list[list[str]]]:
    """Split metadata the way the projector front end does: header when the first line has a tab."""
    lines = [line for line in text.split("\n") if line.strip()]
    if "\t" in lines[0]:
        return lines[0].split("\t"), [line.split("\t") for line in lines[1:]]
    return None, [[line] for line in lines]


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) of PNG bytes."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def wandb_run_dir(root: str | Path) -> Path:
    """The single offline run directory under ``root``."""
    (run_dir,) = Path(root).rglob("offline-run-*")
    return run_dir


def wandb_records(run_dir: Path, timeout: float = 30.0, finished: bool = True) -> list[Any]:
    """Every record in the run's ``.wandb`` file, in order, once the run's exit record is there.

    ``run.finish()`` can return before wandb's service has written the file out, so this waits
    (up to ``timeout`` seconds) for the exit record; a run that never finished (its process was
    killed: ``finished=False``) is read as it is.
    """
    deadline = time.monotonic() + timeout
    while True:
        records = _read_records(run_dir)
        if not finished or any(r.WhichOneof("record_type") == "exit" for r in records):
            return records
        if time.monotonic() > deadline:
            raise AssertionError(f"wandb never finished writing {run_dir}")
        time.sleep(0.2)


def _read_records(run_dir: Path) -> list[Any]:
    from wandb.proto import wandb_internal_pb2

    (path,) = run_dir.glob("run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a wandb record log"
    block, pos, payloads, pending = 32768, 7, [], b""
    while pos + 7 <= len(data):
        left_in_block = block - (pos % block)
        if left_in_block < 7:  # trailer padding
            pos += left_in_block
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        pending += chunk
        if kind in (1, 4):  # FULL or LAST
            payloads.append(pending)
            pending = b""
    records = []
    for payload in payloads:
        record = wandb_internal_pb2.Record()
        try:
            record.ParseFromString(payload)
        except Exception:  # a record still being written
            break
        records.append(record)
    return records


def wandb_history(run_dir: Path) -> list[dict[str, Any]]:
    """Each ``run.log`` call as a dict of key to decoded JSON value."""
    rows = []
    for record in wandb_records(run_dir):
        if record.WhichOneof("record_type") != "history":
            continue
        row: dict[str, Any] = {}
        for item in record.history.item:
            *parents, last = list(item.nested_key) or [item.key]
            target = row
            for key in parents:
                target = target.setdefault(key, {})
            target[last] = json.loads(item.value_json)
        rows.append(row)
    return rows


def wandb_summary(run_dir: Path, finished: bool = True) -> dict[str, Any]:
    """The run's summary as its ``summary`` records leave it: every update, in order."""
    summary: dict[str, Any] = {}
    for record in wandb_records(run_dir, finished=finished):
        if record.WhichOneof("record_type") != "summary":
            continue
        for item in record.summary.update:
            summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        for item in record.summary.remove:
            summary.pop(item.key or "/".join(item.nested_key), None)
    return summary


def wandb_tags(run_dir: Path, finished: bool = True) -> set[str]:
    """The run's tags, as its newest ``run`` record holds them."""
    records = wandb_records(run_dir, finished=finished)
    runs = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    return set(runs[-1].tags)


def wandb_config(run_dir: Path) -> dict[str, Any]:
    """The W&B run's config, as its ``config`` records set it."""
    config: dict[str, Any] = {}
    for record in wandb_records(run_dir):
        if record.WhichOneof("record_type") == "config":
            for item in record.config.update:
                config[item.key] = json.loads(item.value_json)
    return config


def wandb_view_pages(run_dir: Path) -> list[tuple[int, str]]:
    """Each ``~learnscope/view`` page the run logged, in order: its trainer step and its HTML."""
    return [
        (row["trainer/global_step"], (run_dir / "files" / row[VIEW]["path"]).read_text("utf-8"))
        for row in wandb_history(run_dir)
        if VIEW in row
    ]


def page_data(page: Path) -> dict[str, Any]:
    """The data inline in a learnscope page file (export or W&B): runs, views, the table."""
    data = re.search(r'id="learnscope-data">(.*?)</script>', page.read_text("utf-8"), re.S)
    assert data is not None, "not a learnscope page"
    return json.loads(data[1])


def page_views(html: str) -> dict[str, dict[str, Any]]:
    """The views inline in a learnscope page (export or W&B), by run name."""
    data = re.search(r'id="learnscope-data">(.*?)</script>', html, re.S)
    assert data is not None, "not a learnscope page"
    return {r["name"]: r["view"] for r in json.loads(data[1])["runs"]}


def wandb_table(run_dir: Path, value: dict[str, Any]) -> dict[str, Any]:
    """The JSON of a table logged in history (``value`` is the history entry)."""
    return json.loads((run_dir / "files" / value["path"]).read_text())


def wandb_artifact_tables(run_dir: Path, key: str) -> list[dict[str, Any]]:
    """Every full table logged under ``key``, in order, from the run's ``run_table`` artifacts.

    Since wandb 0.19 a table logged in a run is stored as an artifact; the JSON under
    ``files/media/table`` is only a preview (media cells read ``"Image"``). Each returned dict is
    the table JSON with an added ``"_files"`` mapping from artifact path to the staged file.
    """
    tables = []
    for record in wandb_records(run_dir):
        if record.WhichOneof("record_type") != "artifact" or record.artifact.type != "run_table":
            continue
        files = {c.path: c.local_path for c in record.artifact.manifest.contents}
        table_path = files.get(f"{key}.table.json")
        if table_path is not None:
            table = json.loads(Path(table_path).read_text())
            table["_files"] = files
            tables.append(table)
    return tables


def csv_metrics(path: Path, prefixes: tuple[str, ...]) -> dict[tuple[int, str], float]:
    """``(step, key) -> value`` of a CSVLogger file's columns whose name starts with a prefix."""
    with path.open() as stream:
        rows = list(csv.DictReader(stream))
    return {
        (int(row["step"]), key): float(value)
        for row in rows
        for key, value in row.items()
        if value and key.startswith(prefixes)
    }


class CustomScalarsReader:
    """The real ``custom_scalars`` plugin over a multiplexer-backed data provider."""

    def __init__(self, logdir: Path) -> None:
        from tensorboard.backend.event_processing import data_provider
        from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
        from tensorboard.plugins import base_plugin
        from tensorboard.plugins.custom_scalar.custom_scalars_plugin import CustomScalarsPlugin
        from werkzeug.test import Client

        mux = pem.EventMultiplexer()
        mux.AddRunsFromDirectory(str(logdir))
        mux.Reload()
        provider = data_provider.MultiplexerDataProvider(mux, str(logdir))
        context = base_plugin.TBContext(logdir=str(logdir), data_provider=provider, multiplexer=mux)
        self._app = CustomScalarsPlugin(context).get_plugin_apps()["/layout"]
        self._client = Client

    def layout(self) -> dict[str, Any]:
        response = self._client(self._app).get("/layout")
        assert response.status_code == 200, response.get_data(as_text=True)
        return json.loads(response.get_data())


def chart_tag_patterns(layout: dict[str, Any]) -> dict[str, list[str]]:
    """``category: title`` to the chart's tag patterns (multiline regexes or margin tags)."""
    charts = {}
    for category in layout["category"]:
        for chart in category["chart"]:
            if "multiline" in chart:
                charts[f"{category['title']}: {chart['title']}"] = list(chart["multiline"]["tag"])
            else:
                series = chart["margin"]["series"]
                charts[f"{category['title']}: {chart['title']}"] = [
                    re.escape(s[part]) + "$" for s in series for part in ("value", "lower", "upper")
                ]
    return charts


def read_events(run_dir: Path) -> Any:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    return events


def debris(run_dir: Path) -> list[str]:
    """Lock files, temporaries and marker runs left anywhere in ``run_dir``."""
    return sorted(
        p.relative_to(run_dir).as_posix()
        for p in run_dir.rglob("*")
        if p.name.endswith((".lock", ".tmp")) or p.name.startswith(MARKER_PREFIX)
    )


def projector_snapshot(
    logdir: Path, name: str
) -> tuple[np.ndarray, list[str] | None, list[list[str]]]:
    """The tensor, metadata header and rows of snapshot ``name`` of ``logdir``'s one run."""
    reader = ProjectorReader(logdir)
    (run,) = reader.runs()
    assert name in reader.names(run), reader.names(run)
    header, rows = parse_metadata(reader.metadata(run, name))
    return reader.tensor(run, name), header, rows
