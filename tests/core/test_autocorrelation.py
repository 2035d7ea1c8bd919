"""Tests for learnscope.autocorrelation.analysis and its record, against numpy and emcee."""

from __future__ import annotations

import math
import threading
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from learnscope.autocorrelation.analysis import (
    autocorrelation,
    integrated_time,
    is_reliable,
    prepare_summary,
    summarize,
    summarize_several,
)
from learnscope.records.autocorrelation import AutocorrelationSummary, GroupAutocorrelation

emcee_autocorr = pytest.importorskip("emcee.autocorr")


def ar1(coefficient: float, num_steps: int, num_columns: int, seed: int = 0) -> np.ndarray:
    """AR(1) series ``x_t = coefficient * x_{t-1} + e_t``, ``[num_steps, num_columns]``."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((num_steps, num_columns))
    series = np.empty_like(noise)
    series[0] = noise[0] / math.sqrt(1 - coefficient**2)  # start in the stationary state
    for t in range(1, num_steps):
        series[t] = coefficient * series[t - 1] + noise[t]
    return series


def reference_acf(series: np.ndarray) -> np.ndarray:
    """Direct float64 ACF of one series at every lag, ``np.correlate`` style (no FFT)."""
    centred = series - series.mean()
    full = np.correlate(centred, centred, mode="full")[len(centred) - 1 :]
    return full / full[0]


@pytest.fixture(scope="module")
def ar09() -> np.ndarray:
    return ar1(0.9, 20000, 4, seed=1)


# --- autocorrelation -------------------------------------------------------------------


def test_ar1_positive_lag1_and_shape(ar09: np.ndarray) -> None:
    acf = autocorrelation(torch.from_numpy(ar09), max_lag=50)
    assert acf.shape == (51, 4)
    assert torch.equal(acf[0], torch.ones(4, dtype=acf.dtype))
    assert torch.allclose(acf[1], torch.full((4,), 0.9, dtype=acf.dtype), atol=0.03)


def test_ar1_negative_lag1() -> None:
    acf = autocorrelation(torch.from_numpy(ar1(-0.5, 20000, 3, seed=2)), max_lag=3)
    assert torch.allclose(acf[1], torch.full((3,), -0.5, dtype=acf.dtype), atol=0.03)
    assert torch.allclose(acf[2], torch.full((3,), 0.25, dtype=acf.dtype), atol=0.03)


def test_no_wrap_around_against_direct_reference() -> None:
    series = np.random.default_rng(3).standard_normal((13, 3))
    acf = autocorrelation(torch.from_numpy(series)).numpy()
    assert acf.shape == (13, 3)
    for column in range(3):
        np.testing.assert_allclose(acf[:, column], reference_acf(series[:, column]), atol=1e-12)


@pytest.mark.parametrize("num_steps", [2, 3, 7, 200, 220])
def test_any_length_including_odd_fft_lengths(num_steps: int) -> None:
    # T=200 with max_lag=43 and T=220 in summarize use an FFT of odd length 243.
    series = np.random.default_rng(num_steps).standard_normal((num_steps, 4))
    max_lag = min(43, num_steps - 1)
    acf = autocorrelation(torch.from_numpy(series), max_lag=max_lag).numpy()
    reference = np.stack([reference_acf(series[:, k]) for k in range(4)], axis=1)
    np.testing.assert_allclose(acf, reference[: max_lag + 1], atol=1e-12)
    summary = summarize(
        {"params": torch.from_numpy(series)},
        torch.tensor([0, 0, 1, 1]),
        ["a", "b"],
        step=0,
        lags=(1,),
    )
    for index, group in enumerate(summary.groups):
        expected = reference[:2, 2 * index : 2 * index + 2].mean(axis=1)
        np.testing.assert_allclose(group.mean_acf, expected, atol=1e-9)
        assert group.rho1_median == pytest.approx(expected[1], abs=1e-9)


def test_columns_are_independent() -> None:
    history = torch.randn(300, 5, generator=torch.Generator().manual_seed(4))
    changed = history.clone()
    changed[:, 2] = torch.linspace(-3, 7, 300) ** 2
    before, after = autocorrelation(history), autocorrelation(changed)
    keep = [0, 1, 3, 4]
    assert torch.allclose(before[:, keep], after[:, keep], atol=1e-6, rtol=0)
    assert not torch.allclose(before[:, 2], after[:, 2])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("detrend", ["mean", "linear"])
def test_constant_columns_give_nan_and_leave_others_alone(dtype: torch.dtype, detrend: str) -> None:
    noise = torch.randn(300, 2, generator=torch.Generator().manual_seed(5), dtype=dtype)
    constants = torch.tensor([0.0, 0.1, 1e4, -3.7], dtype=dtype).expand(300, 4)
    history = torch.cat([noise[:, :1], constants, noise[:, 1:]], dim=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        acf = autocorrelation(history, detrend=detrend)
    assert acf[:, 1:5].isnan().all()
    assert not acf[:, [0, 5]].isnan().any()
    alone = autocorrelation(noise, detrend=detrend)
    assert torch.allclose(acf[:, [0, 5]], alone, atol=1e-6, rtol=0)


def test_linear_detrend_removes_drift() -> None:
    rng = np.random.default_rng(6)
    steps = np.arange(2000)[:, None]
    drifting = 0.01 * steps * np.array([1.0, -2.0, 1.5]) + rng.standard_normal((2000, 3))
    history = torch.from_numpy(drifting)
    linear = autocorrelation(history, max_lag=5, detrend="linear")
    mean = autocorrelation(history, max_lag=5, detrend="mean")
    assert linear[1].abs().max() < 0.05
    assert mean[1].min() > 0.9


def test_float32_and_float64_agree(ar09: np.ndarray) -> None:
    as64 = autocorrelation(torch.from_numpy(ar09[:2000]), max_lag=100)
    as32 = autocorrelation(torch.from_numpy(ar09[:2000]).float(), max_lag=100)
    assert as64.dtype == torch.float64 and as32.dtype == torch.float32
    assert torch.allclose(as32.double(), as64, atol=1e-5, rtol=0)


def test_one_dimensional_input_and_integer_input() -> None:
    series = torch.arange(10) % 3
    acf = autocorrelation(series, max_lag=4)
    assert acf.shape == (5,) and acf.dtype == torch.float32
    expected = reference_acf(series.double().numpy())[:5]
    np.testing.assert_allclose(acf.numpy(), expected, atol=1e-6)


@pytest.mark.parametrize(
    ("history", "kwargs", "message"),
    [
        (torch.zeros(5, 2, 2), {}, "history must be"),
        (torch.zeros(1, 3), {}, "at least 2 steps"),
        (torch.zeros(5, 2, dtype=torch.complex64), {}, "real"),
        (torch.zeros(5, 2), {"max_lag": 5}, "max_lag must be in 0..4"),
        (torch.zeros(5, 2), {"max_lag": -1}, "max_lag must be in 0..4"),
        (torch.zeros(5, 2), {"detrend": "quadratic"}, "'mean', 'linear'"),
    ],
)
def test_bad_arguments_raise_clear_errors(
    history: torch.Tensor, kwargs: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        autocorrelation(history, **kwargs)


# --- integrated_time and is_reliable ----------------------------------------------------


def test_integrated_time_matches_emcee_and_theory(ar09: np.ndarray) -> None:
    tau = integrated_time(autocorrelation(torch.from_numpy(ar09)), c=5.0).numpy()
    assert tau.shape == (4,)
    for column in range(4):
        reference = emcee_autocorr.integrated_time(ar09[:, column], c=5)[0]
        assert tau[column] == pytest.approx(reference, rel=0.10)
        assert tau[column] == pytest.approx(19.0, rel=0.20)
    assert is_reliable(torch.from_numpy(tau), num_steps=ar09.shape[0]).all()


def test_integrated_time_on_one_and_two_dimensional_acf() -> None:
    rho = 0.5 ** torch.arange(60, dtype=torch.float64)  # exact AR(1) ACF: tau = 3
    assert integrated_time(rho).shape == ()
    assert integrated_time(rho).item() == pytest.approx(3.0, abs=1e-3)
    columns = torch.stack([rho, torch.full_like(rho, torch.nan), 0.8 ** torch.arange(60.0)], 1)
    tau = integrated_time(columns)
    assert tau.shape == (3,)
    assert tau[0].item() == pytest.approx(3.0, abs=1e-3)
    assert tau[1].isnan()
    assert tau[2].item() == pytest.approx(9.0, rel=0.02)


def test_window_not_found_is_unreliable() -> None:
    never_decays = torch.ones(10, 2)
    tau = integrated_time(never_decays)
    assert torch.equal(tau, torch.full((2,), 19.0))  # the last window, M = 9
    assert not is_reliable(tau, num_steps=10_000, max_lag=9).any()
    assert is_reliable(tau, num_steps=10_000, max_lag=1000).all()


def test_is_reliable_needs_enough_steps_finite_positive_tau() -> None:
    tau = torch.tensor([2.0, 20.0, math.nan, math.inf, -0.5])
    assert is_reliable(tau, num_steps=1000).tolist() == [True, True, False, False, False]
    assert is_reliable(tau, num_steps=999).tolist() == [True, False, False, False, False]


# --- summarize --------------------------------------------------------------------------


def grouped_history() -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Three groups: positively correlated, anti-correlated, and one with constant columns."""
    positive = ar1(0.3, 2000, 6, seed=7)
    negative = ar1(-0.5, 2000, 5, seed=8)
    mixed = np.concatenate([ar1(0.6, 2000, 3, seed=9), np.full((2000, 2), 2.5)], axis=1)
    history = torch.from_numpy(np.concatenate([positive, negative, mixed], axis=1)).float()
    group_index = torch.tensor([0] * 6 + [1] * 5 + [2] * 5)
    permutation = torch.randperm(16, generator=torch.Generator().manual_seed(10))
    return history[:, permutation], group_index[permutation], ["pos", "neg", "mixed"]


