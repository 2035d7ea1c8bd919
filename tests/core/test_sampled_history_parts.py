"""The parts of SampledParameterHistory on their own: the plan, the column layout, the ring."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from learnscope.autocorrelation.ring_buffer import StagedRingBuffer
from learnscope.autocorrelation.sampled_columns import column_layout
from learnscope.autocorrelation.sampled_history import SampledParameterHistory
from learnscope.autocorrelation.sampling_plan import SampledSlice, choose_slices, plan_slices
from learnscope.model.parameter_shards import parameter_shards


@pytest.mark.parametrize(("capacity", "steps"), [(5, 23), (16, 40), (40, 37), (33, 100)])
def test_ring_returns_the_last_rows_oldest_first(capacity: int, steps: int) -> None:
    ring = StagedRingBuffer(
        ("params", "grads"), width=3, capacity=capacity, device=torch.device("cpu")
    )
    written = []
    for step in range(steps):
        row = np.arange(3, dtype=np.float32) + 10 * step
        written.append(row)
        ring.staging_row("params").copy_(torch.from_numpy(row))
        ring.staging_row("grads").copy_(torch.from_numpy(-row))
        ring.advance()
        if step % 7 == 3:  # reading in the middle of a staging block changes nothing
            assert np.array_equal(ring.rows("params").numpy(), np.stack(written[-capacity:]))
    assert ring.num_rows == min(steps, capacity) and ring.count == steps
    assert np.array_equal(ring.rows("params").numpy(), np.stack(written[-capacity:]))
    assert np.array_equal(ring.rows("grads").numpy(), -np.stack(written[-capacity:]))
    assert ring.nbytes == 2 * capacity * 3 * 4 == sum(b.nbytes for b in ring.buffers.values())


def test_fair_share_keeps_small_tensors_whole() -> None:
    sizes = [("big", 10_000), ("bias", 7), ("mid", 40)]
    slices = choose_slices(sizes, elements_per_tensor=256, max_elements=100, seed=0)
    lengths = {s.name: s.length for s in slices}
    # the largest share with sum(min(numel, share)) <= 100: 53 + 7 + 40
    share = max(s for s in range(1, 257) if sum(min(n, s) for _, n in sizes) <= 100)
    assert lengths == {"big": share, "bias": 7, "mid": 40}
    assert all(s.start >= 0 and s.stop <= dict(sizes)[s.name] for s in slices)


def test_layout_groups_the_columns_and_matches_the_history() -> None:
    model = torch.nn.ModuleDict({"encoder": torch.nn.Linear(6, 4), "head": torch.nn.Linear(4, 2)})
    plan = plan_slices(model.named_parameters(), elements_per_tensor=5, seed=3)
    shards = {s.name: s for s in parameter_shards(model)}
    layout = column_layout(plan, shards, group_depth=1)
    assert layout.group_names == ("encoder", "head")
    expected = [0 if s.name.startswith("encoder") else 1 for s in plan for _ in range(s.length)]
    assert layout.group_index.tolist() == expected
    assert [(p.name, p.length) for p in layout.pieces] == [(s.name, s.length) for s in plan]
    assert layout.sharded_columns is None and layout.num_elements == layout.total_elements
    history = SampledParameterHistory(model.named_parameters(), slices=plan)
    assert torch.equal(history.group_index, layout.group_index)
    assert history.slices == tuple(plan) and plan[0] == SampledSlice(*plan[0].__dict__.values())
