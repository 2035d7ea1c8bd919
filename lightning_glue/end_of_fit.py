"""The end-of-fit line: what learnscope wrote in a fit, where it went, and how to open it.

A closed :class:`~learnscope.lightning_glue.session.WriterSession` hands what it knows of the fit
(:class:`FitWritten`: the records made, what each logger's writers wrote, the findings, how the
run ended) to :func:`end_of_fit_line`, which says it in one line: the places that got every
record lead; a place that did not says what it got, what it did not and why; a place that got
nothing is named only among those that got nothing; a finished run's line names a few findings and
why a section of an attached callback is empty (:mod:`learnscope.run_directory.endings`); a failed
run's line says how it failed and what was written before.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from learnscope.plugins import LoggerWriters, Writer
from learnscope.plugins.pipeline.fanout import Outcome, takes
from learnscope.plugins.pipeline.loggers import logger_place
from learnscope.records import CallbackSettings, Finding, RunEnd
from learnscope.run_directory.endings import empty_sections


@dataclasses.dataclass(frozen=True)
class FitWritten:
    """What a closed writer session knows of its fit, for the end-of-fit line.

    Attributes:
        loggers: The trainer's loggers.
        made: The writers made for each logger that got some.
        outcomes: What each writer wrote, by the writer's ``id``.
        written: Records made in the fit: ``write_embedding``, ``write_autocorrelation``,
            ``findings``.
        findings: The fit's findings.
        end: How the run ended (``None`` if it did not end).
        callbacks: The learnscope callbacks of the fit, with their settings.
    """

    loggers: Sequence[Any]
    made: Sequence[LoggerWriters]
    outcomes: Mapping[int, Outcome]
    written: Mapping[str, int]
    findings: Sequence[Finding]
    end: RunEnd | None
    callbacks: Sequence[CallbackSettings]


def end_of_fit_line(fit: FitWritten, stage: str = "fit") -> str:
    """One line on what was written in ``fit``, where, and the commands that open it.

    Args:
        fit: What the closed session knows of the fit.
        stage: The trainer call (``"fit"``, ``"validate"``...).

    Example:
        >>> class CSVLogger:
        ...     save_dir = "logs"
        >>> counts = {"write_embedding": 2, "write_autocorrelation": 0, "findings": 0}
        >>> print(end_of_fit_line(FitWritten([CSVLogger()], [], {}, counts, [], RunEnd(5), [])))
        learnscope wrote 2 embedding snapshots, 0 autocorrelation analyses and 0 findings in \