def test_summarize_matches_numpy_on_the_same_acf() -> None:
    history, group_index, names = grouped_history()
    summary = summarize({"params": history}, group_index, names, step=42, lags=(1, 3))
    assert isinstance(summary, AutocorrelationSummary)
    assert summary.step == 42 and summary.lags == (1, 3)
    assert [(g.kind, g.group) for g in summary.groups] == [("params", n) for n in names]
    acf = autocorrelation(history).double().numpy()
    for index, group in enumerate(summary.groups):
        columns = acf[:, (group_index == index).numpy()]
        assert group.mean_acf.shape == (4,)
        np.testing.assert_allclose(group.mean_acf, np.nanmean(columns[:4], axis=1), atol=1e-5)
        assert group.rho1_median == pytest.approx(np.nanmedian(columns[1]), abs=1e-5)
        q25, q75 = np.nanquantile(columns[1], [0.25, 0.75])
        assert group.rho1_q25 == pytest.approx(q25, abs=1e-5)
        assert group.rho1_q75 == pytest.approx(q75, abs=1e-5)


def test_summarize_tau_reported_only_when_meaningful() -> None:
    history, group_index, names = grouped_history()
    groups = summarize({"grads": history}, group_index, names, step=0).groups
    pos, neg, mixed = groups
    mean_acf = np.nanmean(
        autocorrelation(history).double().numpy()[:, (group_index == 0).numpy()], axis=1
    )
    expected = integrated_time(torch.from_numpy(mean_acf)).item()
    assert pos.tau == pytest.approx(expected, rel=1e-4)
    assert pos.tau == pytest.approx(1.3 / 0.7, rel=0.15)
    assert neg.tau is None  # anti-correlated: tau means nothing
    assert neg.rho1_median == pytest.approx(-0.5, abs=0.05)
    assert mixed.tau is not None  # the constant columns are ignored


