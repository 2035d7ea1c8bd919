"""Collapse verdicts as objects and thresholds as a validated dataclass."""

from __future__ import annotations

import dataclasses
import inspect
import math

import pytest
import torch

from learnscope.collapse.metrics import collapse_metrics
from learnscope.collapse.verdicts import (
    CollapseThresholds,
    Verdict,
    collapse_verdicts,
    judge_collapse,
)
from learnscope.health.embeddings import collapse_findings
from learnscope.lightning_glue import TrainingHelper


def ring(n: int) -> torch.Tensor:
    forward = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
    return torch.cat([forward, forward.flip(0)], dim=1)


def test_threshold_defaults_are_judge_collapse_defaults() -> None:
    parameters = inspect.signature(judge_collapse).parameters
    defaults = {name: p.default for name, p in parameters.items() if p.default is not p.empty}
    defaults = {k: v for k, v in defaults.items() if k not in ("graph_mad", "graph_ids")}
    assert dataclasses.asdict(CollapseThresholds()) == defaults
    assert len(defaults) == 10


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"min_mad_globl": 0.1}, r"unknown collapse_thresholds \['min_mad_globl'\]; known: \["),
        ({"min_mad": math.nan}, r"min_mad must be a finite number >= 0, got nan"),
        ({"min_rank": -1.0}, r"min_rank must be a finite number >= 0, got -1.0"),
        (
            {"min_cosine_spread": "0.1"},
            r"min_cosine_spread must be a finite number >= 0, got '0.1'",
        ),
        ({"min_rayleigh_quotient": True}, r"min_rayleigh_quotient must be .* got True"),
        (
            {"max_oversmoothed_fraction": 1.5},
            r"max_oversmoothed_fraction must be .* \[0, 1\], got 1.5",
        ),
        ({"max_dead_dim_fraction": math.inf}, r"max_dead_dim_fraction must be .*, got inf"),
    ],
)
def test_thresholds_are_checked_at_construction(given: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CollapseThresholds.from_mapping(given)
    with pytest.raises(ValueError, match=message):
        TrainingHelper(collapse_thresholds=given)  # fails when made, not at the first check


def test_thresholds_from_a_mapping_keep_the_given_values() -> None:
    thresholds = CollapseThresholds.from_mapping({"min_mad_global": 0.02, "min_rank": 2})
    assert thresholds.min_mad_global == 0.02 and thresholds.min_rank == 2.0
    assert thresholds.min_mad == CollapseThresholds().min_mad
    with pytest.raises(dataclasses.FrozenInstanceError):
        thresholds.min_mad = 0.5  # type: ignore[misc]


def test_verdicts_are_objects_whose_text_is_judge_collapses() -> None:
    torch.manual_seed(0)
    n = 256
    rank_one = (torch.rand(n, 1) + 0.5) * torch.randn(1, 8)  # collapsed, smooth over any graph
    metrics = collapse_metrics(rank_one, ring(n))
    verdicts = collapse_verdicts(metrics, num_rows=n, dim=8)
    assert all(isinstance(v, Verdict) for v in verdicts)
    assert [str(v) for v in verdicts] == judge_collapse(metrics, num_rows=n, dim=8)
    by_metric = {v.metric: v for v in verdicts}
    assert {"rankme", "effective_rank", "mad_global"} <= set(by_metric)
    assert by_metric["rankme"].kind == "collapse"
    assert by_metric["rankme"].value == metrics["rankme"]
    assert by_metric["rankme"].threshold == 1.5  # max(0.1 * min(N, D), 1.5)
    assert by_metric["mad_global"].kind == "oversmoothing"
    assert {v.kind for v in verdicts if v.metric in ("mad", "rayleigh_quotient")} <= {
        "oversmoothing"
    }


def test_verdicts_judge_with_the_given_thresholds() -> None:
    metrics = {"cosine_spread": 0.3, "dead_dim_fraction": 0.5, "rayleigh_quotient": 0.5}
    loose = CollapseThresholds(max_dead_dim_fraction=0.6)
    assert collapse_verdicts(metrics, num_rows=10, dim=2, thresholds=loose) == []
    strict = CollapseThresholds(min_cosine_spread=0.5, min_rayleigh_quotient=1.0)
    verdicts = collapse_verdicts(metrics, num_rows=10, dim=2, thresholds=strict)
    assert [(v.metric, v.kind, v.threshold) for v in verdicts] == [
        ("cosine_spread", "collapse", 0.5),
        ("rayleigh_quotient", "oversmoothing", 1.0),
        ("dead_dim_fraction", "collapse", 0.25),
    ]
    assert str(verdicts[2]) == "dead_dim_fraction 0.5 > 0.25: many dimensions are (nearly) constant"


def test_per_graph_verdict_names_the_lowest_graph() -> None:
    metrics = {"mad_global": 0.5, "mad_global_min": 0.002}
    (verdict,) = collapse_verdicts(
        metrics,
        num_rows=40,
        dim=8,
        graph_mad=[0.002, 0.9, 0.6, 0.5],
        graph_ids=["a", "b", "c", "d"],
    )
    assert (verdict.metric, verdict.kind, verdict.value) == ("mad_global", "oversmoothing", 0.002)
    assert str(verdict) == (
        "mad_global < 0.01 in 1 of 4 graphs (lowest 0.002, mean over graphs 0.5; ids a): the "
        "nodes of each of these graphs all point the same way (oversmoothing: too many "
        "message-passing layers, or too little to tell nodes apart)"
    )


def test_findings_are_sorted_by_the_verdicts_kind() -> None:
    n = 200
    smooth = torch.randn(1, 8).repeat(n, 1) + 1e-9 * torch.randn(n, 8)
    findings = collapse_findings(collapse_metrics(smooth, ring(n)), "gnn", 0, num_rows=n, dim=8)
    codes = {f.code: f.message for f in findings}
    assert set(codes) == {"embedding-collapse", "oversmoothing"}
    assert "mad_global" in codes["oversmoothing"] and "rankme" in codes["embedding-collapse"]
    assert "mad_global" not in codes["embedding-collapse"]
    with pytest.raises(ValueError, match="unknown collapse_thresholds"):
        collapse_findings(collapse_metrics(smooth), "gnn", 0, num_rows=n, dim=8, min_mads=0.1)
