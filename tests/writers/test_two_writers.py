"""Two processes write projector snapshots into one run directory at the same steps.

A real ``tensorboard`` server is started first and has already listed the run (as it would a
run whose Lightning logger started before the first snapshot), so it shows a snapshot only if
learnscope's refresh markers make it read the run's projector config again. Two writer
processes then start writing together, five times over, each into a fresh run directory. Each
round: no process crashes; neither removes the other's refresh marker (each checks for its own
after every snapshot, and both markers are there once both are done); every snapshot of both is
listed by the server while the writers are still running, and by the projector plugin's reader
(``tests/kit/readers.py``) once they have closed, which leaves no marker, lock or temporary behind.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from learnscope.plugins.tensorboard import projector_files
from learnscope.plugins.tensorboard.projector_refresh import MARKER_PREFIX
from tests.kit.readers import ProjectorReader, debris
from tests.kit.tb_server import tensorboard

pytestmark = pytest.mark.slow

ROUNDS, STEPS, TAGS = 5, 8, ("a", "b")

# One writer process: for each run directory read from stdin, a TensorBoardWriter writes one
# snapshot per step, checking after each that its own refresh marker is there; it reports,
# waits for "close", closes the writer and says so. It says "ready" once its imports are done.
WRITER = """
import json, os, sys, torch
from pathlib import Path
from learnscope import EmbeddingSnapshot
from learnscope.plugins.tensorboard.projector_refresh import MARKER_PREFIX
from learnscope.plugins.tensorboard.writer import TensorBoardWriter

tag, steps = sys.argv[1], int(sys.argv[2])
own = f"{MARKER_PREFIX}{os.getpid()}-"
print(json.dumps({"ready": tag}), flush=True)
while run := sys.stdin.readline().strip():
    writer = TensorBoardWriter(run)
    missing = []
    for step in range(steps):
        writer.write_embedding(EmbeddingSnapshot(tag, step, torch.randn(50, 8) + 1.0))
        if not any(p.name.startswith(own) for p in Path(run).iterdir()):
            missing.append(step)
    print(json.dumps({"own_marker_missing_after": missing}), flush=True)
    sys.stdin.readline()
    writer.close()
    print(json.dumps({"closed": run}), flush=True)
"""


def expected_names() -> list[str]:
    return sorted(f"{tag}/{projector_files.step_name(s)}" for tag in TAGS for s in range(STEPS))


def listed(server: Any, run: str) -> list[str]:
    if run not in server.json("/data/plugin/projector/runs"):
        return []
    return sorted(
        e["tensorName"] for e in server.json("/data/plugin/projector/info", run=run)["embeddings"]
    )


def say(procs: list[subprocess.Popen[str]], line: str) -> list[dict[str, Any]]:
    """Send ``line`` to every process (back to back), then read one JSON answer from each."""
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(f"{line}\n")
        proc.stdin.flush()
    return [answer(proc) for proc in procs]


def answer(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The next JSON line the writer process prints."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"writer {proc.pid} ended: {proc.communicate(timeout=30)[1][-3000:]}"
    return json.loads(line)


def markers(run: Path) -> list[str]:
    return sorted(p.name for p in run.iterdir() if p.name.startswith(MARKER_PREFIX))


def started_run(server: Any, run: Path) -> None:
    """Make ``run`` a run the server lists (an event file, as a logger's), before any snapshot."""
    from torch.utils.tensorboard import SummaryWriter

    SummaryWriter(str(run)).close()
    server.wait_for("/data/runs", lambda runs: run.name in runs, timeout=30)


def test_two_processes_writing_together_lose_no_snapshot_and_no_marker(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, tag, str(STEPS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in TAGS
    ]  # they import while the server starts, and write nothing before told to
    try:
        with tensorboard(tmp_path) as server:
            assert [answer(proc) for proc in procs] == [{"ready": tag} for tag in TAGS]
            for attempt in range(ROUNDS):
                race(server, procs, tmp_path / f"run{attempt}")
    finally:
        outputs = [proc.communicate(input="\n", timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], [err[-3000:] for _, err in outputs]
    assert [err for _, err in outputs] == ["", ""]


def race(server: Any, procs: list[subprocess.Popen[str]], run: Path) -> None:
    """One round: both processes write into ``run``, which the server already lists."""
    started_run(server, run)
    assert listed(server, run.name) == []
    done = say(procs, str(run))  # both start writing now

    assert [d["own_marker_missing_after"] for d in done] == [[], []]
    assert [m.split("-")[2] for m in markers(run)] == sorted(str(p.pid) for p in procs)
    deadline = time.monotonic() + 20  # the server re-reads while both writers still run
    while listed(server, run.name) != expected_names() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert listed(server, run.name) == expected_names()

    assert say(procs, "close") == [{"closed": str(run)}] * 2
    assert sorted(ProjectorReader(run.parent).names(run.name)) == expected_names()
    assert debris(run) == []
