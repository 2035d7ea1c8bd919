"""Training-health records: findings, histograms and rendered images."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from learnscope.records import checks

FINDING_CODES = (
    "unused-parameter",
    "non-finite-gradient",
    "zero-gradient",
    "tiny-gradient",
    "structural-zero-gradient",
    "embedding-collapse",
    "oversmoothing",
    "head-dominates-encoder",
    "input-range",
    "non-finite-loss",
    "non-finite-output",
)

Severity = Literal["info", "warning", "error"]


@dataclass(frozen=True)
class Finding:
    """Something that is off in a training run, said in words, with what it concerns.

    Args:
        code: One of :data:`FINDING_CODES`, such as ``"unused-parameter"``.
        subject: What it concerns: a parameter or module name, an input key.
        message: One sentence a user can act on.
        step: The trainer's global step when it was found.
        severity: ``"info"``, ``"warning"`` or ``"error"``.

    Example:
        >>> Finding("zero-gradient", "head.weight", "gradient is exactly zero", 10).severity
        'warning'
    """

    code: str
    subject: str
    message: str
    step: int
    severity: Severity = "warning"

    def __post_init__(self) -> None:
        if self.code not in FINDING_CODES:
            raise ValueError(f"unknown finding code {self.code!r}; known: {FINDING_CODES}")
        if self.severity not in ("info", "warning", "error"):
            raise ValueError(f"severity must be info, warning or error, got {self.severity!r}")

    @property
    def identity(self) -> tuple[str, str]:
        """What makes two findings the same one, ``(code, subject)``: a table holds one of each.

        Example:
            >>> Finding("zero-gradient", "head.bias", "is zero", 3).identity
            ('zero-gradient', 'head.bias')
        """
        return (self.code, self.subject)


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
