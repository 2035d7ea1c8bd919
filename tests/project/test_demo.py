"""The main job: ``learnscope demo`` fills a log directory the Projector tab can show, shows
learning, runs again the same for the same ``--seed`` and prints only what learnscope means to say.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learnscope.run_directory.file_names import RECORD_FILE
from learnscope.run_directory.record import RecordReader, decode_array
from tests.kit.demo_process import NOISE, run_demo
from tests.kit.readers import ProjectorReader, parse_metadata, png_size

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_epochs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """``learnscope demo --epochs 2 --wandb`` run once, in a process of its own: its logdir and
    result (with an offline W&B run, as the second run of the comparison in docs/demo.md)."""
    logdir = tmp_path_factory.mktemp("demo") / "runs"
    args = ["demo", "--logdir", str(logdir), "--epochs", "2", "--wandb"]
    return logdir, run_demo(args, timeout=300)


def snapshots(run_dir: Path) -> list[dict[str, Any]]:
    """The run record's snapshot entries, by step."""
    entries = RecordReader(run_dir / RECORD_FILE).read()
    return sorted((e for e in entries if e["kind"] == "snapshot"), key=lambda e: e["step"])


def numbers(run_dir: Path) -> list[dict[str, Any]]:
    """The run record's snapshot and autocorrelation entries: every number the views read."""
    entries = RecordReader(run_dir / RECORD_FILE).read()
    return [e for e in entries if e["kind"] in ("snapshot", "autocorrelation")]


def test_demo_fills_the_projector(two_epochs: tuple[Path, Any]) -> None:
    logdir, _ = two_epochs
    reader = ProjectorReader(logdir)
    (run,) = reader.runs()
    names = reader.names(run)
    assert len(names) == 2 and names == sorted(names)  # one per epoch, in training order
    assert all(re.fullmatch(r"encoder/validate/step_\d{9}", name) for name in names)
    for name in names:
        assert reader.tensor(run, name).shape == (540, 3)
        header, rows = parse_metadata(reader.metadata(run, name))
        assert header[:2] == ["label", "id"] and {r[0] for r in rows} == {str(d) for d in range(10)}
        assert png_size(reader.sprite(run, name)) == (24 * 8, 24 * 8)  # 540 digits, 8x8 each


def test_demo_says_what_it_wrote_once_and_nothing_else(two_epochs: tuple[Path, Any]) -> None:
    """learnscope's end-of-fit line once, the demo's time once; Lightning's lines hidden."""
    logdir, result = two_epochs
    said = result.stdout + result.stderr
    for noise in NOISE:
        assert noise not in said, said
    # standard error holds learnscope's lines only (no warning, no Lightning info line) ...
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert all(line.startswith("learnscope") for line in lines), result.stderr
    # a long wait at the end (umap-learn's first load takes seconds) says what runs, in words
    for unclear in ("being written", "record(s)", "run_end"):
        assert unclear not in said, result.stderr
    assert said.count("learnscope wrote") == 1 and said.count(f"tensorboard --logdir {logdir}") == 1
    # ... and standard output the progress bar and the demo's own line
    assert re.search(r"^learnscope demo: 2 epochs, seed 0, in \d+ s$", result.stdout, re.M)


def test_the_same_seed_gives_the_same_run_and_another_seed_another(
    two_epochs: tuple[Path, Any], tmp_path: Path
) -> None:
    from learnscope.lightning_glue.demo import run_demo

    logdir, _ = two_epochs
    (first,) = (logdir / "demo").glob("version_*")  # with --wandb, as docs/demo.md's second run
    again = run_demo(tmp_path / "again", epochs=2, seed=0).tensorboard
    other = run_demo(tmp_path / "other", epochs=2, seed=1).tensorboard
    assert numbers(again) == numbers(first)  # bit for bit: arrays travel as their bytes
    steps = [e["step"] for e in snapshots(other)]
    assert steps == [e["step"] for e in snapshots(first)] == [20, 40]
    for mine, theirs in zip(snapshots(first), snapshots(other), strict=True):
        assert mine["ids"] == theirs["ids"]  # the same validation digits ...
        assert not np.allclose(decode_array(mine["xy"]), decode_array(theirs["xy"]))  # ... moved


def label_silhouettes(run_dir: Path) -> list[float]:
    """Per snapshot, the labels' silhouette score of the aligned PCA view the record holds."""
    from sklearn.metrics import silhouette_score

    scores = []
    for entry in snapshots(run_dir):
        (label,) = [c for c in entry["columns"] if c["name"] == "label"]
        codes = decode_array(label["codes"])
        scores.append(float(silhouette_score(decode_array(entry["xy"]), codes)))
    return scores


def test_the_demo_embeddings_pull_apart_by_label(tmp_path: Path) -> None:
    """The default demo's aligned PCA view: the labels' silhouette rises by 0.1 or more.

    Measured: 0.12 at step 20 and 0.32 at step 160 (the 32-wide encoder before: 0.09 and 0.17).
    """
    from learnscope.lightning_glue.demo import run_demo

    scores = label_silhouettes(run_demo(tmp_path).tensorboard)
    assert len(scores) == 8
    assert scores[-1] - scores[0] >= 0.1, scores
