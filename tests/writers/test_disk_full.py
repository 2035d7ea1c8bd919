"""A full disk: a fit with learnscope ends as the same fit without it.

Each fit writes its logs to a real small file system, a 1 MiB ``tmpfs`` mounted for the test
(``mount`` needs root or ``CAP_SYS_ADMIN``; without it the tests skip and say so, since nothing
else gives a real ``ENOSPC``: ``RLIMIT_FSIZE`` gives ``EFBIG`` and a signal instead). The disk is
full from the start (16 KiB left) or fills after the first epoch. The fit with learnscope must
end as the fit without it (both finish, or both fail with the same error), learnscope must log
a bounded number of messages (not one per step), and what it wrote before the disk filled must
still be readable.

``Quiet`` logs nothing through Lightning, so Lightning alone survives the full disk (its one
event file keeps within the page it was given at start) and the comparison shows learnscope's
part. Checkpoints are Lightning's own files: when they do not fit, both fits fail in
``ModelCheckpoint`` with the same ``OSError`` (learnscope's files take some of the room, so the
fit with learnscope may fail one checkpoint earlier).
"""

from __future__ import annotations

import collections
import errno
import logging
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from learnscope.plugins.tensorboard import projector_files
from learnscope.run_directory.write_limits import WriteLimits
from tests.kit.callbacks import learnscope_callbacks
from tests.kit.disk import fill, small_disk
from tests.kit.models import AfterFirstEpoch, Quiet, loaders, trainer
from tests.kit.readers import parse_metadata

LEFT_AT_START = 16 * 1024
EPOCHS, STEPS_PER_EPOCH = 2, 12  # 192 training rows in batches of 16

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="tmpfs mounts are Linux only")


# No free-space reserve: these fits show how learnscope meets ENOSPC itself (the reserve, which
# keeps learnscope off a nearly full disk, is tested in ``test_disk_reserve.py``).
NO_RESERVE = WriteLimits(reserve_fraction=0.0, reserve_min_bytes=0)


def lightnings_own(path: Path) -> bool:
    """Whether ``path`` is one of the files Lightning writes in a run directory."""
    return (
        path.name == "hparams.yaml"
        or "checkpoints" in path.parts
        or (path.name.startswith("events.out.tfevents.") and path.suffix != ".learnscope")
    )


def outcome(run: Any, error: BaseException | None) -> tuple[Any, ...]:
    """How a fit ended: epochs and steps done, or the error with its errno and file's folder."""
    if error is None:
        return ("finished", run.current_epoch, run.global_step)
    where = Path(getattr(error, "filename2", None) or getattr(error, "filename", None) or "")
    return (type(error).__name__, getattr(error, "errno", None), where.parent.name)


@dataclass
class Ended:
    """How one fit ended and what it left."""

    outcome: tuple[Any, ...]
    run_dir: Path
    seconds: float
    messages: list[logging.LogRecord]  # the ``learnscope`` logger's, warning and above
    thread_failures: list[str]  # exceptions that ended a thread unhandled (printed to stderr)


