"""Time the autocorrelation analysis of a full ring buffer, and show what the buffer costs.

Times :func:`learnscope.autocorrelation.analysis.autocorrelation` and
:func:`learnscope.autocorrelation.analysis.summarize` on a ``T = 256`` by ``K = 65,536`` float32
history (the defaults: 256 steps, 256 elements per tensor, capped at 65,536 elements),
median of several runs after a warm-up, and prints the bytes the ring buffers of
:class:`learnscope.autocorrelation.sampled_history.SampledParameterHistory` hold for a 10M- and a
1B-parameter transformer at the defaults (described on the meta device: nothing is
allocated). Target for ``summarize`` on the CPU: under 100 ms.

Run: ``python benchmarks/acf_analysis.py [--device cuda] [--threads N] [--repeats N]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from learnscope.autocorrelation.analysis import autocorrelation, summarize
from learnscope.autocorrelation.sampled_history import SampledParameterHistory

NUM_STEPS = 256
NUM_ELEMENTS = 65_536
NUM_GROUPS = 24
TARGET_MS = 100.0


def median_ms(
    function: Callable[[], object], device: torch.device, repeats: int
) -> tuple[float, float]:
    """Median wall time and process CPU time of ``function`` in ms, after two warm-ups.

    On a shared machine the CPU time (summed over threads) is the steadier figure.
    """
    for _ in range(2):
        function()
    wall, cpu = [], []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start, start_cpu = time.perf_counter(), time.process_time()
        function()
        if device.type == "cuda":
            torch.cuda.synchronize()
        wall.append((time.perf_counter() - start) * 1e3)
        cpu.append((time.process_time() - start_cpu) * 1e3)
    return statistics.median(wall), statistics.median(cpu)


def transformer_description(
    width: int, depth: int, vocabulary: int
) -> list[tuple[str, nn.Parameter]]:
    """Named parameters of a plain transformer encoder, on the meta device."""

    def meta(*shape: int) -> nn.Parameter:
        return nn.Parameter(torch.empty(*shape, device="meta"))

    named = [("embedding.weight", meta(vocabulary, width))]
    for layer in range(depth):
        prefix = f"encoder.layers.{layer}"
        for name in ("query", "key", "value", "output"):
            named += [
                (f"{prefix}.attention.{name}.weight", meta(width, width)),
                (f"{prefix}.attention.{name}.bias", meta(width)),
            ]
        named += [
            (f"{prefix}.mlp.up.weight", meta(4 * width, width)),
            (f"{prefix}.mlp.up.bias", meta(4 * width)),
            (f"{prefix}.mlp.down.weight", meta(width, 4 * width)),
            (f"{prefix}.mlp.down.bias", meta(width)),
        ]
        for norm in ("norm1", "norm2"):
            named += [
                (f"{prefix}.{norm}.weight", meta(width)),
                (f"{prefix}.{norm}.bias", meta(width)),
            ]
    named += [("head.weight", meta(vocabulary, width))]
    return named


def report_buffer(label: str, named: list[tuple[str, nn.Parameter]]) -> None:
    history = SampledParameterHistory(named)
    num_parameters = sum(p.numel() for _, p in named)
    print(
        f"{label}: {num_parameters / 1e6:,.0f}M parameters in {len(named)} tensors -> "
        f"K = {history.num_elements:,} sampled elements, buffers = {history.nbytes:,} bytes "
        f"({history.nbytes / 2**20:.1f} MiB)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    generator = torch.Generator().manual_seed(0)
    noise = torch.randn(NUM_STEPS, NUM_ELEMENTS, generator=generator)
    # Laid out as SampledParameterHistory.history returns it: [T, K] views of contiguous
    # [K, T] tensors (time last), which summarize reads about twice as fast as [T, K].
    params = noise.cumsum(0).T.contiguous().T.to(device)  # random walks, like parameters
    grads = noise.T.contiguous().T.to(device)  # white noise, like gradients
    group_index = torch.arange(NUM_ELEMENTS).mul(NUM_GROUPS).div(NUM_ELEMENTS).long().to(device)
    group_names = [f"group{index}" for index in range(NUM_GROUPS)]

    print(
        f"history T={NUM_STEPS} x K={NUM_ELEMENTS:,} float32 on {device} "
        f"({torch.get_num_threads()} CPU threads), {NUM_GROUPS} groups, "
        f"median of {args.repeats} runs"
    )
    timings = {
        "autocorrelation, all 256 lags": lambda: autocorrelation(params),
        "summarize, params only": lambda: summarize(
            {"params": params}, group_index, group_names, step=NUM_STEPS
        ),
        "summarize, params and grads": lambda: summarize(
            {"params": params, "grads": grads}, group_index, group_names, step=NUM_STEPS
        ),
    }
    for label, function in timings.items():
        wall, cpu = median_ms(function, device, args.repeats)
        print(f"  {label:32s} {wall:8.1f} ms wall {cpu:8.1f} ms CPU")
    print(f"  (target for summarize of one kind on the CPU: under {TARGET_MS:.0f} ms)")

    report_buffer("10M model", transformer_description(width=384, depth=6, vocabulary=2000))
    report_buffer("1B model", transformer_description(width=2048, depth=20, vocabulary=32000))


if __name__ == "__main__":
    main()
