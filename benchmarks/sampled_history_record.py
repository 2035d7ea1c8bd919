"""``SampledParameterHistory.record()`` of an older commit and of the working tree, side by side.

The history was split into parts (sampling plan, column layout, ring buffer); this checks that
``record()``, which runs at every optimizer step, did not get slower. The older commit's
``learnscope/autocorrelation/sampled_history.py`` (a single module before the split) is loaded from
git into a temporary module; both histories sample the same slices of a model of 50 tensors (25
``Linear(64, 64)``), record in alternating rounds of 100 calls on one thread, and must hold the
same values. Prints the median and the lowest per-call time of 40 rounds, with gradients and
for parameter values only.

Run::

    python benchmarks/sampled_history_record.py [--base COMMIT]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from learnscope.autocorrelation.sampled_history import SampledParameterHistory

ROOT = Path(__file__).resolve().parents[1]
BEFORE_SPLIT = "2ff21f8"  # the last commit with learnscope/sampled_history.py in one piece


def old_history_class(commit: str) -> Any:
    """``SampledParameterHistory`` as ``commit`` had it, loaded from git."""
    source = subprocess.run(
        ["git", "show", f"{commit}:learnscope/sampled_history.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "old_sampled_history.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_sampled_history", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_sampled_history"] = module
    spec.loader.exec_module(module)
    return module.SampledParameterHistory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=BEFORE_SPLIT, help="the older commit")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(25)])  # 50 tensors
    for parameter in model.parameters():
        parameter.grad = torch.randn_like(parameter)
    classes = {"old": old_history_class(args.base), "new": SampledParameterHistory}
    for kinds in (("params", "grads"), ("params",)):
        histories = {
            name: cls(model.named_parameters(), capacity=256, kinds=kinds)
            for name, cls in classes.items()
        }
        times: dict[str, list[float]] = {name: [] for name in histories}
        for _ in range(200):  # warm up, and wrap the ring once
            for history in histories.values():
                history.record()
        for index in range(args.rounds):
            order = ("old", "new") if index % 2 == 0 else ("new", "old")
            for name in order:
                start = time.perf_counter()
                for _ in range(args.calls):
                    histories[name].record()
                times[name].append((time.perf_counter() - start) / args.calls * 1e6)
        for kind in kinds:
            assert torch.equal(histories["old"].history(kind), histories["new"].history(kind))
        figures = ", ".join(
            f"{name} {statistics.median(t):.1f} us (lowest {min(t):.1f})"
            for name, t in times.items()
        )
        print(f"record(), kinds={kinds}, 50 tensors: {figures}")


if __name__ == "__main__":
    main()