this fit, to CSVLogger (logs)
    """
    written = fit.written
    made = (written["write_embedding"], written["write_autocorrelation"], written["findings"])
    places, unwritten = _places(fit)
    whole = [place for place in places if place.received is None]
    short = [place for place in places if place.received is not None]
    # the counts lead with the places that got every record; else with one that got some
    named, rest = (whole, short) if whole or not short else (short[:1], short[1:])
    counts = _counts(named[0].received or made if named else (0, 0, 0))
    commands = [place.opens for place in places if place.opens]
    end = fit.end
    if end is not None and end.error is not None:
        where = ", ".join(place.name + place.lost for place in named)
        where += "".join(f"; {_counts(p.received)} in {p.name}{p.lost}" for p in rest)
        ending = ", its run record ending 'failed'" if all(p.ended for p in places) else ""
        line = (
            f"learnscope: {_what_failed(stage)} failed at step {end.step} "
            f"({end.error.text(True)}); "
            f"what learnscope wrote before it ({counts})"
        ) + (f" is in {where}{ending}" if places else "")
        return line + ("; nothing to " + ", ".join(unwritten) if unwritten else "")
    interrupted = end is not None and end.status == "interrupted"
    line = f"learnscope wrote {counts} in this {stage}" + (" (interrupted)" if interrupted else "")
    if named:
        line += ", to " + ", ".join(place.name + place.lost for place in named)
    line += "".join(f"; {_counts(p.received)} to {p.name}{p.lost}" for p in rest)
    if unwritten:
        line += "; nothing to " + ", ".join(unwritten)
    if fit.findings:
        line += ". " + _named_findings(fit.findings)
    if end is not None and not interrupted and any(made.writers for made in fit.made):
        line += "".join(f". {why}" for why in _empty_sections(fit, end))
    if commands:
        line += ". Open it with: " + "; ".join(commands)
    return line


def _places(fit: FitWritten) -> tuple[list[Reached], list[str]]:
    """Where the records went, and the loggers that got none (each with the reason).

    Each logger's dashboard says where its records went and how to open them
    (:meth:`LoggerWriters.place`). A place is named only when its writers wrote there: a
    logger whose writers wrote no record (an object store that refused them all, a disk
    below the free-space reserve) or whose dashboard says nothing is written there (a
    disabled W&B run) is among the unwritten, with what was not written and why; one that
    did not get every record says what it got, what it did not and why (:class:`Reached`).
    """
    made = {id(m.logger): m for m in fit.made}
    places, unwritten = [], []
    for logger in fit.loggers:
        name = type(logger).__name__
        mine = made.get(id(logger))
        outcomes = [] if mine is None else _outcomes_of(fit, mine)
        lost = _lost(outcomes)
        if mine is not None and mine.unwritable is not None:
            unwritten.append(f"{name} ({mine.unwritable})")
            continue
        if lost and not any(sum(outcome.written.values()) for _, outcome in outcomes):
            unwritten.append(f"{name} ({lost})")
            continue
        place = logger_place(logger) if mine is None else mine.place()
        if not place.written:
            unwritten.append(place.name)
            continue
        received = _received(outcomes) if lost else None
        ended = all(o.written["write_run_end"] for w, o in outcomes if takes(w, "write_run_end"))
        places.append(
            Reached(place.name, received, f" ({lost})" if lost else "", place.opens, ended)
        )
    return places, unwritten


def _outcomes_of(fit: FitWritten, made: LoggerWriters) -> list[tuple[Writer, Outcome]]:
    """The writers of one logger with what each wrote (after :meth:`close`)."""
    return [(w, fit.outcomes[id(w)]) for w in made.writers if id(w) in fit.outcomes]


def _empty_sections(fit: FitWritten, end: RunEnd) -> list[str]:
    """Why the sections of attached callbacks that got nothing are empty, as the views say.

    Example:
        >>> callbacks = [CallbackSettings("ModelAutocorrelation", {"lags": [1, 2]})]
        >>> counts = {"write_embedding": 0, "write_autocorrelation": 0, "findings": 0}
        >>> fit = FitWritten([], [], {}, counts, [], RunEnd(1), callbacks)
        >>> _empty_sections(fit, fit.end)  # doctest: +ELLIPSIS
        ["No autocorrelation analysis: the run ended at step 1, before ..."]
    """
    return empty_sections(
        {callback.name: callback.settings for callback in fit.callbacks},
        {"step": end.step, "status": end.status},
        fit.written["write_embedding"],
        fit.written["write_autocorrelation"],
    )


def _what_failed(stage: str) -> str:
    """The trainer call that failed, in words.

    Example:
        >>> _what_failed("fit"), _what_failed("validate")
        ('the fit', 'trainer.validate()')
    """
    return "the fit" if stage == "fit" else f"trainer.{stage}()"


def _named_findings(findings: Sequence[Finding], most: int = 3) -> str:
    """The run's headline: the findings that still hold, then those no longer seen, a few named.

    Example:
        >>> found = [Finding("zero-gradient", "branch", "zero", 300, first_step=50)] * 2
        >>> found.append(Finding("embedding-collapse", "encoder", "flat", 0, resolved_step=50))
        >>> print(_named_findings(found, most=1))
        Findings: zero-gradient on branch (warning, found at steps 50-300; still holds) and 1 \
