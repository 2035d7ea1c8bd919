"""Two-process CPU DDP fits (gloo), run as a script: Lightning's ``ddp`` re-runs it per rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.kit.readers import ProjectorReader, parse_metadata, wandb_history, wandb_run_dir

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parents[1] / "ddp_scripts" / "fit_ddp.py"
STEPS = (4, 8)  # 64 training samples, 2 ranks, batches of 8: 4 steps per epoch


def run_ddp(mode: str, out: Path) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Run the script; the JSON state of rank 0 and rank 1, and the lines rank 0 logged."""
    out.mkdir()
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(out),
        "WANDB_SILENT": "true",
        "WANDB_DISABLE_CODE": "true",
        "PYTHONWARNINGS": "ignore",
        "LEARNSCOPE_STRICT": "0",  # rank 1's metadata_fn fails on purpose
    }
    env.pop("MASTER_PORT", None)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), mode, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert (out / "rank0.json").exists() and (out / "rank1.json").exists(), done.stderr[-4000:]
    rank0, rank1 = (json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1))
    logged = [(out / f"log_rank{r}.txt").read_text().splitlines() for r in (0, 1)]
    return rank0, rank1, logged


def column(header: list[str], rows: list[list[str]], name: str) -> list[int]:
    return [int(row[header.index(name)]) for row in rows]


