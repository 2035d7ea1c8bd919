"""The naive autocorrelation callback that ModelAutocorrelation replaces (a benchmark baseline).

Each step it copies a 5% random sample of every parameter and gradient to the host (a gather and
a device-to-host copy per tensor, each a host synchronisation on a GPU), and every 50 steps it runs
a 2-D ``scipy.signal.correlate`` over the (steps x elements) window, which mixes elements and is
not even an autocorrelation. Used by ``benchmarks/overhead.py`` as ``naive_autocorrelation``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from lightning.pytorch.callbacks import Callback


class NaiveAutocorrelation(Callback):
    """Host copies of a random sample of every tensor each step; 2-D correlation every n steps."""

    def __init__(self, fraction: float = 0.05, every_n_steps: int = 50, seed: int = 0) -> None:
        self.fraction = fraction
        self.every_n_steps = every_n_steps
        self.seed = seed
        self.indices: dict[str, torch.Tensor] = {}
        self.rows: dict[str, list[np.ndarray]] = {}
        self.results: dict[str, float] = {}

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        generator = torch.Generator().manual_seed(self.seed)
        for name, p in pl_module.named_parameters():
            count = max(1, int(self.fraction * p.numel()))
            index = torch.randperm(p.numel(), generator=generator)[:count]
            self.indices[name] = index.to(p.device)
            self.rows[name] = []

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        from scipy import signal

        for name, p in pl_module.named_parameters():
            index = self.indices[name]
            values = p.detach().reshape(-1)[index].cpu().numpy()
            grads = p.grad.reshape(-1)[index].cpu().numpy() if p.grad is not None else values * 0
            self.rows[name].append(np.concatenate([values, grads]))
        if (trainer.global_step + 1) % self.every_n_steps == 0:
            for name, rows in self.rows.items():
                window = np.stack(rows[-self.every_n_steps :])
                window = (window - window.min()) / (np.ptp(window) + 1e-12)  # sign lost
                correlation = signal.correlate(window, window, mode="same")
                self.results[name] = float(correlation.max())
                self.rows[name] = []