def test_summarize_tau_none_for_too_short_history(ar09: np.ndarray) -> None:
    history = torch.from_numpy(ar09[:256]).float()  # tau 19 needs 950 steps
    summary = summarize({"params": history}, torch.zeros(4, dtype=torch.long), ["all"], step=1)
    assert summary.groups[0].tau is None
    assert summary.groups[0].rho1_median > 0.8


def test_summarize_ignores_constant_columns() -> None:
    history, group_index, names = grouped_history()
    extra = torch.full((history.shape[0], 3), 7.0)
    padded = torch.cat([history, extra], dim=1)
    padded_index = torch.cat([group_index, torch.tensor([0, 1, 2])])
    plain = summarize({"params": history}, group_index, names, step=0).groups
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        extended = summarize({"params": padded}, padded_index, names, step=0).groups
    for before, after in zip(plain, extended, strict=True):
        np.testing.assert_allclose(after.mean_acf, before.mean_acf, atol=1e-6)
        assert after.rho1_median == pytest.approx(before.rho1_median, abs=1e-6)
        assert after.tau == pytest.approx(before.tau, abs=1e-5)


def test_summarize_all_constant_group_and_several_kinds() -> None:
    history = torch.cat([torch.randn(64, 3), torch.zeros(64, 2)], dim=1)
    summary = summarize(
        {"params": history.cumsum(0), "grads": history},
        torch.tensor([0, 0, 0, 1, 1]),
        ["head", "frozen"],
        step=3,
        lags=(1,),
    )
    assert [(g.kind, g.group) for g in summary.groups] == [
        ("params", "head"),
        ("params", "frozen"),
        ("grads", "head"),
        ("grads", "frozen"),
    ]
    frozen = summary.groups[3]
    assert np.isnan(frozen.mean_acf).all() and math.isnan(frozen.rho1_median)
    assert frozen.tau is None
    scalars = summary.to_scalars()
    assert not any(name.startswith("~learnscope/autocorrelation/grads/frozen/") for name in scalars)
    assert "~learnscope/autocorrelation/params/head/lag_1" in scalars


