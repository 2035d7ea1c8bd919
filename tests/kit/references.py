"""Independent float64 numpy references of the collapse metrics, for the tests to check against."""

from __future__ import annotations

import numpy as np


def rankme(rows: np.ndarray) -> float:
    """RankMe: exp(entropy) of the normalised singular values of the rows (float64)."""
    z = rows.astype(np.float64)
    s = np.linalg.svd(z, compute_uv=False)
    s = np.where(s > max(z.shape) * np.finfo(np.float64).eps * s[0], s, 0.0)
    if s.sum() == 0:
        return 1.0
    p = s / s.sum() + 1e-7
    return float(np.exp(-(p * np.log(p)).sum()))


def effective_rank(rows: np.ndarray) -> float:
    """exp(entropy) of the normalised singular values of the column-centred rows (float64)."""
    z = rows.astype(np.float64)
    tol = max(z.shape) * np.finfo(np.float64).eps * np.linalg.svd(z, compute_uv=False)[0]
    s = np.linalg.svd(z - z.mean(axis=0), compute_uv=False)
    s = np.where(s > tol, s, 0.0)
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
