"""Independent float64 numpy references of the collapse metrics, for the tests to check against."""

from __future__ import annotations

import numpy as np


def rankme(rows: np.ndarray) -> float:
    """RankMe: exp(entropy) of the normalised singular values of the rows (float64)."""
    z = rows.astype(np.float64)
    return _entropy_rank(np.linalg.svd(z, compute_uv=False), _zero_cut(z))


def effective_rank(rows: np.ndarray) -> float:
    """exp(entropy) of the normalised singular values of the column-centred rows (float64)."""
    z = rows.astype(np.float64)
    return _entropy_rank(np.linalg.svd(z - z.mean(axis=0), compute_uv=False), _zero_cut(z))


def _zero_cut(z: np.ndarray) -> float:
    """Singular values at or below this count as zero: max(N, D) * eps * the largest of ``z``."""
    return max(z.shape) * np.finfo(np.float64).eps * np.linalg.svd(z, compute_uv=False)[0]


def _entropy_rank(s: np.ndarray, cut: float) -> float:
    """exp(entropy) of the singular values ``s`` above ``cut``, normalised (1.0 when none)."""
    s = np.where(s > cut, s, 0.0)
    if s.sum() == 0:
        return 1.0
    p = s / s.sum() + 1e-7
    return float(np.exp(-(p * np.log(p)).sum()))


def cosine_spread(rows: np.ndarray) -> float:
    """One minus the squared length of the mean l2-normalised row (float64)."""
    z = rows.astype(np.float64)
    norms = np.linalg.norm(z, axis=1, keepdims=True)
    unit = np.divide(z, norms, out=np.zeros_like(z), where=norms > 0)
    return float(1 - np.square(unit.mean(axis=0)).sum())
