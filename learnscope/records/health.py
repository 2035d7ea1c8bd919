"""Training-health records: findings, histograms and rendered images."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import numpy as np

from learnscope.finding_codes import FINDING_ADVICE, FINDING_CODES, finding_life
from learnscope.records import checks

Severity = Literal["info", "warning", "error"]


@dataclass(frozen=True)
class Finding:
    """Something that is off in a training run, said in words, with what it concerns and its life.

    A finding has a life over the checks of a run: when it was first seen (``first_step``), when
    last (``step``), and, once a check that judges it no longer finds it, the step of that check
    (``resolved_step``; ``None`` while it still holds). What to try about it comes from one table
    (:data:`~learnscope.finding_codes.FINDING_ADVICE`).

    Args:
        code: One of :data:`FINDING_CODES`, such as ``"unused-parameter"``.
        subject: What it concerns: a parameter or module name, an input key.
        message: One sentence on what was seen.
        step: The trainer's global step when it was (last) found.
        severity: ``"info"``, ``"warning"`` or ``"error"``.
        first_step: When it was first found (default: ``step``).
        resolved_step: The first check after ``step`` that judged it and did not find it;
            ``None`` while it holds.

    Raises:
        ValueError: An unknown code or severity, or steps out of order.

    Example:
        >>> Finding("zero-gradient", "head.weight", "gradient is exactly zero", 10).severity
        'warning'
        >>> Finding("embedding-collapse", "encoder", "low rank", 0, resolved_step=50).life
        'seen at step 0 only; healthy at every check since step 50'
    """

    code: str
    subject: str
    message: str
    step: int
    severity: Severity = "warning"
    first_step: int | None = None
    resolved_step: int | None = None

    def __post_init__(self) -> None:
        if self.code not in FINDING_CODES:
            raise ValueError(f"unknown finding code {self.code!r}; known: {FINDING_CODES}")
        if self.severity not in ("info", "warning", "error"):
            raise ValueError(f"severity must be info, warning or error, got {self.severity!r}")
        if self.first_step is None:
            object.__setattr__(self, "first_step", self.step)
        if self.first_step > self.step:
            raise ValueError(f"first_step {self.first_step} is after step {self.step}")
        if self.resolved_step is not None and self.resolved_step <= self.step:
            raise ValueError(
                f"resolved_step {self.resolved_step} must come after the step it was last seen, "
                f"{self.step}"
            )

    @property
    def identity(self) -> tuple[str, str]:
        """What makes two findings the same one, ``(code, subject)``: a table holds one of each.

        Example:
            >>> Finding("zero-gradient", "head.bias", "is zero", 3).identity
            ('zero-gradient', 'head.bias')
        """
        return (self.code, self.subject)

    @property
    def first_seen(self) -> int:
        """The step it was first found at (``first_step``, which defaults to ``step``).

        Example:
            >>> Finding("zero-gradient", "head", "zero", 9, first_step=3).first_seen
            3
        """
        return self.step if self.first_step is None else self.first_step

    @property
    def holds(self) -> bool:
        """Whether it still holds: no check since it was last seen judged it healthy.

        Example:
            >>> Finding("zero-gradient", "head", "zero", 3, resolved_step=50).holds
            False
        """
        return self.resolved_step is None

    @property
    def advice(self) -> str:
        """What to try, from the one table of advice per code.

        Example:
            >>> Finding("non-finite-loss", "loss", "loss is nan", 3).advice[:20]
            'Check the data for N'
        """
        return FINDING_ADVICE[self.code]

    @property
    def life(self) -> str:
        """When it was seen and whether it still holds, in words (as every view says it).

        Example:
            >>> Finding("tiny-gradient", "encoder", "tiny", 300, first_step=50).life
            'found at steps 50-300; still holds'
        """
        return finding_life(self.first_seen, self.step, self.resolved_step)

    def seen_again(self, said: Finding, step: int) -> Finding:
        """Found again at ``step``, said as ``said``: it holds, since when this one was first seen.

        Example:
            >>> first = Finding("zero-gradient", "head", "zero", 3, resolved_step=50)
            >>> again = first.seen_again(Finding("zero-gradient", "head", "zero again", 90), 100)
            >>> again.message, again.life
            ('zero again', 'found at steps 3-100; still holds')
        """
        return dataclasses.replace(said, step=step, first_step=self.first_seen, resolved_step=None)

    def resolved_at(self, step: int) -> Finding:
        """This finding, no longer found by the check at ``step``.

        Example:
            >>> Finding("zero-gradient", "head", "zero", 3).resolved_at(50).holds
            False
        """
        return dataclasses.replace(self, resolved_step=step)


@dataclass(frozen=True, eq=False)
class Histogram:
    """Values whose distribution a dashboard shows as a histogram, such as gradient norms.

    Args:
        tag: Name in the dashboards, such as ``"~learnscope/health/grad_norm"``.
        step: The trainer's global step.
        values: Real numbers on the host: a numpy array (of any shape, read flat), a CPU
            tensor or a list of numbers; kept as a 1-D float64 array. Non-finite values are
            kept here and dropped by the writers (:meth:`finite_values`); no values at all is
            a histogram the writers skip.

    Raises:
        TypeError: If the tag is no text, the step no int, or the values are booleans, text or
            objects.
        ValueError: If the tag is empty, the step negative, or the values complex.

    Example:
        >>> Histogram("~learnscope/health/grad_norm", 3, np.array([0.1, 0.2])).values.dtype
        dtype('float64')
        >>> Histogram("norms", 3, [1, 2, 4]).values.tolist()
        [1.0, 2.0, 4.0]
    """

    tag: str
    step: int
    values: np.ndarray

    def __post_init__(self) -> None:
        checks.name(self.tag, "Histogram tag")
        object.__setattr__(self, "step", checks.step(self.step, f"step of Histogram {self.tag!r}"))
        values = checks.real_array(self.values, f"values of Histogram {self.tag!r}").reshape(-1)
        object.__setattr__(self, "values", values)

    def finite_values(self) -> np.ndarray:
        """The finite values only."""
        return self.values[np.isfinite(self.values)]


@dataclass(frozen=True, eq=False)
class RenderedImage:
    """A picture learnscope drew (a chart, a scatter plot), shown in image panels.

    Args:
        tag: Name in the dashboards, such as ``"~learnscope/autocorrelation/acf/params"``.
        step: The trainer's global step.
        pixels: A numpy ``uint8`` array ``[H, W, 3]`` (RGB) or ``[H, W, 4]`` (RGBA), with
            ``H`` and ``W`` at least 1. Nothing else is converted: other integers or floats
            could mean 0-255 or 0-1 (``np.asarray(x, np.uint8)`` of 0-255 values makes one).

    Raises:
        TypeError: If the tag is no text, the step no int, or the pixels are no numpy array
            or not ``uint8``.
        ValueError: If the tag is empty, the step negative, or the pixels' shape is not
            ``[H >= 1, W >= 1, 3 or 4]``.

    Example:
        >>> RenderedImage("chart", 0, np.zeros((4, 5, 3), np.uint8)).pixels.shape
        (4, 5, 3)
        >>> RenderedImage("chart", 0, np.zeros((0, 0, 3), np.uint8))
        Traceback (most recent call last):
        ...
        ValueError: pixels of RenderedImage 'chart' must be [H, W, 3 or 4] ... got (0, 0, 3)
    """

    tag: str
    step: int
    pixels: np.ndarray

    def __post_init__(self) -> None:
        checks.name(self.tag, "RenderedImage tag")
        what = f"RenderedImage {self.tag!r}"
        object.__setattr__(self, "step", checks.step(self.step, f"step of {what}"))
        pixels = self.pixels
        if not isinstance(pixels, np.ndarray):
            raise TypeError(
                f"pixels of {what} must be a numpy uint8 array [H, W, 3 or 4], got "
                f"{type(pixels).__name__}; for 0-255 values: np.asarray(pixels, np.uint8)"
            )
        if pixels.dtype != np.uint8:
            raise TypeError(
                f"pixels of {what} must be uint8 (0-255), got {pixels.dtype}; floats in [0, 1]: "
                "(pixels * 255).round().astype(np.uint8)"
            )
        shape = pixels.shape
        if len(shape) != 3 or shape[2] not in (3, 4) or min(shape[:2]) < 1:
            raise ValueError(
                f"pixels of {what} must be [H, W, 3 or 4] with H and W at least 1, got {shape}"
            )
