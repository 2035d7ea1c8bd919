"""What a run's ``run`` and ``end`` entries say, and what each empty section of its view says.

The callbacks attached come from the ``run`` entries, so a section with nothing yet says
"waiting for ..." while the run goes on, why it is empty once the run ended (the setting that
left it empty and the value that would fill it, from the callback's settings in the ``run``
entry and the ``end`` entry's step; or that the run failed, with its exception, or was
interrupted), and "attach ..." only when no ``run`` entry lists the callback that fills it. How
a run that did not finish ended is said in the same words by every view and by ``learnscope
export`` (:func:`ending_text`). The end-of-fit line says the
same (:func:`analysis_missing`). Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from learnscope.plugins.views.autocorrelation_fold import CHARTED_LAGS
from learnscope.plugins.views.record_checks import DamagedEntry, is_number, list_field, whole_number
from learnscope.run_record import FORMAT as RECORD_FORMAT

PCA_HINT = "run with EmbeddingProjector(aligned_pca=True)"
PROJECTOR = "EmbeddingProjector"
AUTOCORRELATION = "ModelAutocorrelation"
HELPER = "TrainingHelper"


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


def end_error(error: Any) -> dict[str, str]:
    """The ``error`` of a failed run's ``end`` entry: ``{"type", "message"}``, as text.

    A missing or damaged one is an ``unknown`` exception, so a failed run still shows failed.

    Example:
        >>> end_error({"type": "ValueError", "message": "bad"}), end_error(None)["type"]
        ({'type': 'ValueError', 'message': 'bad'}, 'unknown exception')
    """
    if isinstance(error, Mapping):
        kind, message = error.get("type"), error.get("message")
        if isinstance(kind, str) and kind:
            return {"type": kind, "message": message if isinstance(message, str) else ""}
    return {"type": "unknown exception", "message": "the record does not say which"}


def ending_text(ended: Mapping[str, Any] | None) -> str | None:
    """How a run that did not finish ended, and at which step; ``None`` for a finished run.

    The words every view and ``learnscope export`` use: ``failed at step S: type: message``
    for a failed run, ``interrupted by Ctrl-C at step S`` for one stopped with
    ``KeyboardInterrupt``. ``None`` too for a run with no ``end`` entry (it is still going on,
    or its process was killed).

    Example:
        >>> ending_text({"step": 7, "status": "interrupted"})
        'interrupted by Ctrl-C at step 7'
        >>> ending_text({"step": 0, "status": "failed", "error": {"type": "OSError",
        ...     "message": "disk full"}})
        'failed at step 0: OSError: disk full'
        >>> ending_text({"step": 9, "status": "finished"}) is None, ending_text(None) is None
        (True, True)
    """
    if ended is None:
        return None
    if ended.get("status") == "failed":
        return f"failed at step {ended.get('step')}: {error_text(ended)}"
    if ended.get("status") == "interrupted":
        return f"interrupted by Ctrl-C at step {ended.get('step')}"
    return None


def error_text(ended: Mapping[str, Any]) -> str:
    """A failed run's exception as a traceback ends: ``type: message`` (its first line).

    Example:
        >>> error_text({"status": "failed", "error": {"type": "KeyError", "message": "'x'"}})
        "KeyError: 'x'"
    """
    error = ended.get("error") or end_error(None)
    message = str(error.get("message", "")).strip()
    if "\n" in message:
        message = message.split("\n", 1)[0] + " ..."
    return f"{error['type']}: {message}" if message else str(error["type"])


def _settings(settings: Any) -> Mapping[str, Any]:
    return settings if isinstance(settings, Mapping) else {}


def _whole(value: Any) -> int | None:
    return value if type(value) is int else None


def _positive_lags(settings: Any) -> list[int]:
    """The positive lags ``ModelAutocorrelation`` was made with, sorted; ``[]`` when unknown."""
    lags = _settings(settings).get("lags")
    if not isinstance(lags, list) or not all(type(lag) is int for lag in lags):
        return []
    return sorted({lag for lag in lags if lag > 0})


def _stopped(ended: Mapping[str, Any], before: str) -> str | None:
    """What a failed or interrupted run's empty section says; ``None`` for a finished run."""
    if ended.get("status") == "failed":
        return f"the run failed at step {ended.get('step')} ({error_text(ended)}), before {before}"
    if ended.get("status") == "interrupted":
        return f"the run was {ending_text(ended)}, before {before}"
    return None


