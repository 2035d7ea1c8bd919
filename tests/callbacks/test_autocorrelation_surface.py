"""ModelAutocorrelation on the whole Lightning surface: what one recorded step is.

Real ``Trainer.fit`` runs with optimizers that evaluate their closure several times (LBFGS),
SAM handed Lightning's closure, gradient accumulation, and a manual-optimization GAN with two
optimizers. ``Truth`` runs after ModelAutocorrelation in the same hook and keeps, for the
first call of each (optimizer, global step), every parameter and gradient, so the recorded
histories can be checked value by value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from torch import nn

from learnscope.autocorrelation.analysis import summarize, summarize_several
from learnscope.autocorrelation.sampled_history import SampledParameterHistory
from learnscope.lightning_glue import ModelAutocorrelation
from tests.kit.models import Collect, TinyClassifier, loaders, trainer


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny models: intra-op threads only contend for the cores (5x slower on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Truth(pl.Callback):
    """What ModelAutocorrelation should have recorded, gathered independently.

    Counts ``on_before_optimizer_step`` calls and keeps every parameter and gradient at the
    first call of each (optimizer, global step), and the parameters at the start of every
    batch. At the end of training (before ``on_fit_end`` frees them) it keeps the callback's
    histories.
    """

    def __init__(self, watched: ModelAutocorrelation) -> None:
        self.watched = watched
        self.calls = 0
        self.first: dict[int, list[dict[str, dict[str, torch.Tensor]]]] = {}  # per optimizer
        self.batch_start: list[dict[str, torch.Tensor]] = []
        self.histories: tuple[SampledParameterHistory, ...] = ()
        self._seen: set[tuple[int, int]] = set()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, idx: int) -> None:
        self.batch_start.append(
            {name: p.detach().clone() for name, p in pl_module.named_parameters()}
        )

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self.calls += 1
        key = (id(optimizer), trainer.global_step)
        if key in self._seen:
            return
        self._seen.add(key)
        named = list(pl_module.named_parameters())
        state = {
            "params": {n: p.detach().clone() for n, p in named},
            "grads": {
                n: torch.zeros_like(p) if p.grad is None else p.grad.clone() for n, p in named
            },
        }
        self.first.setdefault(id(optimizer), []).append(state)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.histories = self.watched.histories

    def states(self, optimizer: int = 0) -> list[dict[str, dict[str, torch.Tensor]]]:
        """The first-call states of the ``optimizer``-th optimizer to step."""
        return list(self.first.values())[optimizer]


def sampled(history: SampledParameterHistory, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """The history's sampled elements of named tensors, in column order."""
    return torch.cat(
        [tensors[s.name].reshape(-1)[s.start : s.stop].float() for s in history.slices]
    )


def expected(history: SampledParameterHistory, states: list[Any], kind: str) -> torch.Tensor:
    """``[steps, K]``: what the history should hold, from ``Truth`` states."""
    return torch.stack([sampled(history, state[kind]) for state in states])


class LBFGSClassifier(TinyClassifier):
    """LBFGS that always makes five closure evaluations per step (no early stop).

    A weight penalty keeps the loss away from zero, where LBFGS without a stopping rule
    would divide by vanishing curvature.
    """

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        penalty = sum(p.square().sum() for p in self.parameters())
        return super().training_step(batch, batch_idx) + 1e-2 * penalty

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.LBFGS(
            self.parameters(), lr=0.1, max_iter=5, tolerance_grad=-1.0, tolerance_change=-1.0
        )


class SAMClassifier(TinyClassifier):
    """SAM from pytorch_optimizer; Lightning hands it its closure."""

    def configure_optimizers(self) -> torch.optim.Optimizer:
        from pytorch_optimizer import SAM

        return SAM(self.parameters(), torch.optim.SGD, rho=0.05, lr=0.05)


class ScaledClassifier(TinyClassifier):
    """A parameter of the root module: ``temperature``."""

    def __init__(self) -> None:
        super().__init__()
        self.temperature = nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.temperature


