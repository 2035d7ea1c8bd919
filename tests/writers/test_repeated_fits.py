"""Nothing of learnscope outlives its fit: open descriptors and threads stay flat over many fits.

Thirty fits in one fresh process, each with all three callbacks and both loggers (TensorBoard and
an offline wandb run), every one drawing pictures (ACF charts, the PCA scatter). Open
descriptors are counted from ``/proc/self/fd`` and learnscope's threads by name after each fit;
from fit 10 to fit 30 neither may grow (the first fits load fonts, Lightning and wandb once).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from learnscope.plugins.pipeline import figures
from learnscope.records import GroupAutocorrelation

pytestmark = pytest.mark.slow

FITS = 30

CHILD = textwrap.dedent(
    """
    import json, os, sys, threading, logging
    sys.path[:0] = [{repo!r}, {here!r}]
    import wandb
    from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
    from tests.kit.models import TinyClassifier, loaders, trainer
    from tests.kit.callbacks import learnscope_callbacks

    logging.getLogger("learnscope").setLevel(logging.ERROR)
    root = {root!r}
    fds, threads, names = [], [], set()
    for n in range({fits}):
        tb = TensorBoardLogger(root, name="tb", version=n)
        wb = WandbLogger(project="fits", save_dir=root, name=f"fit{{n}}")
        fit = trainer(root, [tb, wb], learnscope_callbacks(), max_epochs=1,
                      num_sanity_val_steps=0)
        fit.fit(TinyClassifier(), *loaders(n_train=160, n_val=32))
        wandb.finish()
        ours = [t.name for t in threading.enumerate()
                if t.name.startswith("learnscope") or isinstance(t, threading.Timer)]
        names.update(ours)
        fds.append(len(os.listdir("/proc/self/fd")))
        threads.append(len(ours))
    print("RESULT " + json.dumps({{"fds": fds, "threads": threads, "names": sorted(names)}}))
    """
)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_descriptors_and_threads_stay_flat_over_30_fits(tmp_path: Path) -> None:
    script = CHILD.format(
        repo=str(Path(__file__).parents[2]),
        here=str(Path(__file__).parent),
        root=str(tmp_path),
        fits=FITS,
    )
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=900, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))
    fds, threads = result["fds"], result["threads"]
    assert len(fds) == FITS
    assert max(fds[9:]) <= fds[9], f"open descriptors grew from fit 10 on: {fds}"
    assert max(threads[9:]) <= threads[9], f"learnscope threads grew: {threads} {result['names']}"
    assert "learnscope-writer" not in result["names"]  # none left after any fit


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_pictures_drawn_on_many_threads_keep_one_set_of_font_files_open() -> None:
    """Each fit's writer thread draws; matplotlib caches its open fonts per drawing thread."""
    groups = [
        GroupAutocorrelation("encoder", "params", np.array([1.0, 0.5, 0.2]), 0.5, 0.4, 0.6, 3.0)
    ]
    figures.acf_chart(groups, "warm-up")  # fonts of this process's drawing opened once
    before = open_descriptors()
    for _ in range(3):
        barrier = threading.Barrier(6)
        drawn: list[tuple[int, ...]] = []

        def draw(barrier: threading.Barrier = barrier, drawn: list[object] = drawn) -> None:
            barrier.wait(timeout=30)  # all alive at once: six different thread idents
            drawn.append(figures.acf_chart(groups, "many threads").shape)

        workers = [threading.Thread(target=draw) for _ in range(6)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
        assert len(drawn) == 6 and drawn[0] == (359, figures.WIDTH, 3)
    assert open_descriptors() <= before, "font files stayed open for threads that ended"
