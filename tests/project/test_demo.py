"""The main job: ``learnscope demo`` fills a log directory the Projector tab can show."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from readers import ProjectorReader, parse_metadata, png_size

pytestmark = pytest.mark.slow


def test_demo_fills_the_projector(tmp_path: Path) -> None:
    logdir = tmp_path / "runs"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "learnscope.lightning_glue.cli",
            "demo",
            "--logdir",
            str(logdir),
            "--epochs",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"tensorboard --logdir {logdir}" in result.stdout

    reader = ProjectorReader(logdir)
    (run,) = reader.runs()
    names = reader.names(run)
    assert len(names) == 2 and names == sorted(names)  # one per epoch, in training order
    assert all(re.fullmatch(r"encoder/validate/step_\d{9}", name) for name in names)
    for name in names:
        assert reader.tensor(run, name).shape == (540, 32)
        header, rows = parse_metadata(reader.metadata(run, name))
        assert header[:2] == ["label", "id"] and {r[0] for r in rows} == {str(d) for d in range(10)}
        assert png_size(reader.sprite(run, name)) == (24 * 8, 24 * 8)  # 540 digits, 8x8 each
