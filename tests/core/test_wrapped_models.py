"""Groups are the user's modules when a wrapper renames the parameters.

Lightning Fabric names every parameter ``_forward_module.<...>``, ``torch.compile`` names them
``_orig_mod.<...>`` (also inside a model: ``encoder._orig_mod.0.weight``), DDP and DataParallel
``module.<...>``. The sampled histories and the gradient statistics over the wrapper, or over
its ``named_parameters()``, give what the plain model gives.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

from learnscope.autocorrelation.sampled_history import SampledParameterHistory
from learnscope.health import gradient_statistics, health_scalars, parameter_shards
from learnscope.health.parameters import unused_parameter_names
from learnscope.model.parameter_shards import unwrap_model
from learnscope.model.trainable import TrainableWatch


class Classifier(nn.Module):
    """``encoder`` (two layers) and ``head``, optionally with the encoder wrapped."""

    def __init__(self, wrap_encoder: Callable[[nn.Module], nn.Module] | None = None) -> None:
        super().__init__()
        encoder = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 8))
        self.encoder = wrap_encoder(encoder) if wrap_encoder is not None else encoder
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


def batches(steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [
        (torch.randn(16, 6, generator=generator), torch.randint(0, 3, (16,), generator=generator))
        for _ in range(steps)
    ]


def compiled(module: nn.Module) -> nn.Module:
    return torch.compile(
        module, backend="aot_eager"
    )  # seconds on the CPU, where Inductor takes ~30 s


def check_like_the_plain_model(
    wrapped: nn.Module, plain: nn.Module, depth: int, groups: list[str]
) -> None:
    """Histories and gradient statistics over ``wrapped`` (and its pairs) are the plain model's."""
    plain_names = [name for name, _ in plain.named_parameters()]
    reference = SampledParameterHistory(plain.named_parameters(), group_depth=depth, seed=3)
    reference.record()
    expected = gradient_statistics(plain.named_parameters())
    for source in (lambda: wrapped, wrapped.named_parameters):  # the model, or its pairs
        history = SampledParameterHistory(source(), group_depth=depth, seed=3)
        assert history.group_names == groups == reference.group_names
        assert history.slices == reference.slices
        history.record()
        for kind in ("params", "grads"):
            assert torch.equal(history.history(kind), reference.history(kind))
        assert torch.equal(history.group_index, reference.group_index)
        stats = gradient_statistics(source())
        assert list(stats.names) == plain_names
        np.testing.assert_array_equal(stats.grad_norms, expected.grad_norms)
        scalars = health_scalars(stats, group_depth=depth)
        assert scalars == health_scalars(expected, group_depth=depth)
    assert [shard.name for shard in parameter_shards(wrapped)] == plain_names


def fabric_steps(model: nn.Module, steps: int) -> nn.Module:
    """A real Lightning Fabric loop on the CPU; the Fabric-wrapped model."""
    fabric_module = pytest.importorskip("lightning.fabric")
    fabric = fabric_module.Fabric(accelerator="cpu", devices=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    fabric_model, optimizer = fabric.setup(model, optimizer)
    for x, y in batches(steps):
        optimizer.zero_grad()
        fabric.backward(nn.functional.cross_entropy(fabric_model(x), y))
        optimizer.step()
    optimizer.zero_grad()
    x, y = batches(1)[0]
    fabric.backward(nn.functional.cross_entropy(fabric_model(x), y))  # gradients to read
    return fabric_model


def plain_steps(model: nn.Module, steps: int) -> None:
    """A plain loop, leaving the gradients of one more batch."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in batches(steps):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    optimizer.zero_grad()
    x, y = batches(1)[0]
    nn.functional.cross_entropy(model(x), y).backward()


@pytest.mark.parametrize(
    ("depth", "groups"), [(1, ["encoder", "head"]), (2, ["encoder.0", "encoder.2", "head"])]
)
def test_a_fabric_model_is_grouped_by_the_users_modules(depth: int, groups: list[str]) -> None:
    torch.manual_seed(0)
    model = Classifier()
    fabric_model = fabric_steps(model, steps=3)
    assert type(fabric_model).__name__ == "_FabricModule"
    first, _ = next(iter(fabric_model.named_parameters()))
    assert first == "_forward_module.encoder.0.weight"  # the names that Fabric gives
    assert unwrap_model(fabric_model) is model
    check_like_the_plain_model(fabric_model, model, depth, groups)


def test_a_compiled_model_and_a_compiled_encoder_are_grouped_by_the_users_modules() -> None:
    torch.manual_seed(0)
    eager = Classifier()
    whole = compiled(Classifier())
    inner = Classifier(wrap_encoder=compiled)
    whole._orig_mod.load_state_dict(eager.state_dict())
    inner.encoder._orig_mod.load_state_dict(eager.encoder.state_dict())
    inner.head.load_state_dict(eager.head.state_dict())
    assert [n for n, _ in inner.named_parameters()][0] == "encoder._orig_mod.0.weight"
    for model in (eager, whole, inner):
        plain_steps(model, steps=3)
    assert unwrap_model(whole) is whole._orig_mod
    for wrapped in (whole, inner):
        check_like_the_plain_model(wrapped, eager, 1, ["encoder", "head"])
        check_like_the_plain_model(wrapped, eager, 2, ["encoder.0", "encoder.2", "head"])


def test_data_parallel_and_fabric_over_a_compiled_model_unwrap_in_turn() -> None:
    model = Classifier()
    parallel = nn.DataParallel(model)  # on the CPU it runs the module as it is
    assert next(n for n, _ in parallel.named_parameters()) == "module.encoder.0.weight"
    assert unwrap_model(parallel) is model
    assert parameter_shards(parallel)[0].name == "encoder.0.weight"
    fabric_module = pytest.importorskip("lightning.fabric")
    fabric = fabric_module.Fabric(accelerator="cpu", devices=1)
    fabric_model = fabric.setup_module(compiled(Classifier()))
    names = [name for name, _ in fabric_model.named_parameters()]
    assert names[0] == "_forward_module._orig_mod.encoder.0.weight"
    assert [s.name for s in parameter_shards(fabric_model)] == [
        n for n, _ in model.named_parameters()
    ]
    assert [s.name for s in parameter_shards(fabric_model.named_parameters())] == [
        n for n, _ in model.named_parameters()
    ]


def test_unused_parameters_and_trainable_changes_name_the_users_modules() -> None:
    model = Classifier(wrap_encoder=compiled)
    model.encoder.requires_grad_(False)
    watch = TrainableWatch(model.named_parameters())
    assert watch.trainable == ["head.weight", "head.bias"]
    model.encoder.requires_grad_(True)
    change = watch.poll()
    assert change is not None
    assert change.added == [
        "encoder.0.weight",
        "encoder.0.bias",
        "encoder.2.weight",
        "encoder.2.bias",
    ]
    model.head(torch.ones(1, 8)).sum().backward()  # the encoder gets no gradient
    assert unused_parameter_names(model) == change.added
    assert unused_parameter_names(model.named_parameters()) == change.added


def test_a_checkpoint_saved_with_wrapper_names_is_followed() -> None:
    """Slices saved before names were cleaned of ``_orig_mod`` name the same elements."""
    model = Classifier(wrap_encoder=compiled)
    history = SampledParameterHistory(model.named_parameters(), seed=1)
    state = history.state_dict()
    state["names"] = [name.replace("encoder.", "encoder._orig_mod.") for name in state["names"]]
    resumed = SampledParameterHistory(model.named_parameters(), seed=2)
    resumed.load_state_dict(state)
    assert resumed.slices == history.slices
