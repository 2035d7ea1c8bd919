"""A real ``tensorboard`` server on 127.0.0.1 for tests, always stopped afterwards."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class TensorBoardServer:
    """HTTP access to a running TensorBoard, and what it logged (``log_file``, when known)."""

    def __init__(self, base: str, log_file: Path | None = None) -> None:
        self.base = base
        self.log_file = log_file

    def log(self) -> str:
        """What the server wrote to standard error so far (its log: warnings, errors)."""
        if self.log_file is None:
            return ""
        return self.log_file.read_text(encoding="utf-8", errors="replace")

    def get(self, path: str, **params: Any) -> bytes:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.base}{path}{query}", timeout=30) as response:
            return response.read()

    def json(self, path: str, **params: Any) -> Any:
        return json.loads(self.get(path, **params))

    def wait_for(self, path: str, ok: Any, timeout: float = 60.0, **params: Any) -> Any:
        """Poll ``path`` until ``ok(json)`` is true; return that JSON."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            with contextlib.suppress(urllib.error.URLError, ConnectionError, ValueError):
                last = self.json(path, **params)
                if ok(last):
                    return last
            time.sleep(0.5)
        raise TimeoutError(f"{path} never satisfied the condition; last answer: {last!r}")


# TensorBoard with every plugin but learnscope's tab, for comparisons.
_WITHOUT_LEARNSCOPE = (
    "import sys; from tensorboard import default, main; "
    "found = default.get_dynamic_plugins; "
    "default.get_dynamic_plugins = lambda: [p for p in found() "
    "if not p.__module__.startswith('learnscope.')]; "
    "sys.argv[0] = 'tensorboard'; main.run_main()"
)


@contextlib.contextmanager
def tensorboard(
    logdir: str | Path,
    timeout: float = 90.0,
    cwd: str | Path | None = None,
    learnscope: bool = True,
    args: tuple[str, ...] = (),
) -> Iterator[TensorBoardServer]:
    """Start ``tensorboard --logdir logdir`` on a free port of 127.0.0.1; stop it afterwards.

    ``logdir`` is read from ``cwd`` when given (``logdir="."`` then shows no path in the page).
    ``learnscope=False`` starts TensorBoard without the learnscope tab (all its other plugins);
    ``args`` are more command-line flags. What the server logs (standard error) is
    :meth:`TensorBoardServer.log`.
    """
    port = free_port()
    start = ["-m", "tensorboard.main"] if learnscope else ["-c", _WITHOUT_LEARNSCOPE]
    logs = tempfile.TemporaryDirectory(prefix="tensorboard-log-")
    log_file = Path(logs.name) / "stderr.txt"
    stderr = log_file.open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            *start,
            "--logdir",
            str(logdir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--reload_interval",
            "1",
            *args,
        ],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
    try:
        server = TensorBoardServer(f"http://127.0.0.1:{port}", log_file)
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"tensorboard exited: {server.log()[-2000:]}")
            try:
                server.get("/data/plugins_listing")
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    raise TimeoutError("tensorboard did not start") from None
                time.sleep(0.3)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        stderr.close()
        logs.cleanup()


# The HParams plugin's routes, as its dashboard asks them

STATUSES = [
    "STATUS_UNKNOWN",
    "STATUS_SUCCESS",
    "STATUS_FAILURE",
    "STATUS_RUNNING",
]


def post(server: TensorBoardServer, route: str, body: dict[str, Any]) -> Any:
    """POST ``body`` as JSON to the HParams plugin's ``route``; the answer as JSON."""
    request = urllib.request.Request(
        f"{server.base}/data/plugin/hparams/{route}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def hparams_routes(server: TensorBoardServer, sessions: int) -> tuple[Any, dict[str, Any]]:
    """The experiment and the session groups by name, once ``sessions`` groups are there."""
    query = {"experimentName": "", "allowedStatuses": STATUSES, "startIndex": 0, "sliceSize": 100}
    groups: list[Any] = []
    for _ in range(60):
        groups = post(server, "session_groups", query).get("sessionGroups", [])
        if len(groups) >= sessions:
            break
        time.sleep(0.5)  # the server reads the log directory every second
    experiment = post(server, "experiment", {"experimentName": ""})
    return experiment, {group["name"]: group for group in groups}


def learnscope_metrics(session: dict[str, Any]) -> dict[str, float]:
    """The summary's metric values of one session (not the autocorrelation's time series)."""
    found = {value["name"]["tag"]: value["value"] for value in session["metricValues"]}
    ours = {tag: value for tag, value in found.items() if tag.startswith("~learnscope/")}
    return {
        tag: value
        for tag, value in ours.items()
        if not tag.startswith(("~learnscope/autocorrelation/", "~learnscope/health/"))
    }