def fit_on(disk: Path, with_learnscope: bool, full_from_start: bool, **options: Any) -> Ended:
    """One fit of ``Quiet`` logging to ``disk``, with or without learnscope's callbacks."""
    if full_from_start:
        assert fill(disk, leave=LEFT_AT_START) == LEFT_AT_START
    fills = [] if full_from_start else [AfterFirstEpoch(lambda log_dir: fill(disk))]
    logger = TensorBoardLogger(str(disk), name="run")
    extra = learnscope_callbacks(NO_RESERVE) if with_learnscope else []
    run = trainer(disk.parent, logger, [*extra, *fills], max_epochs=EPOCHS, **options)
    handler = _Keep()
    threads: list[str] = []
    hook = threading.excepthook
    threading.excepthook = lambda args: threads.append(
        f"{args.exc_type.__name__}: {args.exc_value}"
    )
    logging.getLogger("learnscope").addHandler(handler)
    started = time.perf_counter()
    error: BaseException | None = None
    try:
        run.fit(Quiet(), *loaders(n_train=16 * STEPS_PER_EPOCH))
    except Exception as raised:  # noqa: BLE001 - the outcome is what is compared
        error = raised
    finally:
        seconds = time.perf_counter() - started
        logging.getLogger("learnscope").removeHandler(handler)
        threading.excepthook = hook
    return Ended(outcome(run, error), Path(logger.log_dir), seconds, handler.records, threads)


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def check_readable(run_dir: Path) -> tuple[int, list[int]]:
    """Every projector entry and learnscope event file on disk reads back whole.

    Returns:
        The number of projector entries and the steps of learnscope's scalars on disk.
    """
    config = projector_files.read_config(run_dir)  # raises if the config were half written
    for entry in config.embeddings:
        n, dim = entry.tensor_shape
        path = run_dir / entry.tensor_path
        if path.suffix == ".bin":
            vectors = np.frombuffer(path.read_bytes(), np.float32).reshape(n, dim)
        else:  # raw bytes that happen to read as text are written as TSV
            vectors = np.loadtxt(path, delimiter="\t", ndmin=2)
        assert vectors.shape == (n, dim) and np.isfinite(vectors).all()
        _, rows = parse_metadata((run_dir / entry.metadata_path).read_text(encoding="utf-8"))
        assert len(rows) == n
    steps: set[int] = set()
    for path in run_dir.glob("events.out.tfevents.*.learnscope"):
        events = EventAccumulator(str(path), size_guidance={"scalars": 0})
        events.Reload()  # a record cut short by the full disk ends the file, no error
        steps.update(e.step for tag in events.Tags()["scalars"] for e in events.Scalars(tag))
    assert not list(run_dir.rglob("*.tmp"))  # no temporary of a failed write is left
    return len(config.embeddings), sorted(steps)


@pytest.mark.parametrize(
    ("full_from_start", "checkpoints"),
    [(True, False), (False, False), (True, True)],
    ids=["full-from-start", "fills-during-fit", "checkpoints-do-not-fit"],
)
def test_a_fit_with_learnscope_ends_as_it_would_without_on_a_full_disk(
    tmp_path: Path, lenient: None, full_from_start: bool, checkpoints: bool
) -> None:
    ended: dict[str, Ended] = {}
    for name in ("without", "with"):
        with small_disk(tmp_path / name) as disk:
            fit = fit_on(disk, name == "with", full_from_start, enable_checkpointing=checkpoints)
            ended[name] = fit
            written = [p for p in fit.run_dir.rglob("*") if p.is_file() and not lightnings_own(p)]
            learnscope_bytes = sum(p.stat().st_size for p in written)
            entries, scalar_steps = check_readable(fit.run_dir)  # before the disk goes away
    without, with_ = ended["without"], ended["with"]
    assert written and learnscope_bytes > 0  # of the fit with learnscope

    steps = EPOCHS * STEPS_PER_EPOCH
    if checkpoints:  # Lightning's own checkpoint does not fit: both fail alike
        assert without.outcome == with_.outcome == ("OSError", errno.ENOSPC, "checkpoints")
    else:
        assert without.outcome == with_.outcome == ("finished", EPOCHS, steps)
    assert without.messages == [] and without.thread_failures == []
    messages = [r.getMessage() for r in with_.messages]
    assert messages and all("No space left on device" in m for m in messages), messages
    per_call = collections.Counter(m.split(" failed in ")[1].split()[0] for m in messages)
    assert max(per_call.values()) <= 3  # a kind of record failing 3 times in a row goes off
    assert len(messages) <= 3 * len(per_call) < steps  # a few per kind, not one per step
    if not full_from_start:
        assert entries >= 1  # the first epoch's snapshot, written before the disk filled
        assert scalar_steps and scalar_steps[0] < STEPS_PER_EPOCH  # and first-epoch scalars
    print(
        f"\n[disk full] {'from start' if full_from_start else 'during fit'}"
        f"{', checkpoints on' if checkpoints else ''}: {with_.outcome}; "
        f"{len(messages)} learnscope messages {dict(per_call)}; "
        f"{len(with_.thread_failures)} unhandled thread exceptions {with_.thread_failures}; "
        f"learnscope wrote {learnscope_bytes} bytes in {len(written)} files "
        f"({entries} projector entries, scalars of steps {scalar_steps}); "
        f"fit {without.seconds:.2f} s without learnscope, {with_.seconds:.2f} s with"
    )
