"""A dashboard added in a test alone: one ``Writer`` and one ``Dashboard`` entry point.

The test's dashboard serves a logger class of its own (``ScrollLogger``): its writer keeps each
snapshot as a text file of the run folder, its entry makes the folder's run record and says
where the records went and the command that opens them. It is installed the way learnscope's
own dashboards are, as an entry point of ``learnscope.dashboards`` (a distribution's metadata on
``sys.path``, here a temporary one), without a change to the package. In a real ``Trainer.fit``
it gets the end-of-fit line naming its place and command, the run record, and the writers'
failure rules.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from learnscope.plugins import Writer
from learnscope.plugins.pipeline.loggers import (
    ENTRY_POINTS,
    Dashboard,
    Place,
    installed_dashboards,
    logger_writers,
)
from learnscope.plugins.pipeline.run_record_writer import record_writer
from learnscope.records import EmbeddingSnapshot, Finding
from learnscope.run_directory.file_names import RECORD_FILE
from learnscope.run_directory.record import RecordReader
from learnscope.run_directory.write_limits import WriteLimits
from learnscope.shell import shell_command
from learnscope.storage import RunFolder, open_run_folder
from tests.kit.models import Collect, TinyClassifier, loaders, trainer


class ScrollLogger(Collect):
    """A logger of the test's own, with a run directory."""

    def __init__(self, log_dir: Path, read_only: bool = False) -> None:
        super().__init__()
        self._log_dir = log_dir
        self.read_only = read_only  # its writer fails as on a read-only file system

    @property
    def log_dir(self) -> str:
        return str(self._log_dir)


class ScrollWriter(Writer):
    """The test dashboard's writer: each snapshot one text file, through the run folder."""

    def __init__(self, folder: RunFolder) -> None:
        self.folder = folder
        self.findings: list[int] = []  # the rows of each findings table given

    def write_embedding(self, snapshot: EmbeddingSnapshot) -> None:
        text = f"{snapshot.key} step {snapshot.step}: {snapshot.num_points} points\n"
        self.folder.write(f"scroll/step_{snapshot.step:06d}.txt", text.encode())

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        pass

    def write_findings(self, findings: Sequence[Finding], step: int) -> None:
        self.findings.append(len(findings))

    def describe(self) -> str:
        return f"ScrollWriter({self.folder.location})"


class ReadOnlyScrollWriter(ScrollWriter):
    """Every snapshot fails as on a read-only file system: a failure that will recur."""

    def write_embedding(self, snapshot: EmbeddingSnapshot) -> None:
        raise OSError(errno.EROFS, "Read-only file system", self.folder.location)


def scroll_writers(logger: ScrollLogger, limits: WriteLimits) -> list[Writer]:
    folder = open_run_folder(logger.log_dir)
    folder.make()
    writer = ReadOnlyScrollWriter(folder) if logger.read_only else ScrollWriter(folder)
    return [writer, record_writer(folder, limits)]  # the folder's one run record


def scroll_place(logger: ScrollLogger, missing: str | None) -> Place:
    return Place(f"the scroll {logger.log_dir}", shell_command("scroll-viewer", logger.log_dir))


SCROLL = Dashboard(scroll_writers, scroll_place, "scroll-viewer")


def install_entry_points(root: Path, name: str, entries: Mapping[str, str]) -> Path:
    """A distribution's metadata with ``entries`` in learnscope's group, in ``root``."""
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = [f"[{ENTRY_POINTS}]", *(f"{key} = {value}" for key, value in entries.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture
def scroll_dashboard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Dashboard:
    """The test's dashboard, installed for the test only."""
    root = install_entry_points(
        tmp_path / "site", "scroll-dashboard", {"ScrollLogger": f"{__name__}:SCROLL"}
    )
    monkeypatch.syspath_prepend(str(root))
    return SCROLL


@pytest.fixture
def lightning_log(caplog: pytest.LogCaptureFixture) -> Any:
    """The records of Lightning's own logger, which shows the end-of-fit line."""
    logger = logging.getLogger("lightning.pytorch")
    added = not logger.propagate
    if added:
        logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="lightning.pytorch")
    yield caplog
    if added:
        logger.removeHandler(caplog.handler)


def end_of_fit_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "lightning.pytorch.learnscope"]


def three_callbacks() -> list[Any]:
    return [
        TrainingHelper(check_every_n_steps=6),
        ModelAutocorrelation(analyze_every_n_steps=6, lags=(1, 2), buffer_size=8),
        EmbeddingProjector("encoder", metadata_fn=lambda batch: {"label": batch[1]}),
    ]


def test_the_dashboard_is_installed_beside_learnscopes_own(scroll_dashboard: Dashboard) -> None:
    dashboards = installed_dashboards()
    assert dashboards["ScrollLogger"] is scroll_dashboard
    assert {"TensorBoardLogger", "WandbLogger"} <= set(dashboards)


