"""Training-health records: findings, histograms and rendered images."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

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
        values: 1-D values on the host (non-finite values are dropped by writers).

    Example:
        >>> Histogram("~learnscope/health/grad_norm", 3, np.array([0.1, 0.2])).values.dtype
        dtype('float64')
    """

    tag: str
    step: int
    values: np.ndarray

    def __post_init__(self) -> None:
        values = np.asarray(self.values, dtype=np.float64).reshape(-1)
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
        pixels: ``uint8`` array ``[H, W, 3]`` (RGB) or ``[H, W, 4]`` (RGBA).

    Example:
        >>> RenderedImage("chart", 0, np.zeros((4, 5, 3), np.uint8)).pixels.shape
        (4, 5, 3)
    """

    tag: str
    step: int
    pixels: np.ndarray

    def __post_init__(self) -> None:
        p = self.pixels
        if p.dtype != np.uint8 or p.ndim != 3 or p.shape[2] not in (3, 4):
            raise ValueError(f"pixels must be uint8 [H, W, 3 or 4], got {p.dtype} {p.shape}")