def waiting_for_analysis(settings: Any) -> str:
    """What the autocorrelation section says while the run goes on: when the first comes.

    The first scheduled analysis is at the first multiple of ``analyze_every_n_steps`` at which
    the history holds more steps than the largest lag; a fit that ends before it is analysed at
    its end.

    Example:
        >>> waiting_for_analysis({"analyze_every_n_steps": 20, "lags": [1, 2, 5, 10, 20]})
        'waiting for the first autocorrelation analysis, at step 40 (analyze_every_n_steps=20) \
or at the end of the fit'
    """
    every = _whole(_settings(settings).get("analyze_every_n_steps"))
    lags = _positive_lags(settings)
    if every is None or every < 1 or not lags:
        return "waiting for the first autocorrelation analysis"
    first = every * max(1, -(-(lags[-1] + 1) // every))
    return (
        f"waiting for the first autocorrelation analysis, at step {first} "
        f"(analyze_every_n_steps={every}) or at the end of the fit"
    )


def analysis_missing(settings: Any, ended: Mapping[str, Any]) -> str:
    """Why a run that ended has no autocorrelation analysis, and the setting that would fill it.

    ``ModelAutocorrelation`` analyses at the fit's end with the lags its history holds: a lag
    ``k`` needs ``k + 1`` recorded steps, one per optimizer step. So a fit that ended at a step
    no larger than the smallest lag has none, and a smaller lag would analyse it.

    Args:
        settings: ``ModelAutocorrelation``'s settings (its ``run`` entry's ``settings``).
        ended: What the ``end`` entry says: ``step``, ``status``, and a failed run's ``error``.

    Example:
        >>> analysis_missing({"lags": [5, 10]}, {"step": 3, "status": "finished"})
        "the run ended at step 3, before ModelAutocorrelation's history held 6 steps (its \
smallest lag, 5, plus one): lags=(1, 2) would analyse a fit this short"
    """
    stopped = _stopped(ended, "the first autocorrelation analysis")
    if stopped is not None:
        return stopped
    step, lags = _whole(ended.get("step")), _positive_lags(settings)
    if step is None or not lags:
        return "the run ended before the first autocorrelation analysis"
    if step <= lags[0]:
        shorter = tuple(lag for lag in CHARTED_LAGS if lag < step)
        would = (
            f"lags={shorter} would analyse a fit this short"
            if shorter
            else "a fit of 2 or more optimizer steps would be analysed"
        )
        return (
            f"the run ended at step {step}, before {AUTOCORRELATION}'s history held "
            f"{lags[0] + 1} steps (its smallest lag, {lags[0]}, plus one): {would}"
        )
    return (
        f"the run ended at step {step} without an autocorrelation analysis: {AUTOCORRELATION}'s "
        f"history never held {lags[0] + 1} steps (the history of a resumed fit starts at its "
        "resume; a fit in which nothing trains has none), or a failure switched it off (see "
        "the training log)"
    )


def snapshots_missing(settings: Any, ended: Mapping[str, Any]) -> str:
    """Why a run that ended has no embedding snapshot, with what the projector captures.

    Example:
        >>> snapshots_missing({"stages": ["validate"], "every_n_epochs": 2},
        ...                   {"step": 30, "status": "finished"})
        "EmbeddingProjector wrote no snapshot in this run: it captures the stages ['validate'] \
every 2 epochs (every_n_epochs=2), and leaves out rows with NaN or Inf; every_n_epochs=1 \
would capture every epoch"
    """
    stopped = _stopped(ended, f"{PROJECTOR}'s first snapshot")
    if stopped is not None:
        return stopped
    settings = _settings(settings)
    stages, every = settings.get("stages"), _whole(settings.get("every_n_epochs"))
    train_steps = _whole(settings.get("every_n_train_steps"))
    if not isinstance(stages, list) or every is None:
        return f"{PROJECTOR} wrote no snapshot in this run"
    epochs = "every epoch" if every == 1 else f"every {every} epochs"
    train = (
        f", training batches every {train_steps} steps (every_n_train_steps={train_steps})"
        if train_steps is not None and "train" in stages
        else ""
    )
    each = "; every_n_epochs=1 would capture every epoch" if every > 1 else ""
    return (
        f"{PROJECTOR} wrote no snapshot in this run: it captures the stages {stages} {epochs} "
        f"(every_n_epochs={every}){train}, and leaves out rows with NaN or Inf{each}"
    )


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
            status["embeddings"] = f"no snapshot with aligned PCA coordinates; {PCA_HINT}"
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
