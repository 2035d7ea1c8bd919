"""The training-health core: gradient statistics, findings, rate limits, tracer, input checks."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from learnscope.collapse import collapse_metrics
from learnscope.health import (
    CoordinateRangeCheck,
    FindingLog,
    NonFiniteOutputTracer,
    collapse_findings,
    gradient_findings,
    gradient_statistics,
    head_findings,
    health_scalars,
    unused_parameter_findings,
    weight_rms,
)
from learnscope.records import Finding


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8))
        self.head = nn.Linear(8, 2)
        self.spare = nn.Linear(8, 2)
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x)) * self.scale


def backward(model: nn.Module, seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    loss = model(torch.randn(16, 4)).pow(2).mean()
    loss.backward()
    return loss


def test_statistics_match_per_parameter_norms() -> None:
    torch.manual_seed(0)
    model = Net()
    loss = backward(model)
    stats = gradient_statistics(model.named_parameters(), loss)
    params = dict(model.named_parameters())
    assert stats.names == tuple(params)
    for i, p in enumerate(params.values()):
        assert stats.weight_norms[i] == pytest.approx(p.detach().norm().item(), rel=1e-6)
        assert stats.numels[i] == p.numel() and stats.ndims[i] == p.ndim
        if p.grad is None:
            assert not stats.has_grad[i] and math.isnan(stats.grad_norms[i])
        else:
            assert stats.grad_norms[i] == pytest.approx(p.grad.norm().item(), rel=1e-6)
    assert stats.has_grad.tolist() == [p.grad is not None for p in params.values()]
    assert stats.loss == pytest.approx(loss.item())
    assert stats.nonfinite_counts == {}


def test_frozen_parameters_are_left_out_and_half_precision_is_measured_in_float32() -> None:
    model = Net()
    model.spare.requires_grad_(False)
    model.head.half()
    stats = gradient_statistics(model.named_parameters())
    assert "spare.weight" not in stats.names
    index = stats.names.index("head.weight")
    assert stats.weight_norms[index] == pytest.approx(model.head.weight.float().norm().item())
    with pytest.raises(ValueError, match="no parameter requires a gradient"):
        gradient_statistics(model.requires_grad_(False).named_parameters())


def test_healthy_gradients_give_no_finding() -> None:
    model = Net()
    model.spare = nn.Identity()  # nothing unused
    backward(model)
    stats = gradient_statistics(model.named_parameters())
    assert gradient_findings(stats, 0) == []
    assert unused_parameter_findings(model.named_parameters(), 0) == []


def test_uniformly_small_gradients_are_not_tiny() -> None:
    """A converged model has small gradients everywhere: tiny is relative, so no alarm."""
    model = Net()
    model.spare = nn.Identity()
    backward(model)
    for p in model.parameters():
        p.grad.mul_(1e-9)
    assert gradient_findings(gradient_statistics(model.named_parameters()), 0) == []


def test_unused_parameters_are_grouped_by_module() -> None:
    model = Net()
    backward(model)
    (finding,) = unused_parameter_findings(model.named_parameters(), 3)
    assert (finding.code, finding.subject, finding.step) == ("unused-parameter", "spare", 3)
    assert "spare.weight, spare.bias" in finding.message


def test_zero_tiny_and_nonfinite_gradients_are_named() -> None:
    model = Net()
    model.spare = nn.Identity()
    loss = backward(model)
    model.encoder[0].weight.grad.zero_()
    model.encoder[0].bias.grad.zero_()
    model.encoder[2].bias.grad.mul_(1e-7)
    model.head.weight.grad[0, 0] = math.nan
    model.head.weight.grad[1, 1] = math.inf
    stats = gradient_statistics(model.named_parameters(), loss)
    assert stats.nonfinite_counts == {"head.weight": 2}
    findings = gradient_findings(stats, 7, small_grad_threshold=1e-3)
    assert [(f.code, f.subject) for f in findings] == [
        ("non-finite-gradient", "head"),
        ("zero-gradient", "encoder.0"),
        ("tiny-gradient", "encoder.2"),
    ]
    assert "head.weight (2 values)" in findings[0].message and findings[0].severity == "error"
    assert "encoder.0.weight, encoder.0.bias" in findings[1].message
    assert "encoder.2.bias" in findings[2].message
    assert gradient_findings(stats, 7, check_nonfinite=False)[0].code == "zero-gradient"
    assert [f.code for f in gradient_findings(stats, 7, check_small=False)] == [
        "non-finite-gradient"
    ]


def test_nonfinite_loss_alone_is_its_own_finding() -> None:
    model = Net()
    model.spare = nn.Identity()
    backward(model)
    stats = gradient_statistics(model.named_parameters(), torch.tensor(math.nan))
    (finding,) = gradient_findings(stats, 2)
    assert (finding.code, finding.subject) == ("non-finite-loss", "loss")
    assert "the loss is nan" in finding.message


def test_group_norms_and_weight_rms() -> None:
    model = Net()
    backward(model)
    stats = gradient_statistics(model.named_parameters())
    scalars = health_scalars(stats)
    encoder_grads = [p.grad.norm() ** 2 for p in model.encoder.parameters()]
    assert scalars["health/grad_norm/encoder"] == pytest.approx(sum(encoder_grads).sqrt().item())
    assert scalars["health/grad_norm/spare"] == 0.0
    assert scalars["health/weight_norm/root"] == pytest.approx(1.0)
    total = sum(p.grad.norm() ** 2 for p in model.parameters() if p.grad is not None)
    assert scalars["health/grad_norm/total"] == pytest.approx(total.sqrt().item(), rel=1e-6)
    deeper = health_scalars(stats, group_depth=2)
    assert {"health/grad_norm/encoder.0", "health/grad_norm/encoder.2"} <= set(deeper)
    weights = torch.cat([model.encoder[0].weight.flatten(), model.encoder[2].weight.flatten()])
    assert weight_rms(stats, "encoder") == pytest.approx(weights.pow(2).mean().sqrt().item())
    assert weight_rms(stats, "") > 0 and math.isnan(weight_rms(stats, "missing"))


def test_head_that_dwarfs_the_encoder_is_found_and_default_init_is_not() -> None:
    model = Net()
    stats = gradient_statistics(model.named_parameters())
    findings, ratios = head_findings(stats, "encoder", ["head", "spare"], 0)
    assert findings == [] and set(ratios) == {
        "health/head_weight_ratio/head",
        "health/head_weight_ratio/spare",
    }
    with torch.no_grad():
        model.head.weight.mul_(1000)
    findings, ratios = head_findings(
        gradient_statistics(model.named_parameters()), "encoder", ["head"], 4
    )
    (finding,) = findings
    assert (finding.code, finding.subject, finding.step) == ("head-dominates-encoder", "head", 4)
    assert ratios["health/head_weight_ratio/head"] > 100


def test_collapse_findings_map_verdicts_to_codes() -> None:
    torch.manual_seed(0)
    healthy = torch.randn(512, 16)
    assert collapse_findings(collapse_metrics(healthy), "enc", 0, num_rows=512, dim=16) == []
    rank_one = torch.randn(512, 1) * torch.randn(1, 16)
    (finding,) = collapse_findings(collapse_metrics(rank_one), "enc", 0, num_rows=512, dim=16)
    assert finding.code == "embedding-collapse" and "rankme" in finding.message
    # A ring graph whose node signals are averaged with their neighbours many times.
    n = 256
    nodes = torch.arange(n)
    edges = torch.cat(
        [torch.stack([nodes, (nodes + 1) % n]), torch.stack([(nodes + 1) % n, nodes])], dim=1
    )
    z = torch.randn(n, 8)
    smooth = z.clone()
    for _ in range(2000):
        smooth = (smooth + smooth.roll(1, 0) + smooth.roll(-1, 0)) / 3
    random_codes = collapse_findings(collapse_metrics(z, edges), "gnn", 0, num_rows=n, dim=8)
    assert random_codes == []
    codes = collapse_findings(collapse_metrics(smooth, edges), "gnn", 0, num_rows=n, dim=8)
    assert "oversmoothing" in [f.code for f in codes]
    (over,) = [f for f in codes if f.code == "oversmoothing"]
    assert over.subject == "gnn" and "mad" in over.message


def test_finding_log_rate_limits_each_code_and_subject() -> None:
    log = FindingLog(warn_every_n_steps=10)
    zero = [Finding("zero-gradient", "head", "zero", step) for step in (0, 5, 9, 10, 15, 20)]
    assert [log.add(f) for f in zero] == [True, False, False, True, False, True]
    assert log.add(Finding("zero-gradient", "encoder", "zero", 5))  # another subject
    assert log.add(Finding("tiny-gradient", "head", "tiny", 5))  # another code
    unused = Finding("unused-parameter", "spare", "unused", 0)
    assert log.add(unused) and not log.add(Finding("unused-parameter", "spare", "unused", 5000))
    assert [(f.code, f.subject, f.step) for f in log.findings] == [
        ("zero-gradient", "head", 20),
        ("zero-gradient", "encoder", 5),
        ("tiny-gradient", "head", 5),
        ("unused-parameter", "spare", 0),
    ]
    restored = FindingLog(warn_every_n_steps=10)
    restored.load_state_dict(log.state_dict())
    assert restored.findings == log.findings
    assert not restored.add(Finding("zero-gradient", "head", "zero", 25))
    assert restored.add(Finding("zero-gradient", "head", "zero", 30))
    with pytest.raises(ValueError, match="at least 1"):
        FindingLog(0)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(3, 3)
        self.second = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        h = self.first(x)
        h = h / (h - h)  # NaN made outside any sub-module
        return self.second(h), {"aux": x}


def test_tracer_names_the_first_module_with_a_nonfinite_output() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 3))
    tracer = NonFiniteOutputTracer(model)
    tracer.arm()
    tracer.arm()  # idempotent
    model(torch.ones(2, 3))
    assert tracer.disarm() is None
    tracer.arm()
    model(torch.tensor([[1.0, math.nan, 0.0]]))
    module, message = tracer.disarm()
    assert module == "0" and "inputs were already not finite" in message

    block = Block()
    tracer = NonFiniteOutputTracer(block)
    tracer.arm()
    block(torch.ones(2, 3))
    module, message = tracer.disarm()
    assert module == "second" and "already not finite" in message
    assert not tracer.armed and all(not m._forward_hooks for m in block.modules())
    block(torch.ones(2, 3))  # no hook left: nothing recorded
    assert tracer.disarm() is None


@pytest.mark.parametrize(
    "batch",
    [
        {"pos": torch.rand(20, 3)},
        SimpleNamespace(pos=torch.rand(20, 3)),  # like a PyG Data
        (torch.zeros(2), {"pos": torch.rand(20, 3)}),
        [SimpleNamespace(x=1), SimpleNamespace(pos=torch.rand(20, 3).double())],
    ],
)
def test_fractional_coordinates_are_found_in_every_batch_kind(batch: object) -> None:
    message = CoordinateRangeCheck()(batch)
    assert message is not None and "fractional coordinates" in message


def test_cartesian_coordinates_pass_and_missing_keys_raise() -> None:
    check = CoordinateRangeCheck("pos")
    assert check({"pos": torch.rand(20, 3) * 8.0}) is None
    assert check({"pos": torch.rand(20, 3) - 0.5}) is None
    assert check({"pos": torch.zeros(0, 3)}) is None
    assert CoordinateRangeCheck(1)((torch.ones(3) * 4, np.random.rand(5, 3))) is not None
    assert CoordinateRangeCheck(0)((torch.ones(3) * 4,)) is None
    with pytest.raises(KeyError, match="no coordinates under 'pos' in a batch of type dict"):
        check({"x": torch.rand(3)})
    with pytest.raises(KeyError, match="type tuple"):
        CoordinateRangeCheck(5)((torch.rand(3),))
