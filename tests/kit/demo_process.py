"""``learnscope demo`` in a process of its own, as the console script runs it, for the tests."""

from __future__ import annotations

import subprocess
import sys

# ``learnscope demo`` as the console script runs it, on a machine of 8 cores: Lightning says
# "does not have many workers" only where it counts more than 2 (this one may have 2).
EIGHT_CORES_DEMO = (
    "import sys\n"
    "import lightning.fabric.utilities.data as data\n"
    "data._num_cpus_available = lambda: 8\n"
    "from learnscope.lightning_glue.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
# What Lightning, torch and the demo's set-up printed in the demo before it hid them.
NOISE = (
    "GPU available",
    "TPU available",
    "Tip:",
    "litlogger",
    "deprecated",
    "many workers",
    "Warning",
    "WARNING",
    "`Trainer.fit` stopped",
    "Seed set",
    "wandb:",
)


def run_demo(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``learnscope demo`` with ``args`` (:data:`EIGHT_CORES_DEMO`); fails the test unless it
    exits 0, with the end of its standard error."""
    result = subprocess.run(
        [sys.executable, "-c", EIGHT_CORES_DEMO, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result