def test_summarize_validates_arguments() -> None:
    history = torch.randn(20, 4)
    index = torch.zeros(4, dtype=torch.long)
    with pytest.raises(ValueError, match="below the history length 20"):
        summarize({"params": history}, index, ["all"], step=0, lags=(20,))
    with pytest.raises(ValueError, match=r"group_index must be \[K\] = \[4\]"):
        summarize({"params": history}, index[:3], ["all"], step=0)
    with pytest.raises(ValueError, match="histories is empty"):
        summarize({}, index, ["all"], step=0)
    with pytest.raises(ValueError, match="detrend must be one of"):
        summarize({"params": history}, index, ["all"], step=0, detrend="none")


# --- the record ---------------------------------------------------------------------------


def test_record_flattens_to_scalars_and_is_read_only() -> None:
    group = GroupAutocorrelation("encoder", "params", np.array([1.0, 0.8, 0.6]), 0.8, 0.7, 0.9, 4)
    summary = AutocorrelationSummary(step=5, lags=(1, 2), groups=(group,))
    assert summary.to_scalars() == {
        "~learnscope/autocorrelation/params/encoder/lag_1": 0.8,
        "~learnscope/autocorrelation/params/encoder/lag_2": 0.6,
        "~learnscope/autocorrelation/params/encoder/rho1_median": 0.8,
        "~learnscope/autocorrelation/params/encoder/rho1_q25": 0.7,
        "~learnscope/autocorrelation/params/encoder/rho1_q75": 0.9,
        "~learnscope/autocorrelation/params/encoder/tau": 4.0,
    }
    with pytest.raises(ValueError):
        group.mean_acf[0] = 2.0
    with pytest.raises(ValueError, match="outside 0..2"):
        AutocorrelationSummary(step=5, lags=(3,), groups=(group,))


def bits(summary: AutocorrelationSummary) -> list[tuple[object, ...]]:
    """Every number of a summary as its bytes, so that equal means bit for bit (NaN too)."""

    def of(value: float | None) -> bytes | None:
        return None if value is None else np.float64(value).tobytes()

    return [
        (g.group, g.kind, g.mean_acf.tobytes(), of(g.rho1_median), of(g.rho1_q25))
        + (of(g.rho1_q75), of(g.tau), g.non_finite_elements, g.num_steps)
        for g in summary.groups
    ]


def test_a_summary_prepared_here_and_finished_on_another_thread_is_the_same_bit_for_bit() -> None:
    history, group_index, names = grouped_history()
    history[5, 0] = torch.nan  # a column left out for a non-finite value
    other = ({"params": history[:300, :4] * 3}, torch.zeros(4, dtype=torch.long), ["other"])
    sources = [({"params": history, "grads": history.flip(0)}, group_index, names), other]
    expected = summarize_several(sources, step=7, lags=(1, 2, 5))
    pending = prepare_summary(sources, step=7, lags=(1, 2, 5))
    held = pending.nbytes
    finished: list[AutocorrelationSummary] = []
    thread = threading.Thread(target=lambda: finished.append(pending.finish(all_scalars=False)))
    thread.start()
    thread.join()
    (got,) = finished
    assert bits(got) == bits(expected) and got.step == 7 and got.lags == (1, 2, 5)
    assert got.all_scalars is False and expected.all_scalars is True
    assert held == 2 * history.nbytes + 300 * 4 * 4 + 16 * 8 * 2 + 4 * 8 and pending.nbytes == 0
    with pytest.raises(RuntimeError, match="summary of step 7 is finished"):
        pending.finish()


