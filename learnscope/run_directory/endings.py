"""How a run ended, and why a section of its view is empty, in the words every reader uses.

The views (the learnscope tab, ``learnscope export``, the W&B page) and the end-of-fit line say
the same: how a run that did not finish ended (:func:`ending_text`), and why a run that ended
has no embedding snapshot (:func:`snapshots_missing`) or no autocorrelation analysis
(:func:`analysis_missing`), with the setting that left the section empty and the value that
would fill it, read from the callbacks' settings (the ``run`` entry) and the run's end (the
``end`` entry). Nothing here imports torch: the views read it too.

Example:
    >>> empty_sections({AUTOCORRELATION: {"lags": [5]}}, {"step": 2, "status": "finished"})
    ["No autocorrelation analysis: the run ended at step 2, before ModelAutocorrelation's \
history held 6 steps (its smallest lag, 5, plus one): lags=(1,) would analyse a fit this short"]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PROJECTOR = "EmbeddingProjector"
AUTOCORRELATION = "ModelAutocorrelation"
HELPER = "TrainingHelper"
CHARTED_LAGS = (1, 2, 5, 10, 20, 50)  # ModelAutocorrelation's default lags


def empty_sections(
    callbacks: Mapping[str, Any],
    ended: Mapping[str, Any],
    snapshots: int = 0,
    analyses: int = 0,
) -> list[str]:
    """Why the sections of the attached callbacks that got nothing are empty, one sentence each.

    What the end-of-fit line adds for a run that ended: the views say the same of each section
    (:func:`snapshots_missing`, :func:`analysis_missing`).

    Args:
        callbacks: The attached callbacks' settings, by class name (the ``run`` entry's).
        ended: What the ``end`` entry says: ``step``, ``status``, and a failed run's ``error``.
        snapshots: The embedding snapshots written.
        analyses: The autocorrelation analyses written.

    Example:
        >>> empty_sections({PROJECTOR: {}}, {"step": 3, "status": "finished"})
        ['EmbeddingProjector wrote no snapshot in this run']
        >>> empty_sections({PROJECTOR: {}}, {"step": 3, "status": "finished"}, snapshots=1)
        []
    """
    said = []
    if PROJECTOR in callbacks and not snapshots:
        said.append(snapshots_missing(callbacks[PROJECTOR], ended))
    if AUTOCORRELATION in callbacks and not analyses:
        why = analysis_missing(callbacks[AUTOCORRELATION], ended)
        said.append(f"No autocorrelation analysis: {why}")
    return said


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
