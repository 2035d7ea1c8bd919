"""How a module's output is read: channel-first modules by rule, tokens said, non-tensors named.

The rules of ``learnscope.embeddings.batch_axis`` (which module gives ``[batch, channels,
length]``), ``learnscope.embeddings.output_layout`` (which rows an output gives) and
``learnscope.embeddings.module_output`` (what a module that gives no tensor gave), on real PyTorch
modules' outputs.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import pytest
import torch
from torch import nn

from learnscope.embeddings.batch_axis import (
    channels_first_kind,
    channels_first_layer,
    layout_module,
)
from learnscope.embeddings.module_output import describe_output, embedding_tensor, select_example
from learnscope.embeddings.output_layout import output_layout, tokens_note

CHANNELS_FIRST = [
    nn.Conv1d(4, 8, 3),
    nn.LazyConv1d(8, 3),
    nn.ConvTranspose1d(4, 8, 3),
    nn.MaxPool1d(2),
    nn.AvgPool1d(2),
    nn.LPPool1d(2, 2),
    nn.AdaptiveAvgPool1d(4),
    nn.AdaptiveMaxPool1d(4),
    nn.BatchNorm1d(4),
    nn.LazyBatchNorm1d(),
    nn.InstanceNorm1d(4),
    nn.GroupNorm(2, 4),
    nn.SyncBatchNorm(4),
    nn.LocalResponseNorm(2),
    nn.ConstantPad1d(1, 0.0),
    nn.ZeroPad1d(1),
    nn.ReflectionPad1d(1),
    nn.ReplicationPad1d(1),
    nn.CircularPad1d(1),
    nn.Dropout1d(),
    nn.Upsample(scale_factor=2),
]


@pytest.mark.parametrize("module", CHANNELS_FIRST, ids=lambda m: type(m).__name__)
def test_pytorchs_channel_first_modules_are_known(module: nn.Module) -> None:
    assert channels_first_layer(module) is module
    assert channels_first_kind(module) == type(module).__name__


@pytest.mark.parametrize(
    "module",
    [
        nn.Linear(4, 4),
        nn.LayerNorm(4),
        nn.TransformerEncoderLayer(8, 2, batch_first=True),
        nn.MultiheadAttention(8, 2),
        nn.Embedding(10, 4),
        nn.ReLU(),
        nn.Softmax(dim=1),
        nn.GLU(dim=1),
        nn.Identity(),
        nn.Sequential(nn.ReLU(), nn.Dropout()),
        nn.Sequential(),
    ],
    ids=lambda m: type(m).__name__,
)
def test_other_modules_are_not_known_to_be_channel_first(module: nn.Module) -> None:
    assert channels_first_layer(module) is None and channels_first_kind(module) is None


def test_a_sequential_is_read_through_its_last_layer_element_wise_ones_skipped() -> None:
    conv = nn.Conv1d(4, 8, 3)
    block = nn.Sequential(conv, nn.BatchNorm1d(8), nn.GELU(), nn.Dropout(0.1))
    assert type(channels_first_layer(block)).__name__ == "BatchNorm1d"
    nested = nn.Sequential(nn.Sequential(conv, nn.PReLU(8)), nn.Identity(), nn.LeakyReLU())
    assert channels_first_layer(nested) is conv
    kind = channels_first_kind(nested)
    assert kind == "a Sequential whose last layer (element-wise ones skipped) is Conv1d"
    pooled = nn.Sequential(conv, nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(8, 2))
    assert channels_first_layer(pooled) is None  # its last layer is a Linear


def test_an_element_wise_layer_in_a_sequential_has_the_layout_of_the_layer_before_it() -> None:
    shared = nn.ReLU()  # one module used twice: each place is read on its own
    features = nn.Sequential(nn.Conv1d(4, 8, 3), shared, nn.Dropout(), nn.Flatten(), shared)
    model = nn.ModuleDict({"features": features, "head": nn.ReLU()})
    assert layout_module(model, "features.1") is features[0]
    assert layout_module(model, "features.2") is features[0]
    assert layout_module(model, "features.0") is features[0]
    assert layout_module(model, "head") is model["head"]  # not inside a Sequential
    assert isinstance(layout_module(model, "features.3"), nn.Flatten)


def test_a_channel_first_output_is_a_1d_feature_map() -> None:
    torch.manual_seed(0)
    conv = nn.Conv1d(3, 8, 5, padding=2)
    value = conv(torch.randn(4, 3, 10)).detach()
    batch = (torch.zeros(4, 3, 10), torch.zeros(4))
    owner = "Demo: module 'conv'"
    with pytest.raises(ValueError) as raised:
        output_layout(value, batch, None, owner, conv)
    message = str(raised.value)
    assert "gave shape (4, 8, 10), read as [batch, channels, length] (Conv1d's layout)" in message
    assert "spatial='mean'" in message and "'max'" in message and "'pixels'" in message
    pixels = output_layout(value, batch, "pixels", owner, conv)
    assert pixels.rows.shape == (4, 10, 8) and pixels.grid == (4, 10)
    assert torch.equal(pixels.rows, value.transpose(1, 2))  # row (b, l) is position l of b
    assert tokens_note(pixels, owner) is None
    mean = output_layout(value, batch, "mean", owner, conv)
    assert torch.allclose(mean.rows, value.mean(-1)) and mean.grid == (4,)
    assert torch.equal(output_layout(value, batch, "max", owner, conv).rows, value.amax(-1))
    one = output_layout(value[..., :1], batch, None, owner, conv)  # a length of 1: one row
    assert one.rows.shape == (4, 8)


def test_a_channel_first_output_is_not_taken_for_a_sequence_first_one() -> None:
    conv = nn.Conv1d(3, 6, 1)
    value = conv(torch.randn(4, 3, 6)).detach()  # [4, 6, 6]: batch 4; 6 also a batch size
    batch = {"x": torch.zeros(4, 3, 6), "other": torch.zeros(6)}
    layout = output_layout(value, batch, "pixels", "Demo", conv)
    assert torch.equal(layout.rows, value.transpose(1, 2))


def test_a_3d_output_of_another_module_or_of_select_is_read_as_tokens_and_said() -> None:
    value = torch.randn(4, 6, 16)
    for module in (None, nn.Linear(16, 16)):
        layout = output_layout(value, None, None, "Demo: module 'encoder'", module)
        assert layout.tokens and layout.rows.shape == (4, 6, 16) and layout.grid == (4, 6)
        note = tokens_note(layout, "Demo: module 'encoder'")
        assert note is not None
        assert "gave shape (4, 6, 16), read as [batch, tokens, dim]: 6 rows per sample" in note
        assert "(24 in this batch)" in note
        for way in ("select=lambda out: out.transpose(1, 2)", "spatial=", "mask_fn="):
            assert way in note
    with pytest.raises(ValueError, match=r"spatial='pixels' applies to feature maps.*tokens"):
        output_layout(value, None, "pixels", "Demo", None)
    assert tokens_note(output_layout(torch.zeros(4, 16), None, None, "Demo"), "Demo") is None


class Pair(NamedTuple):
    energy: torch.Tensor
    name: str


@dataclasses.dataclass
class Output:
    last_hidden_state: torch.Tensor
    pooled: torch.Tensor | None = None


@pytest.mark.parametrize(
    ("output", "described", "example"),
    [
        (
            {"energy": torch.zeros(4), "forces": torch.zeros(30, 3)},
            "a dict with keys 'energy' (a tensor of shape (4,)), 'forces' (a tensor of shape "
            "(30, 3))",
            'select=lambda out: out["forces"]',
        ),
        (
            [torch.zeros(8), "x"],
            "a list with items [0] (a tensor of shape (8,)), [1] (a str 'x')",
            "select=lambda out: out[0]",
        ),
        (
            Pair(torch.zeros(2, 3), "m"),
            "a Pair with fields energy (a tensor of shape (2, 3)), name (a str 'm')",
            "select=lambda out: out.energy",
        ),
        (
            Output(torch.zeros(2, 5, 8)),
            "an Output with fields last_hidden_state (a tensor of shape (2, 5, 8)), pooled (None)",
            "select=lambda out: out.last_hidden_state",
        ),
        ({}, "an empty dict", None),
        ("text", "a str 'text'", None),
        (None, "None", None),
    ],
)
def test_what_a_module_gave_is_named_with_a_select_that_picks_a_tensor(
    output: Any, described: str, example: str | None
) -> None:
    assert describe_output(output) == described
    assert select_example(output) == example
    with pytest.raises(TypeError) as raised:
        embedding_tensor(output, "Demo", "model")
    message = str(raised.value)
    assert message.startswith(f"Demo: module 'model' gave {described}, not a tensor. Pass select=")
    assert (f"such as {example};" in message) == (example is not None)
    assert "[batch, dim], [nodes, dim] or [batch, tokens, dim]" in message


def test_a_long_output_is_cut_and_a_select_that_gives_no_tensor_is_named() -> None:
    many = {f"k{i}": torch.zeros(i + 1) for i in range(12)}
    assert describe_output(many).endswith("'k7' (a tensor of shape (8,)) and 4 more")
    output = {"energy": torch.zeros(4), "representation": torch.zeros(9, 16)}
    with pytest.raises(TypeError) as raised:
        embedding_tensor("energy", "Demo", "model", selected=True, output=output)
    message = str(raised.value)
    assert message.startswith("Demo: select gave a str 'energy', not a tensor, from the output")
    assert "module 'model' (a dict with keys 'energy' (a tensor of shape (4,))" in message
    assert 'such as select=lambda out: out["representation"]' in message
    tensor = torch.zeros(3, 2)
    assert embedding_tensor(tensor, "Demo", "model") is tensor