def test_two_process_fit_writes_one_set_of_outputs_and_gathers_every_rank(tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    rank0, rank1, (logged, logged_1) = run_ddp("all", out)
    assert rank0["error"] is None and rank1["error"] is None
    assert rank0["global_step"] == rank1["global_step"] == STEPS[-1]
    assert rank0["switched_off"] == [] and rank1["switched_off"] == ["embedding projector"]
    # rank 1's failing metadata_fn: logged there, once; it sends nothing, and nothing hangs
    assert [line for line in logged_1 if line.startswith("learnscope")] == [
        "learnscope: embedding projector of EmbeddingProjector failed on rank0/validate step 4 "
        "(RuntimeError: "
        "metadata_fn failed on rank 1) and is switched off; training goes on"
    ]
    assert logged_1[1] == "Traceback (most recent call last):"
    assert logged_1[-2:] == [  # the error, and the note naming the function
        "RuntimeError: metadata_fn failed on rank 1",
        "EmbeddingProjector: raised inside metadata_fn, called with a batch of type list",
    ]
    # health findings: found and warned once, on rank zero only
    assert rank0["findings"] == [["zero-gradient", "branch"]] and rank1["findings"] == []
    assert len([line for line in logged if "zero-gradient branch" in line]) == 1

    reader = ProjectorReader(out / "tb")
    (run,) = reader.runs()
    names = reader.names(run)
    assert sorted(names) == sorted(
        [f"{t}/validate/step_{s:09d}" for t in ("encoder", "rows", "local", "rank0") for s in STEPS]
        + [f"predicted/predict/step_{STEPS[-1]:09d}"]
    )  # one entry each: no rank wrote a second one
    final = f"/validate/step_{STEPS[-1]:09d}"

    # gathered with ids: every sample of the odd-sized set once (rank 1's padding repeat merged)
    header, rows = parse_metadata(reader.metadata(run, "encoder" + final))
    assert sorted(column(header, rows, "id")) == list(range(45))
    assert set(column(header, rows, "rank")) == {0, 1}
    assert reader.tensor(run, "encoder" + final).shape == (45, 8)

    # gathered without ids, max_points=30 of 46 rows (23 per rank): both ranks' rows, numbered
    header, rows = parse_metadata(reader.metadata(run, "rows" + final))
    assert len(rows) == 30 and header == ["label", "rank", "row"]
    numbers = column(header, rows, "row")
    assert numbers == sorted(numbers) and len(set(numbers)) == 30
    assert all(n % 2 == r for n, r in zip(numbers, column(header, rows, "rank"), strict=True))
    assert set(column(header, rows, "rank")) == {0, 1}

    # not gathered: rank zero's own share (23 rows, DistributedSampler's even indices)
    header, rows = parse_metadata(reader.metadata(run, "local" + final))
    assert len(rows) == 23 and set(column(header, rows, "rank")) == {0}

    # gathered, rank 1 switched off: rank zero's rows only
    header, rows = parse_metadata(reader.metadata(run, "rank0" + final))
    assert len(rows) == 23 and set(column(header, rows, "rank")) == {0}

    # predict does not pad: 23 rows on rank 0, 22 on rank 1, every sample once
    header, rows = parse_metadata(reader.metadata(run, f"predicted/predict/step_{STEPS[-1]:09d}"))
    assert sorted(column(header, rows, "id")) == list(range(45))
    ranks = column(header, rows, "rank")
    assert (ranks.count(0), ranks.count(1)) == (23, 22)

    history = wandb_history(wandb_run_dir(out))
    tables = [
        h["trainer/global_step"] for h in history if "~learnscope/embeddings/encoder/validate" in h
    ]
    assert tables == list(STEPS)  # one table per snapshot: only rank zero logs

    # autocorrelation: analysed once per due step, on rank zero; its event files only, one layout
    event_files = list((out / "tb" / "version_0").glob("events.out.tfevents.*"))
    assert event_files and all(  # tfevents.<time>.<host>.<pid>.<n>[.learnscope]: rank 0's only
        f.name.removesuffix(".learnscope").rsplit(".", 2)[1] == str(rank0["pid"])
        for f in event_files
    )
    events = EventAccumulator(
        str(out / "tb" / "version_0"), size_guidance={"scalars": 0, "tensors": 0}
    )
    events.Reload()
    assert [s.step for s in events.Scalars("~learnscope/autocorrelation/params/encoder/lag_1")] == [
        4,
        8,
    ]
    assert len(events.Tensors("custom_scalars__config__")) == 1
    lag_1 = [
        h["trainer/global_step"]
        for h in history
        if "~learnscope/autocorrelation/params/encoder/lag_1" in h
    ]
    assert lag_1 == [4, 8]


def test_unused_parameter_error_names_the_parameters(tmp_path: Path) -> None:
    rank0, rank1, (logged, logged_1) = run_ddp("unused", tmp_path / "ddp")
    assert logged_1 == []  # rank 1 reports nothing
    assert "not used in producing the loss" in rank0["error"]  # DDP's error, no names in it
    assert "spare" not in rank0["error"]
    assert rank0["global_step"] == 1  # the first step went through, the second failed
    advice = [line for line in logged if "DDP stopped" in line]
    assert advice == [
        "learnscope: DDP stopped because parameters got no gradient: spare.weight, spare.bias "
        "(found without a gradient after the first backward). Either remove them (or freeze "
        "them with requires_grad_(False), or make them take part in the loss), or let DDP look "
        "for unused parameters on every step, which costs some speed: "
        'Trainer(strategy="ddp_find_unused_parameters_true")'
    ]
    assert any("unused-parameter spare" in line for line in logged)


def test_ranks_with_different_metadata_columns_get_one_clear_error(tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    rank0, rank1, (logged, logged_1) = run_ddp("mismatch", out)
    assert rank0["error"] is None and rank1["error"] is None  # training finished, no hang
    assert rank0["global_step"] == rank1["global_step"] == STEPS[-1]
    assert rank0["switched_off"] == ["embedding projector"] and rank1["switched_off"] == []
    failures = [line for line in logged if line.startswith("learnscope: embedding projector")]
    assert failures == [
        "learnscope: embedding projector of EmbeddingProjector failed on encoder/validate step "
        f"{STEPS[0]} (ValueError: the ranks' embedding rows cannot be gathered into one snapshot: "
        "their metadata differs (rank 0: columns ['label', 'rank', 'row']; rank 1: columns "
        "['colour', 'label', 'row']); metadata_fn (and images_fn) must give the same columns on "
        "every rank) and is switched off; training goes on"
    ]  # once: switched off after the first gathered snapshot
    assert logged_1 == []  # the other rank sent its rows and went on
    reader = ProjectorReader(out / "tb")
    assert all(reader.names(run) == [] for run in reader.runs())  # no mislabelled snapshot
    history = wandb_history(wandb_run_dir(out))
    assert not any(key.startswith("~learnscope/embeddings/") for h in history for key in h)
