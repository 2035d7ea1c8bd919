"""The GPU proof of issue 13, as one prepared run: CUDA tests, then the overhead benchmark.

Run from the repository root on a machine with one CUDA GPU::

    OUT=/some/dir python benchmarks/gpu_proof.py          # at most 8 minutes

It writes into ``$OUT`` (default ``./gpu_proof_out``):

* ``environment.txt``: ``nvidia-smi``, torch, CUDA and Lightning versions;
* ``cuda_tests.txt`` and ``cuda_tests.xml``: ``tests/callbacks/test_cuda.py`` (no host sync in the
  callbacks' hooks, and on whole ordinary steps, under ``torch.cuda.set_sync_debug_mode("error")``;
  Lightning ``FSDPStrategy`` and ``ModelParallelStrategy`` fits on the one GPU equal to the
  unsharded fit) and the four older CUDA-only tests;
* ``overhead_cuda.md``: ``benchmarks/overhead.py --device cuda`` (the 11M-parameter transformer),
  each callback's overhead of the median step;
* ``summary.json``: each part's exit status and wall time.

``--dry-run`` runs every part on the CPU with tiny settings (the CUDA tests with
``LEARNSCOPE_CUDA_DRY_RUN=1``), so the script and its tests are proven before they meet a GPU.
A part that overruns its share of the time is stopped and the next one runs; the script always
writes ``summary.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

TOTAL_SECONDS = 470  # under the 8 minutes a lent GPU gives one command
OLDER_CUDA_TESTS = [
    "tests/core/test_sampled_history.py::test_record_never_syncs_with_the_host",
    "tests/core/test_autocorrelation.py::test_cuda_matches_cpu_and_stays_on_device",
    "tests/core/test_autocorrelation.py::test_cuda_analysis_syncs_only_for_the_final_transfer",
    "tests/core/test_collapse.py::test_cuda_input_matches_cpu",
]
ENVIRONMENT = """
import torch, lightning
print("torch", torch.__version__, "cuda", torch.version.cuda, "lightning", lightning.__version__)
print("device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
"""


def parts(out: Path, dry_run: bool) -> list[tuple[str, list[str], dict[str, str], int]]:
    """``(name, command, extra environment, seconds allowed)`` of each part, in order."""
    python = sys.executable
    tests = [
        python,
        "-m",
        "pytest",
        "-q",
        "-rs",
        "-p",
        "no:cacheprovider",
        "tests/callbacks/test_cuda.py",
        *OLDER_CUDA_TESTS,
        f"--junitxml={out / 'cuda_tests.xml'}",
    ]
    overhead = [python, "benchmarks/overhead.py", "--variants", "none", "training_helper"]
    overhead += ["model_autocorrelation", "naive_health"]
    if dry_run:
        overhead += ["--device", "cpu", "--steps", "20", "--warmup", "5", "--repeats", "1"]
    else:
        overhead += ["--device", "cuda", "--steps", "300", "--warmup", "50", "--repeats", "3"]
    smi = "nvidia-smi || true" if not dry_run else "echo dry run: no nvidia-smi"
    return [
        ("environment", ["bash", "-c", f"{smi}; {python} -c '{ENVIRONMENT}'"], {}, 60),
        ("cuda_tests", tests, {"LEARNSCOPE_CUDA_DRY_RUN": "1"} if dry_run else {}, 240),
        ("overhead_cuda", overhead, {}, 300),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny settings, on the CPU")
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu_proof_out"))
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parent.parent
    start = time.monotonic()
    summary: dict[str, dict[str, float | int | str]] = {}
    for name, command, extra, allowed in parts(out, args.dry_run):
        left = TOTAL_SECONDS - (time.monotonic() - start)
        if left < 20:
            summary[name] = {"status": "not run: out of time"}
            continue
        began = time.monotonic()
        suffix = ".md" if name == "overhead_cuda" else ".txt"
        with (out / f"{name}{suffix}").open("w") as stream:
            try:
                done = subprocess.run(
                    command,
                    cwd=root,
                    env={**os.environ, **extra},
                    stdout=stream,
                    stderr=subprocess.STDOUT if name != "overhead_cuda" else subprocess.PIPE,
                    timeout=min(allowed, left),
                    text=True,
                    check=False,
                )
                status: int | str = done.returncode
                if done.stderr:
                    (out / f"{name}.stderr.txt").write_text(done.stderr)
            except subprocess.TimeoutExpired:
                status = "timed out"
        summary[name] = {"status": status, "seconds": round(time.monotonic() - began, 1)}
        print(f"{name}: {summary[name]}", flush=True)
    summary["total"] = {"seconds": round(time.monotonic() - start, 1), "dry_run": int(args.dry_run)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print((out / "overhead_cuda.md").read_text() if (out / "overhead_cuda.md").exists() else "")
    return (
        0 if all(part.get("status") == 0 for key, part in summary.items() if key != "total") else 1
    )


if __name__ == "__main__":
    sys.exit(main())
