"""``learnscope demo --sweep``: six runs of the demo's model, four healthy, one that collapses
after it has trained a little, one that diverges; each with its hyper-parameters, and the lines
at the end saying each run's status and findings and what opens them.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

import learnscope
from learnscope.lightning_glue.demo_sweep import STEPS_PER_EPOCH, SWEEP
from tests.kit.demo_process import NOISE, run_demo

pytestmark = pytest.mark.slow

EPOCHS = 3  # the collapse is found at step 30 and holds; the divergence ends its fit at step 20
HEALTHY = [setting.name for setting in SWEEP if setting.meant.startswith("healthy")]
COLLAPSES, DIVERGES = "lr0.02_wd30", "lr1000_wd0.01"


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """``learnscope demo --sweep --epochs 3 --wandb``, once, in a process of its own."""
    logdir = tmp_path_factory.mktemp("demo_sweep") / "runs"
    args = ["demo", "--sweep", "--logdir", str(logdir), "--epochs", str(EPOCHS), "--wandb"]
    return logdir, run_demo(args, timeout=600)


def codes(summary: Any) -> set[str]:
    return {count.code for count in summary.findings}


def test_the_runs_are_healthy_but_one_that_collapses_and_one_that_diverges(
    swept: tuple[Path, Any],
) -> None:
    logdir, _ = swept
    folder = logdir / "sweep" / "version_0"
    summaries = learnscope.read_summaries(folder)
    assert sorted(summaries) == sorted(setting.name for setting in SWEEP) and len(HEALTHY) == 4
    steps = EPOCHS * STEPS_PER_EPOCH
    for name in HEALTHY:
        assert (summaries[name].status, summaries[name].last_step) == ("finished", steps)
        assert summaries[name].findings == (), name
    collapsed = summaries[COLLAPSES]
    assert (collapsed.status, collapsed.last_step, codes(collapsed)) == (
        "finished",
        steps,
        {"embedding-collapse"},
    )
    # found after it trained a little (the checks of steps 0, 10 and 20 found nothing), and held
    assert collapsed.first_collapse_step == 30
    assert [count.holding for count in collapsed.findings] == [1]
    diverged = summaries[DIVERGES]
    assert diverged.status == "finished" and diverged.last_step == STEPS_PER_EPOCH  # stopped
    assert "non-finite-loss" in codes(diverged) and "embedding-collapse" not in codes(diverged)
    assert diverged.first_finding is not None and diverged.first_finding.code == "non-finite-loss"
    assert diverged.first_non_finite_step == 10
    # the W&B runs' records say the same
    wandb = learnscope.read_summaries(folder / "wandb")
    assert len(wandb) == 6 and sorted(map(str, wandb.values())) == sorted(
        map(str, summaries.values())
    )


def test_each_run_saved_its_hyperparameters(swept: tuple[Path, Any]) -> None:
    logdir, _ = swept
    summaries = learnscope.read_summaries(logdir / "sweep" / "version_0")
    for setting in SWEEP:
        given = {"lr": setting.lr, "weight_decay": setting.weight_decay}
        run = logdir / "sweep" / "version_0" / setting.name
        assert yaml.safe_load((run / "hparams.yaml").read_text()) == given
        assert summaries[setting.name].hyperparameters == given


def test_it_says_each_run_and_what_opens_them(swept: tuple[Path, Any]) -> None:
    logdir, result = swept
    folder = logdir / "sweep" / "version_0"
    said = result.stdout + result.stderr
    for noise in NOISE:
        assert noise not in said, said
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert all(line.startswith("learnscope: ") for line in lines), result.stderr
    assert "learnscope wrote" not in said  # no end-of-fit line per run: the lines below say it
    out = result.stdout
    assert f"6 runs of {EPOCHS} epochs, seed 0, into {folder}" in out
    assert re.search(rf"6 runs of {EPOCHS} epochs in \d+ s, into {re.escape(str(folder))}:", out)
    for name in HEALTHY:
        assert f"  {name}: finished at step 60; no findings\n" in out
    assert (
        f"  {COLLAPSES}: finished at step 60; findings: embedding-collapse on encoder, first at "
        "step 30\n" in out
    )
    assert re.search(
        rf"  {DIVERGES}: finished at step 20 of 60 \(EarlyStopping: val/loss is not finite\); "
        r"findings: non-finite-loss, .*; the first: non-finite-loss on loss at step 10\n",
        out,
    )
    assert f"tensorboard --logdir {folder}\n" in out
    assert f"learnscope export {folder} --html sweep.html\n" in out
    (sync,) = [line for line in out.splitlines() if line.startswith("upload the W&B runs: ")]
    words = shlex.split(sync.removeprefix("upload the W&B runs: "))
    assert words[:2] == ["wandb", "sync"]
    assert sorted(words[2:]) == sorted(map(str, (folder / "wandb").glob("offline-run-*")))
    assert len(words[2:]) == 6


def test_a_second_sweep_goes_into_a_folder_of_its_own(tmp_path: Path) -> None:
    from learnscope.lightning_glue.demo_sweep import next_sweep_folder

    (tmp_path / "sweep" / "version_0").mkdir(parents=True)
    assert next_sweep_folder(tmp_path) == tmp_path / "sweep" / "version_1"