def test_the_reduction_over_ranks_runs_when_prepared_never_when_finished() -> None:
    history, group_index, names = grouped_history()
    calls: list[str] = []

    def reduce(tensor: torch.Tensor) -> torch.Tensor:
        calls.append(threading.current_thread().name)
        return tensor

    alone = SimpleNamespace(  # one rank holding every column
        positions=torch.arange(16), group_index=group_index, total_elements=16, reduce=reduce
    )
    kinds = {"params": history, "grads": history * 2}
    expected = summarize(kinds, group_index, names, step=3, lags=(1, 2))
    pending = prepare_summary([(kinds, group_index, names)], step=3, lags=(1, 2), sharded=[alone])
    assert calls == [threading.current_thread().name] * 2  # one per kind, here
    finished: list[AutocorrelationSummary] = []
    thread = threading.Thread(target=lambda: finished.append(pending.finish()))
    thread.start()
    thread.join()
    assert len(calls) == 2 and bits(finished[0]) == bits(expected)
    assert pending.nbytes == 0


# --- CUDA -----------------------------------------------------------------------------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
def test_cuda_matches_cpu_and_stays_on_device() -> None:
    history, group_index, names = grouped_history()
    on_cpu = autocorrelation(history, max_lag=20)
    on_gpu = autocorrelation(history.cuda(), max_lag=20)
    assert on_gpu.device.type == "cuda"
    assert torch.allclose(on_gpu.cpu(), on_cpu, atol=1e-5, equal_nan=True)
    cpu_groups = summarize({"p": history}, group_index, names, step=0).groups
    gpu_groups = summarize({"p": history.cuda()}, group_index.cuda(), names, step=0).groups
    for a, b in zip(cpu_groups, gpu_groups, strict=True):
        np.testing.assert_allclose(a.mean_acf, b.mean_acf, atol=1e-5)
        assert a.rho1_median == pytest.approx(b.rho1_median, abs=1e-5)


@cuda
def test_cuda_analysis_syncs_only_for_the_final_transfer() -> None:
    history, group_index, names = grouped_history()
    history, group_index = history.cuda(), group_index.cuda()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        acf = autocorrelation(history, detrend="linear")
        integrated_time(acf)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            summarize({"p": history, "g": history}, group_index, names, step=0)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    assert len(syncs) <= 1, [str(w.message) for w in syncs]


@cuda
def test_cuda_prepare_does_not_sync_and_another_thread_finishes_on_its_stream() -> None:
    history, group_index, names = grouped_history()
    history, group_index = history.cuda(), group_index.cuda()
    expected = summarize({"p": history}, group_index, names, step=0, lags=(1, 2))
    side = torch.cuda.Stream()  # a training step's stream other than the default one
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        copy = history * 1.0  # the history's copy, made on that stream
        torch.cuda.set_sync_debug_mode("error")
        try:
            pending = prepare_summary([({"p": copy}, group_index, names)], step=0, lags=(1, 2))
        finally:
            torch.cuda.set_sync_debug_mode("default")
    del copy
    finished: list[AutocorrelationSummary] = []
    thread = threading.Thread(target=lambda: finished.append(pending.finish()))
    thread.start()
    thread.join()
    (got,) = finished
    for a, b in zip(expected.groups, got.groups, strict=True):
        np.testing.assert_allclose(a.mean_acf, b.mean_acf, atol=1e-6)
        assert a.rho1_median == pytest.approx(b.rho1_median, abs=1e-6)


# --- extreme scales, empty and non-finite input ---------------------------------------------


