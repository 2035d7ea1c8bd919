"""Tests for learnscope.autocorrelation.sampled_history.SampledParameterHistory, on small models."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

from learnscope.autocorrelation.analysis import autocorrelation
from learnscope.autocorrelation.sampled_history import (
    SampledParameterHistory,
    SampledSlice,
    plan_slices,
)
from learnscope.health import group_name


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(3))
        self.layers = nn.ModuleList([nn.Linear(20, 30), nn.Linear(30, 20)])


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.temperature = nn.Parameter(torch.ones(1))
        self.encoder = Encoder()
        self.head = nn.Linear(20, 4)
        self.frozen = nn.Linear(20, 20).requires_grad_(False)


def sampled_values(history: SampledParameterHistory, kind: str = "params") -> torch.Tensor:
    """What the slices hold right now, read directly from the named tensors."""
    tensors = dict(history_parameters(history))
    values = []
    for piece in history.slices:
        tensor = tensors[piece.name] if kind == "params" else tensors[piece.name].grad
        if tensor is None:
            tensor = torch.zeros_like(tensors[piece.name])
        values.append(tensor.detach().reshape(-1)[piece.start : piece.stop])
    return torch.cat(values).float()


def history_parameters(history: SampledParameterHistory) -> list[tuple[str, torch.Tensor]]:
    return [(name, shard.holder) for name, shard in history._shards.items()]


def meta_model(num_tensors: int, numel: int) -> list[tuple[str, nn.Parameter]]:
    """A model description on the meta device: no memory is allocated."""
    return [
        (f"block{i // 4}.weight{i % 4}", nn.Parameter(torch.empty(numel, device="meta")))
        for i in range(num_tensors)
    ]


def test_slices_are_contiguous_slices_of_the_named_tensors() -> None:
    torch.manual_seed(0)
    model = Model()
    history = SampledParameterHistory(model.named_parameters(), elements_per_tensor=16)
    named = dict(model.named_parameters())
    assert [s.name for s in history.slices] == [
        name for name, p in model.named_parameters() if p.requires_grad
    ]
    for piece in history.slices:
        assert piece.length == min(16, named[piece.name].numel())
        assert piece.start >= 0 and piece.stop <= named[piece.name].numel()
    assert history.num_elements == sum(s.length for s in history.slices)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    history.record()
    assert torch.equal(history.history("params")[0], sampled_values(history))
    assert torch.equal(history.history("grads")[0], sampled_values(history, "grads"))


def test_chronological_order_after_wrap_around() -> None:
    weight = nn.Parameter(torch.zeros(2, 3))
    history = SampledParameterHistory([("weight", weight)], capacity=4)
    for step in range(10):
        weight.data.fill_(step)
        weight.grad = torch.full_like(weight, -step)
        history.record()
        expected = torch.arange(max(0, step - 3), step + 1, dtype=torch.float32)
        assert history.num_steps == len(expected)
        assert torch.equal(history.history("params"), expected[:, None].expand(-1, 6))
        assert torch.equal(history.history("grads"), -expected[:, None].expand(-1, 6))
    assert history.num_recorded == 10


def test_history_is_a_copy_and_empty_before_recording() -> None:
    weight = nn.Parameter(torch.ones(4))
    history = SampledParameterHistory([("weight", weight)], capacity=3)
    assert history.history("params").shape == (0, 4)
    history.record()
    snapshot = history.history("params")
    snapshot += 100
    assert torch.equal(history.history("params"), torch.ones(1, 4))
    with pytest.raises(ValueError, match="'params', 'grads'"):
        history.history("weights")  # type: ignore[arg-type]


def test_deterministic_from_seed() -> None:
    model = Model()
    first = SampledParameterHistory(model.named_parameters(), elements_per_tensor=8, seed=3)
    again = SampledParameterHistory(model.named_parameters(), elements_per_tensor=8, seed=3)
    other = SampledParameterHistory(model.named_parameters(), elements_per_tensor=8, seed=4)
    assert first.slices == again.slices
    assert first.slices != other.slices


def test_cap_spreads_the_budget_over_every_tensor() -> None:
    model = Model()  # trainable sizes: 1, 3, 600, 30, 600, 20, 80, 4
    history = SampledParameterHistory(
        model.named_parameters(), elements_per_tensor=256, max_elements=200
    )
    lengths = {s.name: s.length for s in history.slices}
    assert history.num_elements <= 200
    assert len(lengths) == 8  # every tensor keeps a slice
    assert lengths["temperature"] == 1 and lengths["encoder.scale"] == 3  # small: whole
    big = [lengths["encoder.layers.0.weight"], lengths["encoder.layers.1.weight"]]
    assert big[0] == big[1] == lengths["head.weight"]  # the same fair share


def test_more_tensors_than_the_cap_keeps_a_seeded_subset() -> None:
    parameters = [(f"p{i}", nn.Parameter(torch.zeros(10))) for i in range(10)]
    history = SampledParameterHistory(parameters, max_elements=4, seed=1)
    assert history.num_elements == 4
    assert all(s.length == 1 for s in history.slices)
    names = [s.name for s in history.slices]
    assert names == sorted(names, key=lambda name: int(name[1:]))  # model order kept
    again = SampledParameterHistory(parameters, max_elements=4, seed=1)
    assert again.slices == history.slices


def test_nbytes_is_bounded_whatever_the_model_size() -> None:
    small = SampledParameterHistory(meta_model(300, 33_334))  # 10M parameters
    large = SampledParameterHistory(meta_model(300, 3_333_334))  # 1B parameters
    for history in (small, large):
        assert 65536 - 300 < history.num_elements <= 65536  # 300 slices of the fair share
        assert history.nbytes == 2 * history.capacity * history.num_elements * 4
        assert history.history("params").device.type == "meta"
    assert small.nbytes == large.nbytes <= 2 * 256 * 65536 * 4  # 128 MiB
    few = SampledParameterHistory(meta_model(40, 250_000), capacity=100)  # 10M, 40 tensors
    assert few.nbytes == 2 * 100 * 40 * 256 * 4


def test_state_dict_round_trip_tracks_the_same_elements() -> None:
    torch.manual_seed(1)
    model = Model()
    saved = SampledParameterHistory(model.named_parameters(), elements_per_tensor=8, seed=5)
    buffer = io.BytesIO()
    torch.save(saved.state_dict(), buffer)
    buffer.seek(0)
    resumed = SampledParameterHistory(model.named_parameters(), elements_per_tensor=4, seed=6)
    resumed.load_state_dict(torch.load(buffer))
    assert resumed.slices == saved.slices and resumed.seed == 5
    assert resumed.group_names == saved.group_names
    assert torch.equal(resumed.group_index, saved.group_index)
    saved.record()
    resumed.record()
    assert torch.equal(resumed.history("params"), saved.history("params"))


def test_load_state_dict_rejects_unknown_or_out_of_range_slices() -> None:
    model = Model()
    history = SampledParameterHistory(model.named_parameters())
    state = history.state_dict()
    with pytest.raises(ValueError, match="'frozen.weight', which is not a trainable"):
        history.load_state_dict(
            {**state, "names": ["frozen.weight"], "starts": [0], "lengths": [1]}
        )
    with pytest.raises(ValueError, match="outside its 4 elements"):
        history.load_state_dict({**state, "names": ["head.bias"], "starts": [2], "lengths": [3]})
    with pytest.raises(ValueError, match="missing"):
        history.load_state_dict({"seed": 0})


def test_missing_gradients_record_zeros_and_give_nan_acf() -> None:
    used, unused = nn.Parameter(torch.zeros(4)), nn.Parameter(torch.zeros(4))
    history = SampledParameterHistory([("used", used), ("unused", unused)], capacity=8)
    for _ in range(8):
        used.grad = torch.randn(4)
        history.record()
    grads = history.history("grads")
    assert torch.equal(grads[:, 4:], torch.zeros(8, 4))
    acf = autocorrelation(grads, max_lag=2)
    assert acf[:, 4:].isnan().all() and not acf[:, :4].isnan().any()


@pytest.mark.parametrize(
    ("depth", "names"),
    [
        (1, ["root", "encoder", "head"]),
        (2, ["root", "encoder", "encoder.layers", "head"]),
    ],
)
def test_groups_by_module_prefix(depth: int, names: list[str]) -> None:
    """The groups of the health checks: the root module's ``temperature`` is in ``root``."""
    model = Model()
    history = SampledParameterHistory(model.named_parameters(), group_depth=depth)
    assert history.group_names == names
    index = history.group_index
    assert index.dtype == torch.long and index.shape == (history.num_elements,)
    column = 0
    for piece in history.slices:
        group = group_name(piece.name, depth)
        assert index[column : column + piece.length].tolist() == [names.index(group)] * (
            piece.length
        )
        column += piece.length


