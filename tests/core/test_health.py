"""The training-health core: gradient statistics, findings, rate limits, tracer, input checks."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from learnscope.collapse.metrics import collapse_metrics
from learnscope.health import (
    CheckScope,
    CoordinateRangeCheck,
    FindingLog,
    GradientRound,
    NonFiniteOutputTracer,
    collapse_findings,
    gradient_findings,
    gradient_statistics,
    head_findings,
    health_scalars,
    structural_zero_names,
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
    model.encoder[2].weight.grad.mul_(1e-7)  # vanishing: weight and bias small together
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
    assert "encoder.2.weight, encoder.2.bias" in findings[2].message
    assert gradient_findings(stats, 7, check_nonfinite=False)[0].code == "zero-gradient"
    assert [f.code for f in gradient_findings(stats, 7, check_small=False)] == [
        "non-finite-gradient"
    ]


def test_a_bias_alone_with_a_tiny_gradient_beside_a_healthy_weight_is_structural() -> None:
    model = Net()
    model.spare = nn.Identity()
    backward(model)
    model.encoder[2].bias.grad.mul_(1e-9)
    model.head.bias.grad.zero_()
    model.scale.grad.mul_(1e-9)  # a root parameter: never structural
    findings = gradient_findings(gradient_statistics(model.named_parameters()), 4)
    assert [(f.code, f.subject, f.severity) for f in findings] == [
        ("tiny-gradient", "root", "warning"),
        ("structural-zero-gradient", "encoder.2", "info"),
        ("structural-zero-gradient", "head", "info"),
    ]
    assert "encoder.2.bias got gradients of" in findings[1].message


class KeyAndNorm(nn.Module):
    """Single-head attention, whose key bias shifts every score of a query equally, beside a
    bias followed by BatchNorm: both biases get a zero gradient in exact arithmetic."""

    def __init__(self) -> None:
        super().__init__()
        self.query = nn.Linear(8, 8)
        self.key = nn.Linear(8, 8)
        self.value = nn.Linear(8, 8)
        self.before_norm = nn.Linear(8, 8)
        self.norm = nn.BatchNorm1d(8)
        self.out = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.query(x) @ self.key(x).transpose(1, 2) / math.sqrt(8)
        attended = (scores.softmax(dim=-1) @ self.value(x)).mean(dim=1)
        normalised = self.norm(self.before_norm(x.mean(dim=1))).relu()
        return self.out(attended + normalised)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attention_key_bias_and_a_bias_before_batchnorm_are_structural(
    dtype: torch.dtype,
) -> None:
    torch.manual_seed(0)
    model = KeyAndNorm().to(dtype)
    model(torch.randn(16, 5, 8, dtype=dtype)).pow(2).mean().backward()
    stats = gradient_statistics(model.named_parameters())
    findings = gradient_findings(stats, 3)
    assert [(f.code, f.subject, f.severity) for f in findings] == [
        ("structural-zero-gradient", "key", "info"),
        ("structural-zero-gradient", "before_norm", "info"),
    ]
    rms = dict(zip(stats.names, stats.grad_rms, strict=True))
    assert rms["key.bias"] < 1e-6 * rms["key.weight"]  # zero but for rounding
    tiny = stats.grad_rms < 1e-5 * np.median(stats.grad_rms)
    assert structural_zero_names(stats.names, tiny, ~tiny) == {"key.bias", "before_norm.bias"}


def test_gradient_round_waits_for_every_optimizer() -> None:
    """A GAN in a plain loop: the discriminator steps first, the generator after."""
    generator, discriminator, spare = nn.Linear(2, 3), nn.Linear(3, 1), nn.Linear(3, 3)
    model = nn.ModuleDict({"g": generator, "d": discriminator, "spare": spare})
    g_opt = torch.optim.SGD(generator.parameters(), lr=0.1)
    d_opt = torch.optim.SGD([*discriminator.parameters(), *spare.parameters()], lr=0.1)
    round_ = GradientRound()
    fake = generator(torch.randn(4, 2))
    assert round_.observe(model.named_parameters(), g_opt, [g_opt, d_opt]) is None  # no grad
    discriminator(fake.detach()).sum().backward()
    assert unused_parameter_findings(model.named_parameters(), 0)[0].subject == "g"  # too soon
    assert round_.observe(model.named_parameters(), d_opt, [g_opt, d_opt]) is None
    discriminator(fake).sum().backward()
    assert round_.observe(model.named_parameters(), g_opt, [g_opt, d_opt]) == [
        "spare.weight",
        "spare.bias",
    ]
    assert round_.complete and round_.seen == {"g.weight", "g.bias", "d.weight", "d.bias"}
    assert round_.observe(model.named_parameters(), g_opt, [g_opt, d_opt]) is None
    (finding,) = unused_parameter_findings(model.named_parameters(), 1, seen=round_.seen)
    assert finding.subject == "spare" and "first round of steps of every optimizer" in (
        finding.message
    )


def test_nonfinite_loss_is_reported_when_nonfinite_gradients_are_not_checked() -> None:
    """Under a loss scaler, non-finite gradients are expected; a non-finite loss is not."""
    model = Net()
    model.spare = nn.Identity()
    backward(model)
    model.head.weight.grad[0, 0] = math.inf
    stats = gradient_statistics(model.named_parameters(), torch.tensor(math.nan))
    (finding,) = gradient_findings(stats, 2, check_nonfinite=False)
    assert (finding.code, finding.severity) == ("non-finite-loss", "error")
    assert finding.message == "the loss is nan; check the data and the loss function"


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
    assert scalars["~learnscope/health/grad_norm/encoder"] == pytest.approx(
        sum(encoder_grads).sqrt().item()
    )
    assert scalars["~learnscope/health/grad_norm/spare"] == 0.0
    assert scalars["~learnscope/health/weight_norm/root"] == pytest.approx(1.0)
    total = sum(p.grad.norm() ** 2 for p in model.parameters() if p.grad is not None)
    assert scalars["~learnscope/health/grad_norm/total"] == pytest.approx(
        total.sqrt().item(), rel=1e-6
    )
    deeper = health_scalars(stats, group_depth=2)
    assert {
        "~learnscope/health/grad_norm/encoder.0",
        "~learnscope/health/grad_norm/encoder.2",
    } <= set(deeper)
    weights = torch.cat([model.encoder[0].weight.flatten(), model.encoder[2].weight.flatten()])
    assert weight_rms(stats, "encoder") == pytest.approx(weights.pow(2).mean().sqrt().item())
    assert weight_rms(stats, "") > 0 and math.isnan(weight_rms(stats, "missing"))


def test_head_that_dwarfs_the_encoder_is_found_and_default_init_is_not() -> None:
    model = Net()
    stats = gradient_statistics(model.named_parameters())
    findings, ratios = head_findings(stats, "encoder", ["head", "spare"], 0)
    assert findings == [] and set(ratios) == {
        "~learnscope/health/head_weight_ratio/head",
        "~learnscope/health/head_weight_ratio/spare",
    }
    with torch.no_grad():
        model.head.weight.mul_(1000)
    findings, ratios = head_findings(
        gradient_statistics(model.named_parameters()), "encoder", ["head"], 4
    )
    (finding,) = findings
    assert (finding.code, finding.subject, finding.step) == ("head-dominates-encoder", "head", 4)
    assert ratios["~learnscope/health/head_weight_ratio/head"] > 100


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
    # Proportional rows (deep graph convolutions): oversmoothing, named by mad_global alone.
    g = torch.Generator().manual_seed(1)
    lengths = 1 + 2 * torch.rand(n, 1, generator=g)  # unrelated to the ring: a large quotient
    proportional = lengths * (torch.rand(1, 8, generator=g) + 0.5)
    proportional += 0.15 * torch.randn(n, 8, generator=g)
    (found,) = [
        f
        for f in collapse_findings(
            collapse_metrics(proportional, edges), "gnn", 0, num_rows=n, dim=8
        )
        if f.code == "oversmoothing"
    ]
    assert found.message.startswith("mad_global ")


def test_finding_log_rate_limits_each_code_and_subject() -> None:
    log = FindingLog(warn_every_n_steps=10)

    def due(finding: Finding) -> bool:
        return bool(log.observe([finding], finding.step).due)

    zero = [Finding("zero-gradient", "head", "zero", step) for step in (0, 5, 9, 10, 15, 20)]
    assert [due(f) for f in zero] == [True, False, False, True, False, True]
    assert due(Finding("zero-gradient", "encoder", "zero", 5))  # another subject
    assert due(Finding("tiny-gradient", "head", "tiny", 5))  # another code
    unused = Finding("unused-parameter", "spare", "unused", 0)
    assert due(unused) and not due(Finding("unused-parameter", "spare", "unused", 5000))
    assert [(f.code, f.subject, f.first_step, f.step) for f in log.findings] == [
        ("zero-gradient", "head", 0, 20),
        ("zero-gradient", "encoder", 5, 5),
        ("tiny-gradient", "head", 5, 5),
        ("unused-parameter", "spare", 0, 5000),
    ]
    restored = FindingLog(warn_every_n_steps=10)
    restored.load_state_dict(log.state_dict())
    assert restored.findings == log.findings
    log = restored
    assert not due(Finding("zero-gradient", "head", "zero", 25))
    assert due(Finding("zero-gradient", "head", "zero", 30))
    with pytest.raises(ValueError, match="at least 1"):
        FindingLog(0)


def test_a_finding_lives_from_first_seen_until_a_check_that_judges_it_finds_it_no_more() -> None:
    log = FindingLog(warn_every_n_steps=1000)
    gradients = CheckScope.of(["zero-gradient", "tiny-gradient"], ["head", "encoder"])
    zero = Finding("zero-gradient", "head", "zero", 50)
    observed = log.observe([zero], 50, gradients)
    assert observed.news == [zero] and observed.changed
    # a check of another kind, or about other subjects, says nothing of it
    log.observe([], 100, CheckScope.of(["embedding-collapse"], ["head"]))
    log.observe([], 100, CheckScope.of(["zero-gradient"], ["decoder"]))
    log.observe([], 100)  # an event: judges nothing
    assert log.findings[0].holds
    log.observe([Finding("zero-gradient", "head", "zero", 100)], 100, gradients)
    observed = log.observe([], 150, gradients)
    assert [f.life for f in observed.resolved] == [
        "seen at steps 50-100; healthy at every check since step 150"
    ]
    assert not log.observe([], 200, gradients).changed  # resolved once, not again
    back = log.observe([Finding("zero-gradient", "head", "zero again", 250)], 250, gradients)
    assert [f.life for f in back.news] == ["found at steps 50-250; still holds"]
    assert back.due == []  # warned at 50: not due again within warn_every_n_steps
    assert log.findings[0].message == "zero"  # the message last warned about
    restored = FindingLog()
    restored.load_state_dict(log.state_dict())
    assert restored.findings == log.findings
    with pytest.raises(ValueError, match="after"):
        Finding("zero-gradient", "head", "zero", 50, resolved_step=50)
    with pytest.raises(ValueError, match="first_step"):
        Finding("zero-gradient", "head", "zero", 50, first_step=60)


def test_a_check_table_saved_before_findings_had_lives_is_read() -> None:
    log = FindingLog()
    old = {"code": "zero-gradient", "subject": "head", "message": "zero", "step": 7}
    log.load_state_dict({"findings": [dict(old, severity="warning")], "last_warned": []})
    assert [(f.first_step, f.holds, f.life) for f in log.findings] == [
        (7, True, "found at step 7; still holds")
    ]


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
    assert check({"pos": torch.rand(20, 3) - 0.5}) is not None  # centred fractional ones
    assert check({"pos": torch.zeros(0, 3)}) is None
    assert CoordinateRangeCheck(1)((torch.ones(3) * 4, np.random.rand(5, 3))) is not None
    assert CoordinateRangeCheck(0)((torch.ones(3) * 4,)) is None
    with pytest.raises(KeyError, match="no coordinates under 'pos' in a batch of type dict"):
        check({"x": torch.rand(3)})
    with pytest.raises(KeyError, match="type tuple"):
        CoordinateRangeCheck(5)((torch.rand(3),))