class GAN(pl.LightningModule):
    """Manual optimization: the generator's optimizer, then the discriminator's, every batch.

    With ``shared_root``, both networks live under one module ``nets``, beside the
    discriminator's ``scale`` (so that ``nets`` does not hold every parameter, and groups are
    not taken below it), so at depth 1 one module group spans the two optimizers.
    """

    def __init__(self, shared_root: bool = False, noise: int = 4, dim: int = 6) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.noise = noise
        generator = nn.Sequential(nn.Linear(noise, 16), nn.Tanh(), nn.Linear(16, dim))
        discriminator = nn.Sequential(nn.Linear(dim, 16), nn.Tanh(), nn.Linear(16, 1))
        if shared_root:
            self.nets = nn.ModuleDict({"generator": generator, "discriminator": discriminator})
            self.scale = nn.Linear(1, 1)
        else:
            self.generator, self.discriminator = generator, discriminator

    def networks(self) -> tuple[nn.Module, nn.Module]:
        if hasattr(self, "nets"):
            return self.nets["generator"], nn.Sequential(self.nets["discriminator"], self.scale)
        return self.generator, self.discriminator

    def training_step(self, batch: Any, batch_idx: int) -> None:
        real, _ = batch
        generator, discriminator = self.networks()
        opt_g, opt_d = self.optimizers()
        fake = generator(torch.randn(real.shape[0], self.noise))
        ones = torch.ones(real.shape[0], 1)
        g_loss = nn.functional.binary_cross_entropy_with_logits(discriminator(fake), ones)
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        logits = discriminator(torch.cat([real, fake.detach()]))
        labels = torch.cat([ones, torch.zeros_like(ones)])
        d_loss = nn.functional.binary_cross_entropy_with_logits(logits, labels)
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()

    def configure_optimizers(self) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer]:
        generator, discriminator = self.networks()
        return (
            torch.optim.SGD(generator.parameters(), lr=0.05),
            torch.optim.SGD(discriminator.parameters(), lr=0.05),
        )


def fit(
    tmp_path: Path,
    model: Callable[[], pl.LightningModule],
    callback: ModelAutocorrelation,
    loggers: Any = False,
    ckpt_path: str | None = None,
    batches_per_epoch: int = 6,
    **kwargs: Any,
) -> tuple[pl.Trainer, Truth]:
    """A quiet CPU fit of a ``model()`` made after seeding, with ``Truth`` watching ``callback``."""
    torch.manual_seed(0)
    truth = Truth(callback)
    options: dict[str, Any] = {"max_epochs": 100, "limit_val_batches": 0} | kwargs
    run = trainer(tmp_path, loggers, [callback, truth], **options)
    run.fit(model(), loaders(n_train=16 * batches_per_epoch)[0], ckpt_path=ckpt_path)
    return run, truth


def test_lbfgs_records_once_per_optimizer_step(tmp_path: Path) -> None:
    """Five closure evaluations per step, one record: at the step's starting parameters."""
    callback = ModelAutocorrelation(buffer_size=64, analyze_every_n_steps=1000, lags=(1,))
    run, truth = fit(tmp_path, LBFGSClassifier, callback, max_steps=60)
    (history,) = truth.histories
    assert run.global_step == 60 and truth.calls == 300  # the closure ran 5 times a step
    assert history.num_recorded == 60
    states = truth.states()
    assert torch.equal(history.history("params"), expected(history, states, "params"))
    assert torch.equal(history.history("grads"), expected(history, states, "grads"))
    # the first evaluation is at the parameters the step started from
    starts = torch.stack([sampled(history, params) for params in truth.batch_start])
    assert torch.equal(history.history("params"), starts)


def test_sam_with_lightnings_closure_records_once_per_step(tmp_path: Path) -> None:
    """SAM evaluates Lightning's closure once, at its perturbed parameters: recorded there."""
    callback = ModelAutocorrelation(buffer_size=64, analyze_every_n_steps=1000, lags=(1,))
    run, truth = fit(tmp_path, SAMClassifier, callback, max_steps=30)
    (history,) = truth.histories
    assert run.global_step == 30 and truth.calls == 30 and history.num_recorded == 30
    states = truth.states()
    assert torch.equal(history.history("params"), expected(history, states, "params"))
    assert torch.equal(history.history("grads"), expected(history, states, "grads"))
    # every element is sampled: the values are SAM's perturbation (norm rho) off the step's
    # start, where the gradient was taken (none at the first step, which has no gradient yet)
    assert history.num_elements == sum(p.numel() for p in TinyClassifier().parameters())
    starts = torch.stack([sampled(history, params) for params in truth.batch_start])
    offsets = (history.history("params") - starts).norm(dim=1)
    assert offsets[0] == 0
    assert offsets[1:].tolist() == pytest.approx([0.05] * 29, rel=1e-4)


def test_gradient_accumulation_records_once_per_optimizer_step(tmp_path: Path) -> None:
    callback = ModelAutocorrelation(buffer_size=64, analyze_every_n_steps=1000, lags=(1,))
    run, truth = fit(
        tmp_path,
        TinyClassifier,
        callback,
        max_steps=15,
        accumulate_grad_batches=4,
        batches_per_epoch=8,
    )
    (history,) = truth.histories
    assert run.global_step == 15 and len(truth.batch_start) == 60  # four micro-batches a step
    assert history.num_recorded == 15
    states = truth.states()
    assert torch.equal(history.history("grads"), expected(history, states, "grads"))
    # the parameters changed at every record: each record is a different optimizer step
    assert (history.history("params").diff(dim=0) != 0).any(dim=1).all()