def test_follows_replaced_parameter_data_and_non_contiguous_parameters() -> None:
    transposed = nn.Parameter(torch.arange(12.0).reshape(3, 4).T)  # not contiguous
    plain = nn.Parameter(torch.zeros(5))
    history = SampledParameterHistory([("t", transposed), ("p", plain)], capacity=4)
    history.record()
    plain.data = torch.full((5,), 7.0)  # new storage: the cached view must follow
    transposed.data.mul_(2)
    history.record()
    rows = history.history("params")
    assert torch.equal(rows[0], torch.cat([transposed.reshape(-1) / 2, torch.zeros(5)]).detach())
    assert torch.equal(rows[1], torch.cat([transposed.reshape(-1), torch.full((5,), 7.0)]))


def test_mixed_precision_values_are_stored_as_float32() -> None:
    weight = nn.Parameter(torch.linspace(-1, 1, 6, dtype=torch.bfloat16))
    history = SampledParameterHistory([("weight", weight)])
    weight.grad = torch.ones(6, dtype=torch.bfloat16)
    history.record()
    assert history.history("params").dtype == torch.float32
    assert torch.equal(history.history("params")[0], weight.detach().float())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"capacity": 0}, "capacity must be a positive int"),
        ({"elements_per_tensor": -1}, "elements_per_tensor must be a positive int"),
        ({"max_elements": 1.5}, "max_elements must be a positive int"),
        ({"group_depth": 0}, "group_depth must be a positive int"),
    ],
)
def test_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SampledParameterHistory(Model().named_parameters(), **kwargs)


