"""A fit whose object store refuses every learnscope write: its wall time, side by side.

A local S3 server (moto, behind the fault-injecting proxy of ``tests/kit/s3_server.py``) answers
every ``PUT`` of a learnscope file with an error (``--fault``: ``503`` SlowDown by default,
``403`` AccessDenied, or ``none``), while Lightning's own files go through. The client keeps its
default retries (botocore: 5 attempts with back-off; s3fs: 5 calls for SlowDown). Each fit is the
tiny classifier of ``tests/kit/models.py`` with the three callbacks, 2 epochs, logging to
``TensorBoardLogger("s3://...")``, under ``end_timeout_s`` (``--end-timeout``, 60 s by default).
It prints, per fit, the seconds ``trainer.fit`` took, the PUTs the proxy saw and refused, and the
end of the end-of-fit line.

Every fit runs in a fresh process. **Against another version of learnscope**, in the same run:
``--baseline DIR`` runs each fit also with the ``learnscope`` package found in ``DIR``
(``PYTHONPATH=DIR``), interleaved with the current code's; ``DIR`` holds an assembled package,
e.g. for the commit before a change::

    mkdir -p /tmp/base /tmp/base_pkg && git archive e3cc344 | tar -x -C /tmp/base
    cp -r /tmp/base/learnscope /tmp/base_pkg/ && cp -r /tmp/base/plugins \\
        /tmp/base/lightning_glue /tmp/base_pkg/learnscope/
    python benchmarks/failing_store.py --baseline /tmp/base_pkg --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# The objects learnscope writes (as tests/writers/test_object_storage_writes.py names them).
LEARNSCOPE_FILES = (
    r"/learnscope_record\.d/|/projector/|/projector_config|\.learnscope$|_scalars\.json"
)
FAULTS = {"503": (503, "SlowDown"), "403": (403, "AccessDenied"), "none": None}


def run_once(fault: str, end_timeout_s: float) -> dict[str, Any]:
    """One fit against a store with ``fault``; its seconds, requests and end-of-fit line."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    # the tests' kit (tests.kit), last: a learnscope on PYTHONPATH stays first
    sys.path.append(str(REPO))
    import logging

    from lightning.pytorch.loggers import TensorBoardLogger

    from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
    from learnscope.run_directory.write_limits import WriteLimits
    from tests.kit.models import ZeroBranch, loaders, trainer
    from tests.kit.s3_server import pointed_local_s3

    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    line_log = logging.getLogger("lightning.pytorch.learnscope")
    line_log.addHandler(Keep())
    line_log.setLevel(logging.INFO)
    limits = WriteLimits(end_timeout_s=end_timeout_s)
    with pointed_local_s3() as s3:
        bucket = s3.bucket()
        if FAULTS[fault] is not None:
            status, code = FAULTS[fault]
            s3.faults.refuse(status, code, methods={"PUT"}, match=LEARNSCOPE_FILES)
        callbacks = [
            EmbeddingProjector(ids_fn="dataset_index", aligned_pca=True, write_limits=limits),
            ModelAutocorrelation(analyze_every_n_steps=4, buffer_size=8, lags=(1,)),
            TrainingHelper(check_every_n_steps=3),
        ]
        logger = TensorBoardLogger(f"s3://{bucket}/tb")
        fit = trainer(tempfile.mkdtemp(prefix="learnscope-bench-"), logger, callbacks)
        begin = time.perf_counter()
        fit.fit(ZeroBranch(), *loaders())
        seconds = time.perf_counter() - begin
        puts, refused = s3.requests["PUT"], s3.requests.refused
    line = next((m for m in said if m.startswith("learnscope wrote")), "")
    return {"seconds": seconds, "puts": puts, "refused": refused, "line": line}


def run_in_process(fault: str, end_timeout_s: float, package: str | None) -> dict[str, Any]:
    """:func:`run_once` in a fresh Python, with ``package`` first on its path if given."""
    env = dict(os.environ)
    if package is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package, env.get("PYTHONPATH")]))
    command = [sys.executable, str(Path(__file__).resolve()), "--run-one", fault]
    command += ["--end-timeout", str(end_timeout_s)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{fault} ({package or 'current'}) failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if package is not None and not result["learnscope"].startswith(package):
        raise RuntimeError(f"the baseline run imported learnscope from {result['learnscope']}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fault", choices=sorted(FAULTS), nargs="+", default=["503"])
    parser.add_argument("--end-timeout", type=float, default=60.0, help="end_timeout_s (s)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--baseline", metavar="DIR", help="also run the package in DIR")
    parser.add_argument("--run-one", metavar="FAULT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_one is not None:  # one fit, in this process: JSON on the last line
        import learnscope

        result = run_once(args.run_one, args.end_timeout)
        print(json.dumps(result | {"learnscope": learnscope.__file__}))
        return
    packages: list[str | None] = [None] + ([args.baseline] if args.baseline else [])
    seconds: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeats):
        for fault in args.fault:
            for package in packages:
                version = "current" if package is None else "baseline"
                result = run_in_process(fault, args.end_timeout, package)
                seconds.setdefault((fault, version), []).append(result["seconds"])
                print(
                    f"{fault} {version}: fit {result['seconds']:.1f} s, {result['puts']} PUTs "
                    f"({result['refused']} refused); line: ...{result['line'][-260:]}",
                    flush=True,
                )
    print(f"\nend_timeout_s={args.end_timeout:g}\n")
    print("| store | code | fit wall time (s), median [runs] |")
    print("|---|---|---:|")
    for (fault, version), values in seconds.items():
        runs = ", ".join(f"{v:.1f}" for v in values)
        print(f"| {fault} | {version} | {statistics.median(values):.1f} [{runs}] |")


if __name__ == "__main__":
    main()