more; no longer seen: embedding-collapse on encoder (seen at step 0 only; healthy at every check \
since step 50)
        >>> print(_named_findings(found[2:]))
        No finding still holds; no longer seen: embedding-collapse on encoder (seen at step 0 \
only; healthy at every check since step 50)
    """

    def named(chosen: Sequence[Finding], words: Callable[[Finding], str]) -> str:
        listed = ", ".join(f"{f.code} on {f.subject} ({words(f)})" for f in chosen[:most])
        return listed + (f" and {len(chosen) - most} more" if len(chosen) > most else "")

    holding = [f for f in findings if f.holds]
    resolved = [f for f in findings if not f.holds]
    line = "Findings: " + named(holding, lambda f: f"{f.severity}, {f.life}")
    if not holding:
        line = "No finding still holds"
    if resolved:
        line += "; no longer seen: " + named(resolved, lambda f: f.life)
    return line


def _count(number: int, thing: str) -> str:
    """``number`` things, in words.

    Example:
        >>> _count(1, "finding"), _count(0, "finding"), _count(2, "autocorrelation analysis")
        ('1 finding', '0 findings', '2 autocorrelation analyses')
    """
    if number == 1:
        return f"1 {thing}"
    return f"{number} {thing[:-2] + 'es' if thing.endswith('is') else thing + 's'}"


@dataclasses.dataclass(frozen=True)
class Reached:
    """What reached one logger's place, for the end-of-fit line.

    Attributes:
        name: The place in words (a run directory, a W&B run with its address).
        received: ``(snapshots, analyses, findings)`` it got, when it did not get every
            record; ``None`` when it got all of them.
        lost: `` (<what> not written: <why>)``, or ``""``.
        opens: The commands that open it, if any.
        ended: Its run record got the run's end (or it keeps none).
    """

    name: str
    received: tuple[int, int, int] | None
    lost: str
    opens: str | None
    ended: bool


def _lost(outcomes: Sequence[tuple[Writer, Outcome]]) -> str:
    """What the writers of one place did not write, and why (the first reason); ``""`` if none.

    A record counts once for the place, however many of its writers did not write it.

    Example:
        >>> outcome = Outcome()
        >>> for method in ("write_embedding", "write_scalars", "write_image"):
        ...     outcome.not_written(method, "OSError: 503 SlowDown")
        >>> _lost([(Writer(), outcome)])
        '1 embedding snapshot and 2 other records not written: OSError: 503 SlowDown'
        >>> _lost([])
        ''
    """
    lost: collections.Counter[str] = collections.Counter()
    reason = ""
    for _, outcome in outcomes:
        for method, count in outcome.lost.items():
            lost[method] = max(lost[method], count)
        reason = reason or outcome.reason
    if not lost:
        return ""
    snapshots, analyses = lost.pop("write_embedding", 0), lost.pop("write_autocorrelation", 0)
    parts = [_count(snapshots, "embedding snapshot")] if snapshots else []
    parts += [_count(analyses, "autocorrelation analysis")] if analyses else []
    others = sum(lost.values())
    if others:
        parts.append(_count(others, "other record" if parts else "record"))
    said = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    return f"{said} not written: {reason}"


def _received(outcomes: Sequence[tuple[Writer, Outcome]]) -> tuple[int, int, int]:
    """``(snapshots, analyses, findings)`` a place got: the least any of its writers wrote.

    Example:
        >>> outcome = Outcome()
        >>> outcome.written["write_autocorrelation"] = 2
        >>> _received([(Writer(), outcome)])  # a Writer that shows nothing keeps nothing
        (0, 0, 0)
    """

    def least(method: str, value: Callable[[Outcome], int]) -> int:
        return min((value(o) for w, o in outcomes if takes(w, method)), default=0)

    return (
        least("write_embedding", lambda o: o.written["write_embedding"]),
        least("write_autocorrelation", lambda o: o.written["write_autocorrelation"]),
        least("write_findings", lambda o: o.findings),
    )


def _counts(counts: tuple[int, int, int]) -> str:
    """Snapshots, analyses and findings, in words.

    Example:
        >>> _counts((1, 2, 0))
        '1 embedding snapshot, 2 autocorrelation analyses and 0 findings'
    """
    snapshots, analyses, findings = counts
    return (
        f"{_count(snapshots, 'embedding snapshot')}, "
        f"{_count(analyses, 'autocorrelation analysis')} and {_count(findings, 'finding')}"
    )
