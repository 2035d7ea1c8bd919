"""A LightningModule with a compiled encoder is charted by the user's modules, as an eager one."""

from __future__ import annotations

from pathlib import Path

import torch

from learnscope.lightning_glue import ModelAutocorrelation, TrainingHelper
from tests.kit.models import Collect, TinyClassifier, loaders, trainer


class CompiledEncoder(TinyClassifier):
    """:class:`TinyClassifier` with a compiled encoder: parameters ``encoder._orig_mod.*``."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.compile(self.encoder, backend="aot_eager")


def learnscope_scalars(tmp_path: Path, model: TinyClassifier) -> dict[str, float]:
    """The learnscope scalars of a short fit (group depth 2), at its last step."""
    sink = Collect()
    callbacks = [
        TrainingHelper(check_every_n_steps=4, group_depth=2),
        ModelAutocorrelation(buffer_size=8, analyze_every_n_steps=8, lags=(1, 2), group_depth=2),
    ]
    train, val = loaders()
    fit = trainer(tmp_path, [sink], callbacks, max_steps=8, limit_val_batches=0)
    torch.manual_seed(1)  # the same shuffled batches in both fits
    fit.fit(model, train, val)
    found: dict[str, float] = {}
    for _, metrics in sink.metrics:
        found.update({k: v for k, v in metrics.items() if k.startswith("learnscope/")})
    return found


def test_a_compiled_encoder_is_charted_by_its_layers_as_the_eager_one(tmp_path: Path) -> None:
    torch.manual_seed(0)
    eager = TinyClassifier()
    model = CompiledEncoder()
    model.load_state_dict(
        {k.replace("encoder.", "encoder._orig_mod.", 1): v for k, v in eager.state_dict().items()}
    )
    assert next(n for n, _ in model.named_parameters()) == "encoder._orig_mod.0.weight"

    compiled = learnscope_scalars(tmp_path / "compiled", model)
    expected = learnscope_scalars(tmp_path / "eager", eager)
    assert sorted(compiled) == sorted(expected)
    for group in ("encoder.0", "encoder.2", "head"):
        assert f"learnscope/health/grad_norm/{group}" in compiled
        assert f"learnscope/autocorrelation/grads/{group}/rho1_median" in compiled
    assert "learnscope/health/head_weight_ratio/head" in compiled
    assert not [name for name in compiled if "_orig_mod" in name]
    for name in (
        "learnscope/health/grad_norm/encoder.0",
        "learnscope/health/head_weight_ratio/head",
    ):
        assert abs(compiled[name] - expected[name]) <= 1e-4 * abs(expected[name]), name