def test_a_fit_writes_through_it_and_the_line_names_its_place_and_command(
    tmp_path: Path, scroll_dashboard: Dashboard, lightning_log: Any
) -> None:
    logger = ScrollLogger(tmp_path / "scroll run")
    fit = trainer(tmp_path, [logger], three_callbacks(), max_epochs=2)
    fit.fit(TinyClassifier(), *loaders())

    assert sorted(p.name for p in (tmp_path / "scroll run" / "scroll").iterdir()) == [
        "step_000006.txt",
        "step_000012.txt",
    ]
    entries = RecordReader(tmp_path / "scroll run" / RECORD_FILE).read()
    kinds = [entry["kind"] for entry in entries]
    assert kinds[0] == "run" and kinds[-1] == "end" and entries[-1]["status"] == "finished"
    assert kinds.count("snapshot") == 2
    assert kinds.count("autocorrelation") == 4  # steps 6 and 12, params and grads
    names = [callback["name"] for callback in entries[0]["callbacks"]]
    assert names == ["TrainingHelper", "ModelAutocorrelation", "EmbeddingProjector"]

    (line,) = end_of_fit_lines(lightning_log)
    place = f"the scroll {tmp_path / 'scroll run'}"
    assert line.startswith(
        "learnscope wrote 2 embedding snapshots, 2 autocorrelation analyses and 0 findings in "
        f"this fit, to {place}"
    )
    assert line.endswith(f"Open it with: scroll-viewer '{tmp_path / 'scroll run'}'")
    assert "tensorboard" not in line and "W&B" not in line


def test_a_writer_that_keeps_failing_is_switched_off_with_one_message_and_training_goes_on(
    tmp_path: Path, scroll_dashboard: Dashboard, lenient: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    logger = ScrollLogger(tmp_path / "run", read_only=True)
    fit = trainer(tmp_path, [logger], three_callbacks(), max_epochs=2)
    fit.fit(TinyClassifier(), *loaders())

    assert fit.global_step == 12 and fit.current_epoch == 2  # training finished
    said = [r for r in caplog.records if r.name == "learnscope" and r.levelno >= logging.WARNING]
    (off,) = [r.getMessage() for r in said if "failed in" in r.getMessage()]
    assert off.startswith(f"learnscope: ScrollWriter({tmp_path / 'run'}) failed in write_embedding")
    assert "the file system is read-only, so it is switched off for the rest of the run" in off
    # the folder's run record is its own writer: it still has the run
    kinds = [entry["kind"] for entry in RecordReader(tmp_path / "run" / RECORD_FILE).read()]
    assert kinds.count("snapshot") == 2 and kinds[-1] == "end"

    (line,) = end_of_fit_lines(caplog)
    assert line.startswith(
        "learnscope wrote 0 embedding snapshots, 1 autocorrelation analysis and 0 findings in "
        f"this fit, to the scroll {tmp_path / 'run'} (2 embedding snapshots, 1 autocorrelation "
        "analysis and "
    ), line
    assert "other records not written: OSError: [Errno 30] Read-only file system" in line
    assert "Open it with: scroll-viewer" in line


def test_a_logger_of_the_same_class_name_elsewhere_is_not_taken_for_it(
    tmp_path: Path, scroll_dashboard: Dashboard
) -> None:
    """The dashboard serves its class by name, and its subclasses; other loggers keep theirs."""

    class Subclass(ScrollLogger):
        pass

    made = logger_writers(Subclass(tmp_path / "sub"))
    assert made.dashboard is scroll_dashboard
    assert made.place().name == f"the scroll {tmp_path / 'sub'}"
    assert [type(w).__name__ for w in made.writers] == ["ScrollWriter", "RunRecordWriter"]
    other = logger_writers(Collect())
    assert other.dashboard is None and other.place().name == "Collect"


def test_two_dashboards_for_one_logger_class_are_refused_with_one_error(
    tmp_path: Path, scroll_dashboard: Dashboard, caplog: pytest.LogCaptureFixture
) -> None:
    root = install_entry_points(
        tmp_path / "other", "other-scroll", {"ScrollLogger": f"{__name__}:SCROLL"}
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(root))
        dashboards = installed_dashboards()
    assert "ScrollLogger" not in dashboards and "TensorBoardLogger" in dashboards
    (error,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert error.startswith("learnscope: 2 dashboards are installed for ScrollLogger (")
    assert "scroll-dashboard" in error and "other-scroll" in error


def test_an_entry_that_is_not_a_dashboard_is_left_out_with_one_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = install_entry_points(
        tmp_path / "site", "not-a-dashboard", {"ScrollLogger": f"{__name__}:scroll_writers"}
    )
    monkeypatch.syspath_prepend(str(root))
    assert "ScrollLogger" not in installed_dashboards()
    (error,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "is a function, not a learnscope Dashboard; ScrollLogger loggers get only" in error
