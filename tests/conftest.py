from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.kit.sweep import Sweep

# learnscope's own failures fail the tests instead of being logged and switched off; tests of
# that soft behaviour ask for the ``lenient`` fixture.
os.environ["LEARNSCOPE_STRICT"] = "1"
# pytest-xdist runs the tests in two processes (pyproject's addopts): one torch thread each keeps
# them from fighting over the two cores (torch would start one thread per core in each). Set
# before torch is imported, so the child processes the tests start get it too.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("WANDB_DISABLE_CODE", "true")
warnings.filterwarnings("ignore", ".*does not have many workers.*")


@pytest.fixture
def wandb_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An offline wandb environment in a temporary directory; the run is finished afterwards."""
    import wandb

    root = tmp_path / "wandb_root"
    root.mkdir()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(root))
    yield root
    wandb.finish()


@pytest.fixture
def learnscope_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Records of the ``learnscope`` logger at warning level and above."""
    caplog.set_level(logging.WARNING, logger="learnscope")
    return caplog


@pytest.fixture
def lenient(monkeypatch: pytest.MonkeyPatch) -> None:
    """Turn strict mode off: failures inside learnscope are logged and that part switched off."""
    monkeypatch.setenv("LEARNSCOPE_STRICT", "0")


@pytest.fixture(scope="session")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    """A dozen short real runs in one log directory, written once per session (about a minute):
    healthy, collapsed, non-finite, crashed and killed mid-fit (``tests/kit/sweep.py``).

    For slow tests only; read it, never write into it: other tests share it.
    """
    from tests.kit.sweep import write_sweep

    return write_sweep(tmp_path_factory.mktemp("sweep"))
