"""Parameter groups are taken below the module that holds every trainable parameter.

One rule for the gradient checks' per-group norms (``health_scalars``) and the sampled histories
(``SampledParameterHistory``, ``OptimizerHistories``): a wrapper child (``self.model = Net()``),
LoRA adapters in a frozen model, and fine-tuning where parameters start training later give the
groups of the modules inside them, with the full dotted prefix kept; with several optimizers
the groups are still those of the whole model.
"""

from __future__ import annotations

import torch
from torch import nn

from learnscope.autocorrelation.optimizer_histories import HistorySettings, OptimizerHistories
from learnscope.autocorrelation.sampled_history import SampledParameterHistory
from learnscope.health import gradient_statistics, health_scalars
from learnscope.model.parameter_names import common_module, group_name
from learnscope.model.parameter_shards import groups_under, parameter_shards


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8))
        self.head = nn.Linear(8, 2)


class Wrapper(nn.Module):
    """Every parameter in one child; a loss without parameters beside it."""

    def __init__(self) -> None:
        super().__init__()
        self.model = Net()
        self.loss = nn.MSELoss()


def grad_norm_groups(model: nn.Module, group_depth: int = 1) -> set[str]:
    for parameter in model.parameters():
        parameter.grad = torch.ones_like(parameter) if parameter.requires_grad else None
    scalars = health_scalars(gradient_statistics(model.named_parameters()), group_depth)
    prefix = "~learnscope/health/grad_norm/"
    return {name.removeprefix(prefix) for name in scalars if name.startswith(prefix)} - {"total"}


def test_the_common_module_and_the_groups_below_it() -> None:
    names = ["model.encoder.0.weight", "model.encoder.2.bias", "model.head.weight"]
    assert common_module(names) == "model"
    assert [group_name(n, 1, "model") for n in names] == [
        "model.encoder",
        "model.encoder",
        "model.head",
    ]
    assert [group_name(n, 2, "model") for n in names] == [
        "model.encoder.0",
        "model.encoder.2",
        "model.head",
    ]
    assert common_module(["encoder.0.weight", "head.weight"]) == ""
    assert common_module(["scale", "model.head.weight"]) == ""  # a parameter of the root
    assert common_module(["model.head.weight", "model.head.bias"]) == "model.head"
    assert group_name("model.head.weight", 1, "model.head") == "model.head"


def test_a_wrapper_is_grouped_by_its_children_in_norms_and_histories() -> None:
    wrapper = Wrapper()
    assert groups_under(parameter_shards(wrapper)) == "model"
    assert grad_norm_groups(wrapper) == {"model.encoder", "model.head"}
    assert grad_norm_groups(wrapper, group_depth=2) == {
        "model.encoder.0",
        "model.encoder.2",
        "model.head",
    }
    history = SampledParameterHistory(wrapper.named_parameters(), capacity=4)
    assert history.group_names == ["model.encoder", "model.head"]
    plain = Net()  # without a wrapper: the groups as before
    assert grad_norm_groups(plain) == {"encoder", "head"}
    assert SampledParameterHistory(plain, capacity=4).group_names == ["encoder", "head"]


def test_lora_adapters_in_a_frozen_model_are_grouped_by_layer() -> None:
    class Adapted(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.base = nn.Linear(8, 8)
            self.lora_a = nn.Linear(8, 2, bias=False)
            self.lora_b = nn.Linear(2, 8, bias=False)

    model = nn.ModuleDict(
        {
            "embed": nn.Embedding(10, 8),
            "layers": nn.ModuleList([Adapted(), Adapted()]),
            "lm_head": nn.Linear(8, 10),
        }
    )
    model.requires_grad_(False)
    for layer in model["layers"]:
        layer.lora_a.requires_grad_(True)
        layer.lora_b.requires_grad_(True)
    assert groups_under(parameter_shards(model)) == "layers"
    assert grad_norm_groups(model) == {"layers.0", "layers.1"}
    history = SampledParameterHistory(model.named_parameters(), capacity=4)
    assert history.group_names == ["layers.0", "layers.1"]


def test_several_optimizers_keep_the_whole_models_groups() -> None:
    class Gan(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.generator = nn.Sequential(nn.Linear(2, 4), nn.Linear(4, 2))
            self.discriminator = nn.Sequential(nn.Linear(2, 4), nn.Linear(4, 1))

    wrapper = nn.ModuleDict({"model": Gan()})
    gan = wrapper["model"]
    optimizers = [
        torch.optim.SGD(gan.generator.parameters(), lr=0.1),
        torch.optim.SGD(gan.discriminator.parameters(), lr=0.1),
    ]
    histories = OptimizerHistories(HistorySettings(capacity=4))
    histories.sample(parameter_shards(wrapper), optimizers)
    # Each optimizer's parameters lie in one module, but the groups are the whole model's.
    assert [h.group_names for h in histories.histories] == [
        ["model.generator"],
        ["model.discriminator"],
    ]


def test_fine_tuning_regroups_when_other_parameters_train() -> None:
    wrapper = Wrapper()
    wrapper.model.encoder.requires_grad_(False)  # only the head trains at first
    assert groups_under(parameter_shards(wrapper)) == "model.head"
    assert grad_norm_groups(wrapper) == {"model.head"}
    histories = OptimizerHistories(HistorySettings(capacity=4))
    optimizers = [torch.optim.SGD(wrapper.parameters(), lr=0.1)]
    histories.sample(parameter_shards(wrapper), optimizers)
    assert histories.histories[0].group_names == ["model.head"]
    wrapper.model.encoder.requires_grad_(True)  # the backbone is unfrozen
    histories.sample(parameter_shards(wrapper), optimizers)
    assert histories.histories[0].group_names == ["model.encoder", "model.head"]
    assert grad_norm_groups(wrapper) == {"model.encoder", "model.head"}