def test_parameter_values_only_allocates_and_records_no_gradients() -> None:
    model = Model()
    both = SampledParameterHistory(model.named_parameters(), capacity=8)
    values = SampledParameterHistory(model.named_parameters(), capacity=8, kinds=("params",))
    assert values.kinds == ("params",) and both.kinds == ("params", "grads")
    assert values.slices == both.slices
    assert values.nbytes == 8 * values.num_elements * 4 == both.nbytes // 2
    assert sum(b.nbytes for b in values._ring.buffers.values()) == values.nbytes  # nothing else
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    values.record()
    assert torch.equal(values.history("params")[0], sampled_values(values))
    with pytest.raises(ValueError, match=r"records \('params',\) only, not 'grads'"):
        values.history("grads")
    with pytest.raises(ValueError, match="kinds must be a non-empty subset"):
        SampledParameterHistory(model.named_parameters(), kinds=("params", "weights"))
    with pytest.raises(ValueError, match="kinds must be a non-empty subset"):
        SampledParameterHistory(model.named_parameters(), kinds=())


def test_given_slices_share_one_plan_between_histories() -> None:
    """One budget over two parameter sets (two optimizers): the same elements as one history."""
    model = Model()
    named = list(model.named_parameters())
    plan = plan_slices(named, elements_per_tensor=16, max_elements=100, seed=2)
    whole = SampledParameterHistory(named, elements_per_tensor=16, max_elements=100, seed=2)
    assert tuple(plan) == whole.slices
    encoder = [(n, p) for n, p in named if n.startswith("encoder.")]
    slices = [s for s in plan if s.name.startswith("enc")]
    # grouped as in the whole model, as OptimizerHistories passes it (groups_under)
    part = SampledParameterHistory(encoder, slices=slices, groups_under="")
    assert part.group_names == ["encoder"] and part.parameter_names == tuple(n for n, _ in encoder)
    alone = SampledParameterHistory(encoder, slices=slices)  # below the module holding them all
    assert alone.group_names == ["encoder", "encoder.layers"]
    assert part.num_elements == sum(s.length for s in plan if s.name.startswith("encoder."))
    with pytest.raises(ValueError, match="'temperature', which is not a trainable parameter"):
        SampledParameterHistory(encoder, slices=plan)
    with pytest.raises(ValueError, match="slices holds no slice"):
        SampledParameterHistory(encoder, slices=[])
    with pytest.raises(ValueError, match="outside its 3 elements"):
        SampledParameterHistory(encoder, slices=[SampledSlice("encoder.scale", 1, 3)])


def test_no_trainable_parameters_is_an_error() -> None:
    with pytest.raises(ValueError, match="no trainable parameters"):
        SampledParameterHistory(nn.Linear(2, 2).requires_grad_(False).named_parameters())


def test_sampled_slice_stop() -> None:
    assert SampledSlice("w", 3, 4).stop == 7


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_record_never_syncs_with_the_host() -> None:
    model = Model().cuda()
    history = SampledParameterHistory(model.named_parameters())
    model.head.weight.grad = torch.randn_like(model.head.weight)  # the others stay None
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(5):
            history.record()
        rows = history.history("grads")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert rows.device.type == "cuda" and rows.shape == (5, history.num_elements)
    assert torch.equal(rows[-1], sampled_values(history, "grads"))