def test_gan_has_one_history_per_optimizer(tmp_path: Path) -> None:
    sink = Collect()
    callback = ModelAutocorrelation(
        buffer_size=32, analyze_every_n_steps=20, lags=(1, 2), all_scalars=True
    )
    run, truth = fit(tmp_path, GAN, callback, loggers=[sink], max_steps=60)
    generator, discriminator = truth.histories
    assert run.global_step == 60  # each optimizer.step() is a global step: 30 batches
    assert generator.num_recorded == discriminator.num_recorded == 30
    assert generator.group_names == ["generator"]
    assert discriminator.group_names == ["discriminator"]
    assert generator.num_elements + discriminator.num_elements == sum(
        p.numel() for p in GAN().parameters()
    )
    for history, index in ((generator, 0), (discriminator, 1)):
        states = truth.states(index)
        for kind in ("params", "grads"):
            assert torch.equal(history.history(kind), expected(history, states, kind))
        # training moves every sampled element at every one of its own steps: no repeats,
        # and the gradients are fresh at each of them (never the stale ones of a step before)
        assert (history.history("params").diff(dim=0) != 0).all()
        assert (history.history("grads").diff(dim=0) != 0).any(dim=1).all()
        assert (history.history("grads") != 0).all()
    # one summary per analysis with both groups, for both kinds
    analyses = [
        (step, m) for step, m in sink.metrics if any("learnscope/autocorrelation/" in k for k in m)
    ]
    assert [step for step, _ in analyses] == [20, 40, 60]
    for kind in ("params", "grads"):
        for group in ("generator", "discriminator"):
            assert f"learnscope/autocorrelation/{kind}/{group}/lag_1" in analyses[-1][1]


def test_gan_checkpoint_resumes_the_same_elements(tmp_path: Path) -> None:
    first = ModelAutocorrelation(elements_per_tensor=4, buffer_size=16, lags=(1,), seed=3)
    run, _ = fit(tmp_path, GAN, first, max_steps=8)
    checkpoint = tmp_path / "gan.ckpt"
    run.save_checkpoint(checkpoint)
    saved = first.state_dict()
    assert sorted(saved) == ["histories"] and len(saved["histories"]) == 2
    assert {n.split(".")[0] for n in saved["histories"][0]["names"]} == {"generator"}

    resumed = ModelAutocorrelation(elements_per_tensor=4, buffer_size=16, lags=(1,), seed=7)
    run, truth = fit(tmp_path, GAN, resumed, max_steps=16, ckpt_path=str(checkpoint))
    assert run.global_step == 16
    assert [h.slices for h in truth.histories] == [h.slices for h in first_histories(saved)]
    assert all(h.num_recorded == 4 for h in truth.histories)  # the history starts over
    assert resumed.state_dict() == saved

    fresh = ModelAutocorrelation(elements_per_tensor=4, buffer_size=16, lags=(1,), seed=7)
    fit(tmp_path, GAN, fresh, max_steps=2)
    assert fresh.state_dict() != saved


def first_histories(state: dict[str, Any]) -> list[SampledParameterHistory]:
    """Histories that follow a saved state's slices (on a fresh GAN's parameters)."""
    named = list(GAN().named_parameters())
    histories = []
    for saved in state["histories"]:
        history = SampledParameterHistory(named, elements_per_tensor=1)
        history.load_state_dict(saved)
        histories.append(history)
    return histories


def test_a_group_split_over_two_optimizers_gets_distinct_names(tmp_path: Path) -> None:
    """Also: one ``max_elements`` budget bounds both histories, shared as one model's would be."""
    sink = Collect()
    callback = ModelAutocorrelation(
        buffer_size=16, analyze_every_n_steps=10, lags=(1,), max_elements=40
    )
    _, truth = fit(tmp_path, lambda: GAN(shared_root=True), callback, loggers=[sink], max_steps=10)
    names = {name for name in sink.names() if name.startswith("learnscope/autocorrelation/")}
    groups = {name.split("/")[3] for name in names}
    assert groups == {"nets-optimizer0", "nets-optimizer1", "scale"}
    generator, discriminator = truth.histories
    whole = SampledParameterHistory(GAN(shared_root=True).named_parameters(), max_elements=40)
    assert generator.slices + discriminator.slices == whole.slices
    assert generator.num_elements + discriminator.num_elements == whole.num_elements <= 40


