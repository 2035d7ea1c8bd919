"""Compiled models cost what eager ones do: learnscope adds no graph to a ``torch.compile`` fit.

Every fit here runs twice or three times from one seed: without learnscope (the reference
number of graphs and the reference weights), with the three callbacks, and in eager mode with
them (the reference of what learnscope writes). Graphs are counted with torch's own counter
(``torch._dynamo.utils.counters["stats"]["unique_graphs"]``), so every recompilation shows.

Each mode runs with ``aot_eager`` (it traces, guards and recompiles exactly as Inductor does,
in seconds) and with the default backend, Inductor (about 10 s a graph on 2 cold cores).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch._dynamo
from lightning.pytorch.loggers import TensorBoardLogger
from torch import nn
from torch._dynamo.utils import counters

from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from tests.kit.models import TinyClassifier, blobs, loaders, trainer
from tests.kit.readers import ProjectorReader, read_events


class Quiet(TinyClassifier):
    """:class:`TinyClassifier` without ``self.log`` (it stops Dynamo, so ``fullgraph=True``)."""

    def __init__(self, compile_encoder: Callable[[nn.Module], nn.Module] | None = None) -> None:
        super().__init__()
        if compile_encoder is not None:
            self.encoder = compile_encoder(self.encoder)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)


def build(mode: str, backend: str) -> tuple[Quiet, nn.Module]:
    """The module to inspect afterwards, and what ``fit`` is given, for one compile mode."""
    if mode == "eager":
        model = Quiet()
        return model, model
    if mode == "compiled encoder":
        model = Quiet(lambda encoder: torch.compile(encoder, backend=backend))
        return model, model
    model = Quiet()
    return model, torch.compile(model, backend=backend, fullgraph=mode == "fullgraph")


def callbacks() -> list[Any]:
    return [
        EmbeddingProjector("encoder"),
        ModelAutocorrelation(buffer_size=16, analyze_every_n_steps=12, lags=(1, 2)),
        TrainingHelper(check_every_n_steps=2),
    ]


def fit(tmp_path: Path, mode: str, backend: str, learnscope: bool) -> dict[str, Any]:
    """One fit of 4 epochs (24 steps) from seed 0: graphs, steps, weights and the run dir."""
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model, given = build(mode, backend)
    logger = TensorBoardLogger(str(tmp_path), name=mode.replace(" ", "_"))
    run = trainer(tmp_path, logger, callbacks() if learnscope else [], max_epochs=4)
    run.fit(given, *loaders())
    encoder = model.encoder._orig_mod if mode == "compiled encoder" else model.encoder
    return {
        "graphs": counters["stats"]["unique_graphs"],
        "steps": run.global_step,
        "weights": {k: v.clone() for k, v in model.state_dict().items()},
        "encoder": encoder,
        "run_dir": Path(logger.log_dir),
    }


def health_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    events = read_events(run_dir)
    return {
        tag: [(e.step, e.value) for e in events.Scalars(tag)]
        for tag in events.Tags()["scalars"]
        if tag.startswith("~learnscope/health/collapse/")
    }


@pytest.fixture(scope="module")
def eager(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same fit in eager mode with the three callbacks: what learnscope should write."""
    return fit(tmp_path_factory.mktemp("eager"), "eager", "eager", learnscope=True)


def check_like_eager(
    tmp_path: Path, mode: str, backend: str, eager: dict[str, Any], tolerance: float
) -> None:
    bare = fit(tmp_path / "bare", mode, backend, learnscope=False)
    seen = fit(tmp_path / "seen", mode, backend, learnscope=True)

    assert bare["graphs"] >= 1  # the fit was compiled
    assert seen["graphs"] == bare["graphs"]  # learnscope added no graph, no recompilation
    assert seen["steps"] == bare["steps"] == 24
    for name, value in bare["weights"].items():  # training is unchanged by learnscope
        assert torch.equal(seen["weights"][name], value), name

    # What learnscope wrote equals what it writes for the same fit in eager mode.
    reader = ProjectorReader(seen["run_dir"].parent)
    (run,) = reader.runs()
    names = reader.names(run)
    assert names == [f"encoder/validate/step_{step:09d}" for step in (6, 12, 18, 24)]
    with torch.no_grad():
        expected = seen["encoder"](blobs(48, seed=1).tensors[0]).numpy()
    np.testing.assert_allclose(reader.tensor(run, names[-1]), expected, atol=tolerance)
    eager_reader = ProjectorReader(eager["run_dir"].parent)
    (eager_run,) = eager_reader.runs()
    assert eager_reader.names(eager_run) == names
    for name in names:
        np.testing.assert_allclose(
            reader.tensor(run, name), eager_reader.tensor(eager_run, name), atol=tolerance
        )
    compiled, reference = health_scalars(seen["run_dir"]), health_scalars(eager["run_dir"])
    assert sorted(compiled) == sorted(reference) and reference
    for tag, points in reference.items():
        # every check step had its collapse rows: every second step, and the fit's last
        assert [step for step, _ in points] == [*range(0, 24, 2), 23]
        assert [step for step, _ in compiled[tag]] == [step for step, _ in points]
        np.testing.assert_allclose(
            [value for _, value in compiled[tag]],
            [value for _, value in points],
            rtol=1e-4,
            atol=tolerance,
            err_msg=tag,
        )


MODES = ["compiled model", "fullgraph", "compiled encoder"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_learnscope_adds_no_graph_to_a_compiled_fit(
    tmp_path: Path, mode: str, eager: dict[str, Any]
) -> None:
    check_like_eager(tmp_path, mode, "aot_eager", eager, tolerance=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_learnscope_adds_no_graph_with_the_default_backend(
    tmp_path: Path, mode: str, eager: dict[str, Any]
) -> None:
    check_like_eager(tmp_path, mode, "inductor", eager, tolerance=1e-5)
