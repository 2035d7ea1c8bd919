"""What a run's ``run`` and ``end`` entries say, and what each empty section of its view says.

The callbacks attached come from the ``run`` entries, so a section with nothing yet says
"waiting for ..." while the run goes on, why it is empty once the run ended (the setting that
left it empty and the value that would fill it, from the callback's settings in the ``run``
entry and the ``end`` entry's step; or that the run failed, with its exception, or was
interrupted), and "attach ..." only when no ``run`` entry lists the callback that fills it. The
words of how a run ended and why a section is empty are :mod:`learnscope.run_directory.endings`',
which the end-of-fit line says too. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from learnscope.plugins.views.record_checks import DamagedEntry, is_number, list_field, whole_number
from learnscope.run_directory.endings import (
    AUTOCORRELATION,
    CHARTED_LAGS,
    HELPER,
    PROJECTOR,
    analysis_missing,
    end_error,
    ending_text,
    error_text,
    snapshots_missing,
    waiting_for_analysis,
)
from learnscope.run_directory.record import FORMAT as RECORD_FORMAT

PCA_HINT = "run with EmbeddingProjector(aligned_pca=True)"  # a run of the callbacks
LOOP_PCA_HINT = (  # a plain loop's (its record has no run entry naming the projector)
    "write each snapshot as "
    "learnscope.embeddings.aligned_views.AlignedViews().add(snapshot) gives it "
    "(one AlignedViews for the run)"
)


def pca_hint(run: RunEntries) -> str:
    """How to get the aligned PCA view, in the words of what wrote the run.

    A run whose ``run`` entries name ``EmbeddingProjector`` gets the callback's argument; any
    other record (a plain loop's, with no ``run`` entry) the core call that loop makes.

    Example:
        >>> pca_hint(RunEntries()) == LOOP_PCA_HINT
        True
        >>> run = RunEntries()
        >>> run.fold_run({"kind": "run", "callbacks": [{"name": "EmbeddingProjector"}]})
        >>> pca_hint(run)
        'run with EmbeddingProjector(aligned_pca=True)'
    """
    return PCA_HINT if PROJECTOR in run.callbacks else LOOP_PCA_HINT


@dataclass
class RunEntries:
    """What the record's ``run`` and ``end`` entries say: the callbacks, the start, the end.

    Example:
        >>> run = RunEntries()
        >>> run.fold_run({"kind": "run", "format": 1, "time": 3.0,
        ...               "callbacks": [{"name": "TrainingHelper", "settings": {}}]})
        >>> run.count, run.started, sorted(run.callbacks)
        (1, 3.0, ['TrainingHelper'])
    """

    callbacks: dict[str, Any] = field(default_factory=dict)  # name -> settings
    count: int = 0  # ``run`` entries read (a resumed fit adds one)
    started: float | None = None
    ended: dict[str, Any] | None = None
    newer_format: bool = False  # a ``run`` entry of a newer learnscope: what follows is not read

    def fold_run(self, entry: Mapping[str, Any]) -> None:
        """Fold a ``run`` entry in.

        Raises:
            DamagedEntry: When it is of a newer format (the entries after it are not shown).
        """
        version = entry.get("format", RECORD_FORMAT)
        self.newer_format = not isinstance(version, int) or version > RECORD_FORMAT
        if self.newer_format:
            raise DamagedEntry(
                f"format {version!r} is newer than this learnscope reads ({RECORD_FORMAT}); "
                "the entries that follow it are not shown (update learnscope)"
            )
        self.count += 1
        self.ended = None
        if is_number(entry.get("time")):
            self.started = float(entry["time"])
        for callback in list_field(entry, "callbacks", required=False):
            if isinstance(callback, Mapping) and isinstance(callback.get("name"), str):
                self.callbacks[callback["name"]] = callback.get("settings")

    def fold_end(self, entry: Mapping[str, Any]) -> None:
        """Fold an ``end`` entry in (a failed run's ``error`` too: see :func:`end_error`)."""
        status = entry.get("status")
        self.ended = {
            "step": whole_number(entry, "step") if entry.get("step") is not None else None,
            "status": status if isinstance(status, str) else "finished",
        }
        if self.ended["status"] == "failed":
            self.ended["error"] = end_error(entry.get("error"))

    def failure(self) -> str | None:
        """How the newest run failed, ``step: type: message``; ``None`` unless it failed.

        Example:
            >>> run = RunEntries()
            >>> run.fold_end({"kind": "end", "step": 3, "status": "failed",
            ...               "error": {"type": "RuntimeError", "message": "boom"}})
            >>> run.failure()
            'the run failed at step 3: RuntimeError: boom'
        """
        if self.ended is None or self.ended["status"] != "failed":
            return None
        return f"the run failed at step {self.ended['step']}: {error_text(self.ended)}"

    def interruption(self) -> str | None:
        """How the newest run was interrupted (Ctrl-C), and at which step; ``None`` otherwise.

        Example:
            >>> run = RunEntries()
            >>> run.fold_end({"kind": "end", "step": 252, "status": "interrupted"})
            >>> run.interruption()
            'the run was interrupted by Ctrl-C at step 252: what it wrote until then is shown'
        """
        if self.ended is None or self.ended["status"] != "interrupted":
            return None
        return f"the run was {ending_text(self.ended)}: what it wrote until then is shown"

    def charted_lags(self) -> list[int]:
        """The lags ``ModelAutocorrelation`` was made with (its ``run`` settings), else 1..50."""
        settings = self.callbacks.get(AUTOCORRELATION)
        lags = settings.get("lags") if isinstance(settings, Mapping) else None
        if isinstance(lags, list) and lags and all(type(lag) is int and lag > 0 for lag in lags):
            return sorted(set(lags))
        return list(CHARTED_LAGS)


def section_status(
    run: RunEntries,
    embeddings: bool,
    without_pca: bool,
    autocorrelation: bool,
    findings: list[dict[str, Any]] | None,
) -> tuple[dict[str, str | None], list[str]]:
    """What each section says when it is empty, and the messages about what is not attached.

    Args:
        run: What the ``run`` and ``end`` entries said.
        embeddings: Whether some key has snapshots with aligned PCA coordinates.
        without_pca: Whether some snapshot had none.
        autocorrelation: Whether some analysis was read.
        findings: The newest findings table, ``None`` when the record has none.

    Example:
        >>> section_status(RunEntries(), False, False, False, None)[0]["findings"]
        'no findings yet'
    """
    known, ended, attached = run.count > 0, run.ended, set(run.callbacks)
    messages: list[str] = []
    status: dict[str, str | None] = {"embeddings": None, "autocorrelation": None}
    if not embeddings:
        if without_pca:
            status["embeddings"] = f"no snapshot with aligned PCA coordinates; {pca_hint(run)}"
        elif known and PROJECTOR not in attached:
            status["embeddings"] = "no embedding snapshots (attach EmbeddingProjector)"
            messages.append(status["embeddings"])
        elif ended is not None:
            status["embeddings"] = snapshots_missing(run.callbacks.get(PROJECTOR), ended)
        elif known:
            status["embeddings"] = "waiting for the first snapshot"
        else:
            status["embeddings"] = "no embedding snapshots in this run"
    if not autocorrelation:
        settings = run.callbacks.get(AUTOCORRELATION)
        if known and AUTOCORRELATION not in attached:
            status["autocorrelation"] = "no autocorrelation (attach ModelAutocorrelation)"
            messages.append(status["autocorrelation"])
        elif ended is not None:
            status["autocorrelation"] = analysis_missing(settings, ended)
        elif known:
            status["autocorrelation"] = waiting_for_analysis(settings)
        else:
            status["autocorrelation"] = "no autocorrelation analysis in this run"
    if known and HELPER not in attached:
        messages.append("no health checks (attach TrainingHelper)")
    if findings:
        status["findings"] = None
    elif known and HELPER not in attached and findings is None:
        status["findings"] = "no findings table (attach TrainingHelper)"
    elif ended is not None and ended["status"] in ("failed", "interrupted"):
        stopped = "failed" if ended["status"] == "failed" else "was interrupted by Ctrl-C"
        status["findings"] = f"no findings before the run {stopped}"
    else:
        status["findings"] = "no findings" if ended is not None else "no findings yet"
    return status, messages
