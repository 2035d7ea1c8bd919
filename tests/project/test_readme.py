"""Every Python code block of the README runs as written, in a fresh interpreter.

Each block is saved as a script in its own empty working directory and run there, the blocks
at the same time. ``WANDB_MODE=offline`` is set only for a block that uses wandb (the README
tells the reader to log in or set it). What each block wrote is then read back.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from readers import ProjectorReader
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

pytestmark = pytest.mark.slow

README = Path(__file__).parents[2] / "README.md"


def python_blocks() -> list[str]:
    """The README's ```python blocks, in order."""
    return re.findall(r"^```python\n(.*?)^```$", README.read_text(), flags=re.M | re.S)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, Path]]:
    """Run every block at once; each block's text and working directory."""
    blocks = python_blocks()
    started = []
    for index, block in enumerate(blocks):
        cwd = tmp_path_factory.mktemp(f"readme_block_{index}")
        (cwd / "block.py").write_text(block)
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        env.pop("WANDB_MODE", None)
        if "wandb" in block.lower():
            env["WANDB_MODE"] = "offline"
        process = subprocess.Popen(
            [sys.executable, "block.py"],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        started.append((block, cwd, process))
    for block, _, process in started:
        output = process.communicate(timeout=600)[0]
        assert process.returncode == 0, f"README block failed:\n{block[:300]}\n{output[-3000:]}"
    return [(block, cwd) for block, cwd, _ in started]


def test_the_readme_has_the_lightning_and_the_plain_loop_examples() -> None:
    blocks = python_blocks()
    assert len(blocks) == 2
    assert "trainer.fit(" in blocks[0] and "max_epochs=" in blocks[0]
    assert "for step in range(" in blocks[1] and "writers.close()" in blocks[1]


def test_the_lightning_example_fills_every_tab(ran: list[tuple[str, Path]]) -> None:
    _, cwd = ran[0]
    reader = ProjectorReader(cwd / "runs")
    (run,) = reader.runs()
    names = reader.names(run)
    assert names == sorted(names) and len(names) == 5  # one per epoch, in training order
    assert all(re.fullmatch(r"encoder/validate/step_\d{9}", name) for name in names)
    assert reader.tensor(run, names[-1]).shape == (128, 8)

    events = EventAccumulator(str(cwd / "runs" / run))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    assert {
        "~learnscope/autocorrelation/params/encoder/rho1_median",
        "~learnscope/health/grad_norm/encoder",
    } <= scalars
    assert "~learnscope/findings/text_summary" in events.Tags()["tensors"]
    assert list((cwd / "wandb").glob("offline-run-*"))  # the WandbLogger ran, offline


def test_the_plain_loop_writes_tensorboard_and_wandb(ran: list[tuple[str, Path]]) -> None:
    _, cwd = ran[1]
    assert ProjectorReader(cwd / "runs").names("manual") == ["encoder/validate/step_000000099"]
    assert list((cwd / "wandb").glob("offline-run-*"))


def test_the_readme_says_what_every_finding_code_means() -> None:
    from learnscope.records import FINDING_CODES

    rows = re.findall(r"^\| `([a-z-]+)`(?: \(info\))? \| .+ \| .+ \|$", README.read_text(), re.M)
    assert set(FINDING_CODES) <= set(rows), set(FINDING_CODES) - set(rows)


def test_every_learnscope_name_in_the_readme_has_its_import_path() -> None:
    """A public class or function the README names is imported in a snippet or given dotted."""
    import importlib

    text = README.read_text()
    public = {}
    for package in ("learnscope", "learnscope.health", "learnscope.lightning_glue"):
        module = importlib.import_module(package)
        public.update({name: package for name in getattr(module, "__all__", ())})
    named = set(re.findall(r"`([A-Za-z_]\w*)\(?", text)) & set(public)
    imported = set(re.findall(r"from learnscope[\w.]* import ([\w, ]+)", text))
    imported = {n.strip() for names in imported for n in names.split(",")}
    dotted = set(re.findall(r"learnscope(?:\.\w+)*\.([A-Za-z_]\w*)", text))
    missing = sorted(named - imported - dotted)
    assert not missing, [f"{name} (from {public[name]})" for name in missing]


def test_the_first_screen_is_a_quick_start_whose_three_lines_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Install, demo, TensorBoard and the lines to add, before line 60; the lines, added to a
    tiny model's trainer, fill a TensorBoard run."""
    from tiny_models import TinyClassifier, loaders, trainer

    lines = README.read_text().splitlines()
    start = lines.index("## Quick start")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
    assert start < 12 and end < 60, (start, end)
    quick = "\n".join(lines[start:end])
    for step in ('pip install "torch==2.13.0" -e ".[all]"', "learnscope demo", "--logdir runs"):
        assert step in quick
    (diff,) = re.findall(r"```diff\n(.*?)```", quick, flags=re.S)
    added = [
        line.strip()[1:].split("  #")[0].strip()  # without the comment
        for line in diff.splitlines()
        if line.strip()[:1] == "+"
    ]
    assert len(added) == 3
    namespace: dict = {}
    exec(added[0] + "\nfrom lightning.pytorch.loggers import TensorBoardLogger", namespace)
    monkeypatch.chdir(tmp_path)
    arguments = eval("dict(" + " ".join(added[1:]) + ")", namespace)
    fit = trainer(tmp_path, arguments["logger"], arguments["callbacks"], max_epochs=2)
    fit.fit(TinyClassifier(), *loaders())
    reader = ProjectorReader(tmp_path / "runs")
    (run,) = reader.runs()
    assert reader.names(run) == [
        "encoder/validate/step_000000006",
        "encoder/validate/step_000000012",
    ]
    events = EventAccumulator(str(tmp_path / "runs" / run))
    events.Reload()
    assert any(tag.startswith("~learnscope/health/") for tag in events.Tags()["scalars"])