@pytest.mark.parametrize("detrend", ["mean", "linear"])
@pytest.mark.parametrize("scale", [1e20, 1e-25, 1e36, 1e-30])
def test_float32_acf_is_finite_and_scale_free_at_extreme_scales(scale: float, detrend: str) -> None:
    series = ar1(0.9, 4000, 3, seed=11)
    history = torch.from_numpy(series * scale).float()  # 1e20: the FFT's power overflowed
    assert torch.isfinite(history).all()
    acf = autocorrelation(history, max_lag=60, detrend=detrend)
    assert torch.isfinite(acf).all()
    unscaled = autocorrelation(torch.from_numpy(series).float(), max_lag=60, detrend=detrend)
    torch.testing.assert_close(acf, unscaled, atol=2e-6, rtol=0)
    if detrend == "mean":
        taus = integrated_time(autocorrelation(history))
        for column in range(3):
            reference = emcee_autocorr.function_1d(series[:, column])[:61]
            np.testing.assert_allclose(acf[:, column].double().numpy(), reference, atol=1e-5)
            tau = taus[column].item()
            assert tau == pytest.approx(emcee_autocorr.integrated_time(series[:, column])[0], 1e-3)


@pytest.mark.parametrize("scale", [1e20, 1e-25])
def test_summarize_is_scale_free_at_extreme_scales(scale: float) -> None:
    series = ar1(0.5, 3000, 4, seed=12)
    index = torch.tensor([0, 0, 1, 1])
    plain = summarize({"params": torch.from_numpy(series).float()}, index, ["a", "b"], step=0)
    scaled = summarize(
        {"params": torch.from_numpy(series * scale).float()}, index, ["a", "b"], step=0
    )
    for ours, reference in zip(scaled.groups, plain.groups, strict=True):
        assert np.isfinite(ours.mean_acf).all() and ours.tau is not None
        np.testing.assert_allclose(ours.mean_acf, reference.mean_acf, atol=1e-5)
        assert ours.rho1_median == pytest.approx(reference.rho1_median, abs=1e-5)
        assert ours.tau == pytest.approx(reference.tau, rel=1e-4)


def test_history_without_columns_raises_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"history has no columns \(shape \(10, 0\)\)"):
        autocorrelation(torch.zeros(10, 0))
    empty = torch.zeros(0, dtype=torch.long)
    with pytest.raises(ValueError, match="history has no columns"):
        summarize({"params": torch.zeros(10, 0)}, empty, ["all"], step=0, lags=(1,))


def test_non_finite_columns_are_left_out_and_counted_per_group() -> None:
    series = torch.from_numpy(ar1(0.8, 2000, 6, seed=13)).float()
    dirty = series.clone()
    dirty[100, 0] = float("nan")  # one NaN element poisoned its whole group before
    dirty[5, 3] = float("inf")
    dirty[:, 4] = float("-inf")
    index = torch.tensor([0, 0, 0, 1, 1, 1])
    acf = autocorrelation(dirty, max_lag=20)
    assert torch.isnan(acf[:, [0, 3, 4]]).all()
    clean_acf = autocorrelation(series, max_lag=20)
    torch.testing.assert_close(acf[:, [1, 2, 5]], clean_acf[:, [1, 2, 5]])

    summary = summarize({"params": dirty}, index, ["a", "b"], step=3, lags=(1, 2))
    assert [g.non_finite_elements for g in summary.groups] == [1, 2]
    kept = summarize(
        {"params": series[:, [1, 2, 5]]}, torch.tensor([0, 0, 1]), ["a", "b"], step=3, lags=(1, 2)
    )
    for ours, reference in zip(summary.groups, kept.groups, strict=True):
        np.testing.assert_allclose(ours.mean_acf, reference.mean_acf, atol=1e-6)
        assert ours.rho1_median == pytest.approx(reference.rho1_median, abs=1e-6)
        assert ours.rho1_q25 == pytest.approx(reference.rho1_q25, abs=1e-6)
        assert (ours.tau is None) == (reference.tau is None)
    scalars = summary.to_scalars()
    assert scalars["~learnscope/autocorrelation/params/a/non_finite_elements"] == 1.0
    assert scalars["~learnscope/autocorrelation/params/b/non_finite_elements"] == 2.0
    clean = summarize({"params": series}, index, ["a", "b"], step=3, lags=(1,))
    assert [g.non_finite_elements for g in clean.groups] == [0, 0]
    assert not any("non_finite" in name for name in clean.to_scalars())


def test_record_checks_the_non_finite_count() -> None:
    acf = np.array([1.0, 0.5])
    assert GroupAutocorrelation("a", "params", acf, 0.5, 0.4, 0.6, None).non_finite_elements == 0
    with pytest.raises(ValueError, match="non_finite_elements .* must be an int of at least 0"):
        GroupAutocorrelation("a", "params", acf, 0.5, 0.4, 0.6, None, non_finite_elements=-1)
