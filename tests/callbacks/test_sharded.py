"""Sharded parameters (FSDP2, FSDP1) on 2 CPU processes with gloo, against the unsharded model.

Two launches, each checking everything in one run: ``ddp_scripts/sharded_loop.py`` trains one
model in a plain PyTorch loop under FSDP2, FSDP1 with ``use_orig_params=True`` and FSDP1 with
flat parameters (and rank 0 trains the unsharded reference); ``ddp_scripts/fit_model_parallel.py``
is a Lightning fit under ``ModelParallelStrategy`` (FSDP2), compared with the same fit on one
process here.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.kit.readers import csv_metrics

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parents[1] / "ddp_scripts"
STRATEGIES = ("fsdp2", "fsdp1_orig", "fsdp1_flat")


def launch(script: str, out: Path) -> list[dict[str, Any]]:
    """Run a 2-process script; the JSON state each rank wrote."""
    out.mkdir()
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "LEARNSCOPE_STRICT": "1"}
    env.pop("MASTER_PORT", None)
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / script), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    states = [out / f"rank{rank}.json" for rank in (0, 1)]
    assert all(state.exists() for state in states), done.stderr[-4000:]
    return [json.loads(state.read_text()) for state in states]


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return launch("sharded_loop.py", tmp_path_factory.mktemp("sharded") / "loop")


def close(a: Any, b: Any, rtol: float = 1e-5, atol: float = 1e-7) -> bool:
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return x.shape == y.shape and bool(np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_sharded_figures_equal_the_unsharded_models(
    loop: list[dict[str, Any]], strategy: str
) -> None:
    rank0, rank1 = loop[0][strategy], loop[1][strategy]
    reference = loop[0]["reference"]

    # autocorrelation: the same elements, each recorded by the rank holding it
    assert rank0["history_sharded"] and not reference["history_sharded"]
    assert rank0["slices"] == rank1["slices"] == reference["slices"]
    assert rank0["num_elements"] + rank1["num_elements"] == reference["total_elements"]
    assert 0 < rank0["num_elements"] < reference["total_elements"]
    summary = rank0["summary"]
    assert summary == rank1["summary"]  # every rank gets the same summary
    assert summary.keys() == reference["summary"].keys()
    assert "params/encoder" in summary and "grads/head" in summary
    for key, expected in reference["summary"].items():
        got = summary[key]
        assert close(got["mean_acf"], expected["mean_acf"], atol=1e-5), key
        assert close(got["rho1"], expected["rho1"], atol=1e-5), key
        assert (got["tau"] is None) == (expected["tau"] is None), key
        assert got["non_finite"] == expected["non_finite"] == 0
    assert not math.isnan(summary["grads/encoder"]["rho1"][1])

    # gradient statistics and norms: global, under the original names
    for step in (1, 39):
        got, expected = rank0[f"stats_{step}"], reference[f"stats_{step}"]
        assert got["names"] == expected["names"]
        assert not any("_fsdp" in name or "_flat_param" in name for name in got["names"])
        assert got["numels"] == expected["numels"] and got["has_grad"] == expected["has_grad"]
        assert close(got["grad_norms"], expected["grad_norms"])
        assert close(got["weight_norms"], expected["weight_norms"])
        assert got["loss"] == pytest.approx(expected["loss"], rel=1e-6)
        assert rank1[f"stats_{step}"]["grad_norms"] == got["grad_norms"]
        scalars, wanted = rank0[f"scalars_{step}"], reference[f"scalars_{step}"]
        assert scalars.keys() == wanted.keys()
        assert all(close(scalars[key], wanted[key]) for key in wanted)

    # findings name the original parameters, as the unsharded model's do
    assert rank0["findings_39"] == reference["findings_39"]
    assert [f[:2] for f in rank0["findings_39"]] == [
        ["zero-gradient", "branch"],
        ["tiny-gradient", "damped"],
    ]
    assert rank0["findings_39"][0][2].startswith("branch.weight, branch.bias got a gradient")
    nonfinite = rank0["nonfinite"][0]
    assert nonfinite[:2] == ["non-finite-gradient", "head"]
    assert "head.weight (1 values)" in nonfinite[2]
    assert rank1["nonfinite"] == rank0["nonfinite"]  # the NaN lives on one rank only
    assert rank0["unused"] == reference["unused"] == []

    # collapse metrics: activations are not sharded; rank 0's rows give the same figures
    assert rank0["collapse"].keys() == reference["collapse"].keys()
    assert all(close(rank0["collapse"][k], reference["collapse"][k]) for k in rank0["collapse"])


def test_lightning_model_parallel_fit_equals_the_unsharded_fit(tmp_path: Path) -> None:
    rank0, rank1 = launch("fit_model_parallel.py", tmp_path / "fsdp2")
    assert rank0["parameter_types"] == ["DTensor"]  # really sharded by FSDP2
    assert rank0["global_step"] == rank1["global_step"] == 8
    assert rank0["switched_off"] == rank1["switched_off"] == []

    spec = importlib.util.spec_from_file_location(
        "fit_model_parallel", SCRIPTS / "fit_model_parallel.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    (tmp_path / "single").mkdir()
    reference = script.fit(tmp_path / "single", devices=1)

    assert rank0["findings"] == reference["findings"] == [["zero-gradient", "branch"]]
    assert rank1["findings"] == []  # rank zero reports
    learnscope = ("learnscope/health/", "learnscope/autocorrelation/")
    sharded = csv_metrics(tmp_path / "fsdp2" / "csv" / "version_0" / "metrics.csv", learnscope)
    single = csv_metrics(tmp_path / "single" / "csv" / "version_0" / "metrics.csv", learnscope)
    assert sharded.keys() == single.keys()
    keys = {key for _, key in single}
    assert {
        "learnscope/health/grad_norm/encoder",
        "learnscope/health/loss",
        "learnscope/health/weight_norm/head",
    } <= keys
    assert "learnscope/autocorrelation/params/encoder/lag_1" in keys
    assert {step for step, _ in single} >= {0, 2, 4, 6, 8}  # checks at 0, 2, 4, 6; analyses at 4, 8
    assert "learnscope/health/collapse/encoder/rankme" in keys
    for entry, value in single.items():
        if entry[1].startswith("learnscope/health/collapse/"):
            continue  # rank 0's half of the batch, as under DDP (the plain loop compares them)
        assert sharded[entry] == pytest.approx(value, rel=1e-4, abs=1e-6, nan_ok=True), entry
    logged = (tmp_path / "fsdp2" / "log_rank1.txt").read_text()
    assert "learnscope" not in logged  # other ranks say nothing


# --- the shard map, without processes -------------------------------------------------------


@pytest.mark.parametrize(
    ("local_shape", "offset"),
    [
        ((2, 6, 5), (2, 0, 0)),
        ((4, 3, 5), (0, 3, 0)),
        ((4, 6, 2), (0, 0, 3)),
        ((1, 2, 5), (3, 4, 0)),
    ],
)
def test_a_block_of_a_tensor_maps_to_runs_of_flat_indices(
    local_shape: tuple[int, ...], offset: tuple[int, ...]
) -> None:
    import torch

    from learnscope.model.parameter_shards import _box_runs

    shape = (4, 6, 5)
    whole = torch.arange(120).reshape(shape)
    block = whole[tuple(slice(o, o + n) for o, n in zip(offset, local_shape, strict=True))]
    local = block.reshape(-1)
    runs = _box_runs(shape, local_shape, offset)
    mapped = torch.full((120,), -1)
    for global_start, local_start, length in runs.tolist():
        mapped[global_start : global_start + length] = local[local_start : local_start + length]
    held = mapped >= 0
    assert torch.equal(mapped[held], torch.arange(120)[held])  # every run lands where it belongs
    assert int(held.sum()) == local.numel()  # and the runs cover the block exactly


def test_pieces_of_a_slice_are_the_local_runs_it_crosses() -> None:
    import numpy as np

    from learnscope.model.parameter_shards import ParameterShard

    runs = np.array([[10, 0, 5], [30, 5, 5]], dtype=np.int64)  # elements 10-14 and 30-34
    shard = ParameterShard("w", (40,), None, 0, 10, runs, True)  # type: ignore[arg-type]
    assert shard.pieces(12, 32) == [(12, 2, 3), (30, 5, 2)]
    assert shard.pieces(0, 10) == [] and shard.pieces(15, 30) == []


def test_original_names_and_a_clear_error_for_fsdp1_parameters_without_the_model() -> None:
    import torch

    from learnscope.model.parameter_names import clean_parameter_name
    from learnscope.model.parameter_shards import is_sharded, parameter_shards

    assert clean_parameter_name("_fsdp_wrapped_module.a._checkpoint_wrapped_module.w") == "a.w"
    model = torch.nn.Linear(2, 2)
    assert not is_sharded(model) and [s.name for s in parameter_shards(model)] == [
        "weight",
        "bias",
    ]
    weight = torch.nn.Parameter(torch.ones(3))
    with pytest.raises(ValueError, match="pass the model itself"):
        parameter_shards([("_fsdp_wrapped_module.weight", weight)])