def test_without_gradients_no_gradient_buffer_is_allocated(tmp_path: Path) -> None:
    sink = Collect()
    callback = ModelAutocorrelation(
        buffer_size=16, analyze_every_n_steps=10, lags=(1,), analyze_grads=False
    )
    _, truth = fit(tmp_path, TinyClassifier, callback, loggers=[sink], max_steps=10)
    (history,) = truth.histories
    assert history.nbytes == 16 * history.num_elements * 4  # one buffer, not two
    assert history.kinds == ("params",)
    with pytest.raises(ValueError, match="records \\('params',\\) only"):
        history.history("grads")
    names = {name for name in sink.names() if name.startswith("learnscope/autocorrelation/")}
    assert names and all(name.startswith("learnscope/autocorrelation/params/") for name in names)


def test_a_root_parameter_is_in_the_root_group(tmp_path: Path) -> None:
    sink = Collect()
    callback = ModelAutocorrelation(
        buffer_size=16, analyze_every_n_steps=10, lags=(1,), all_scalars=True
    )
    _, truth = fit(tmp_path, ScaledClassifier, callback, loggers=[sink], max_steps=10)
    (history,) = truth.histories
    assert history.group_names == ["root", "encoder", "head"]
    assert "learnscope/autocorrelation/params/root/lag_1" in sink.names()


def test_a_checkpoint_of_another_optimizer_layout_is_not_followed(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    single = ModelAutocorrelation(buffer_size=16, lags=(1,))
    fit(tmp_path, TinyClassifier, single, max_steps=2)
    callback = ModelAutocorrelation(buffer_size=16, lags=(1,), seed=5)
    callback.load_state_dict(single.state_dict())  # one history; the GAN has two optimizers
    _, truth = fit(tmp_path, GAN, callback, max_steps=4)
    assert [h.group_names for h in truth.histories] == [["generator"], ["discriminator"]]
    assert all(h.num_recorded == 2 for h in truth.histories)
    checkpoint = [r.getMessage() for r in learnscope_log.records if "checkpoint" in r.getMessage()]
    assert checkpoint == [  # (and, at the fit's end analysis, that there is no logger)
        "learnscope: ModelAutocorrelation cannot follow the elements of the checkpoint (it has "
        "1 sampled histories, this run 2, one per optimizer); it samples new ones with seed 5"
    ]


class NarrowCriticGAN(GAN):
    """The GAN with a narrower discriminator: the generator's slices still fit, not the critic's."""

    def __init__(self) -> None:
        super().__init__()
        self.discriminator = nn.Sequential(nn.Linear(6, 2), nn.Tanh(), nn.Linear(2, 1))


def test_a_checkpoint_history_that_does_not_fit_its_optimizer_is_named(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    gan = ModelAutocorrelation(buffer_size=16, lags=(1,))
    fit(tmp_path, GAN, gan, max_steps=2)
    saved = gan.state_dict()
    callback = ModelAutocorrelation(buffer_size=16, lags=(1,), seed=5)
    callback.load_state_dict(saved)
    _, truth = fit(tmp_path, NarrowCriticGAN, callback, max_steps=4)
    (message,) = [r.getMessage() for r in learnscope_log.records if "checkpoint" in r.getMessage()]
    assert message.startswith(
        "learnscope: ModelAutocorrelation cannot follow the elements of the checkpoint for "
        "optimizer 1 ("
    )
    assert message.endswith("); it samples new ones with seed 5")
    generator, discriminator = truth.histories
    assert generator.slices == first_histories(saved)[0].slices  # followed
    assert discriminator.slices != first_histories(saved)[1].slices


def test_summarize_several_is_summarize_per_source_in_one_summary() -> None:
    noise = torch.randn(80, 6, generator=torch.Generator().manual_seed(0)).cumsum(0)
    first = (
        {"params": noise[:, :4], "grads": noise[:, :4].diff(dim=0)},
        torch.tensor([0, 0, 1, 1]),
    )
    second = ({"params": noise[20:, 4:]}, torch.tensor([0, 0]))
    both = summarize_several(
        [(*first, ["encoder", "head"]), (*second, ["critic"])], step=79, lags=(1, 3)
    )
    alone = [
        summarize(*first, ["encoder", "head"], step=79, lags=(1, 3)),
        summarize(*second, ["critic"], step=79, lags=(1, 3)),
    ]
    by_key = {(g.kind, g.group): g for summary in alone for g in summary.groups}
    assert [(g.kind, g.group) for g in both.groups] == [
        ("params", "encoder"),
        ("params", "head"),
        ("params", "critic"),
        ("grads", "encoder"),
        ("grads", "head"),
    ]
    for group in both.groups:
        twin = by_key[(group.kind, group.group)]
        assert np.array_equal(group.mean_acf, twin.mean_acf)
        assert (group.rho1_median, group.tau) == (twin.rho1_median, twin.tau)
    with pytest.raises(ValueError, match=r"group names \['head'\] of 'params' are in two"):
        summarize_several([(*first, ["encoder", "head"]), (*second, ["head"])], step=0, lags=(1,))
