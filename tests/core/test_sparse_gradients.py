"""Sparse gradients in a sampled history: the same elements as their dense view, never a stop."""

from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest
import torch
from torch import nn

from learnscope.autocorrelation.sampled_gradients import sparse_range
from learnscope.autocorrelation.sampled_history import SampledParameterHistory, SampledSlice


def dense_reference(tensor: torch.Tensor) -> np.ndarray:
    """The dense float64 view of a sparse COO tensor, summed by numpy from its stored values."""
    indices = tensor._indices().numpy()
    values = tensor._values().double().numpy()
    dense = np.zeros(tuple(tensor.shape), dtype=np.float64)
    np.add.at(dense, tuple(indices), values)  # duplicates of an uncoalesced tensor add up
    return dense.reshape(-1)


def uncoalesced(shape: tuple[int, ...], sparse_dims: int, nnz: int, seed: int) -> torch.Tensor:
    """A random sparse COO tensor whose stored values repeat some indices (uncoalesced)."""
    generator = torch.Generator().manual_seed(seed)
    distinct = [torch.randint(0, size, (nnz,), generator=generator) for size in shape[:sparse_dims]]
    indices = torch.stack(distinct) if distinct else torch.zeros(0, nnz, dtype=torch.long)
    indices = torch.cat([indices, indices[:, : nnz // 3]], dim=1)  # a third stored twice
    values = torch.randn(indices.shape[1], *shape[sparse_dims:], generator=generator)
    tensor = torch.sparse_coo_tensor(indices, values, shape, check_invariants=True)
    assert not tensor.is_coalesced() or nnz == 0
    return tensor


@pytest.mark.parametrize(
    ("shape", "sparse_dims", "nnz"),
    [
        ((7, 3), 1, 5),  # an embedding's gradient: rows of 3
        ((4, 3, 2), 2, 6),  # hybrid: two sparse dimensions, rows of 2
        ((3, 2, 2), 1, 4),  # hybrid: one sparse dimension, rows of 2 x 2
        ((5, 4), 2, 7),  # every dimension sparse: rows of one element
        ((6, 2), 1, 0),  # no stored value at all
    ],
)
def test_every_range_of_a_sparse_tensor_is_that_of_its_dense_view(
    shape: tuple[int, ...], sparse_dims: int, nnz: int
) -> None:
    tensor = uncoalesced(shape, sparse_dims, nnz, seed=nnz)
    reference = dense_reference(tensor)
    assert reference.any() == bool(nnz)
    for start, stop in itertools.combinations(range(reference.size + 1), 2):
        sampled = sparse_range(tensor, start, stop - start)
        assert sampled.shape == (stop - start,) and sampled.dtype == torch.float32
        np.testing.assert_allclose(sampled.double().numpy(), reference[start:stop], atol=1e-6)
        assert torch.allclose(sampled, tensor.to_dense().reshape(-1)[start:stop], atol=1e-6)


def test_a_non_finite_value_outside_the_range_stays_outside() -> None:
    indices = torch.tensor([[0, 5]])
    values = torch.tensor([[1.0, 2.0], [float("nan"), 3.0]])
    tensor = torch.sparse_coo_tensor(indices, values, check_invariants=True)
    assert sparse_range(tensor, 0, 4).tolist() == [1.0, 2.0, 0.0, 0.0]
    assert sparse_range(tensor, 8, 3).tolist()[:2] == [0.0, 0.0]
    assert sparse_range(tensor, 8, 3)[2].isnan()


class SparseRecommender(nn.Module):
    """A sparse embedding table (SparseAdam's kind) and a dense layer after it."""

    def __init__(self) -> None:
        super().__init__()
        self.user_emb = nn.Embedding(12, 5, sparse=True)
        self.head = nn.Linear(5, 1)

    def forward(self, users: torch.Tensor) -> torch.Tensor:
        return self.head(self.user_emb(users)).squeeze(-1)


def test_an_embeddings_sparse_gradient_is_recorded_as_its_dense_view() -> None:
    """Steps of batches with repeated ids: each column is that element of ``grad.to_dense()``."""
    torch.manual_seed(0)
    model = SparseRecommender()
    rows = [
        SampledSlice("user_emb.weight", 0, 1),
        SampledSlice("user_emb.weight", 3, 11),  # across three rows
        SampledSlice("user_emb.weight", 52, 8),  # the last rows
        SampledSlice("user_emb.weight", 0, 60),  # the whole table
        SampledSlice("head.weight", 1, 3),
    ]
    history = SampledParameterHistory(model.named_parameters(), capacity=8, slices=rows)
    expected = []
    for _ in range(6):
        users = torch.randint(0, 12, (9,))
        users[-2:] = users[0]  # one id three times: an uncoalesced gradient
        model.zero_grad(set_to_none=True)
        model(users).square().sum().backward()
        gradient = model.user_emb.weight.grad
        assert gradient.layout == torch.sparse_coo and not gradient.is_coalesced()
        dense = gradient.to_dense().double().reshape(-1).numpy()
        head = model.head.weight.grad.double().reshape(-1).numpy()
        expected.append(np.concatenate([dense[0:1], dense[3:14], dense[52:60], dense, head[1:4]]))
        history.record()
    recorded = history.history("grads").double().numpy()
    assert recorded.shape == (6, 1 + 11 + 8 + 60 + 3)
    np.testing.assert_allclose(recorded, np.stack(expected), rtol=1e-6, atol=1e-7)
    assert np.count_nonzero(recorded[:, 20:80], axis=1).min() > 0
    assert history.group_names == ["user_emb", "head"]


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_a_gradient_of_another_layout_records_zeros_with_one_warning(
    learnscope_log: pytest.LogCaptureFixture,
) -> None:
    """A sparse CSR gradient is not read; the dense parameters still are."""
    table = nn.Parameter(torch.randn(4, 6).to_sparse_csr())
    head = nn.Linear(3, 2)
    history = SampledParameterHistory(
        [("table.weight", table), ("head.weight", head.weight)], kinds=("grads",)
    )
    for step in range(3):
        table.grad = torch.randn(4, 6).to_sparse_csr()
        head.weight.grad = torch.full((2, 3), float(step))
        history.record()
    grads = history.history("grads")
    assert torch.equal(grads[:, :24], torch.zeros(3, 24))
    assert grads[:, 24:].tolist() == [[float(step)] * 6 for step in range(3)]
    warnings = [r.getMessage() for r in learnscope_log.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "'table.weight' is torch.sparse_csr" in warnings[0]
    assert "record zeros" in warnings[0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_sparse_gradient_is_read_without_syncing_with_the_host() -> None:
    model = SparseRecommender().cuda()
    history = SampledParameterHistory(model.named_parameters(), elements_per_tensor=16)
    users = torch.tensor([1, 1, 7, 3], device="cuda")
    model(users).sum().backward()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(5):
            history.record()
        rows = history.history("grads")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    dense = model.user_emb.weight.grad.to_dense().reshape(-1)
    table = history.slices[0]
    assert table.name == "user_emb.weight"
    assert torch.allclose(rows[-1, : table.length], dense[table.start : table.stop])
