"""Projector export: TensorBoardWriter against SummaryWriter.add_embedding, side by side.

Writes the same 50,000 x 128 float32 embedding (with a label column) both ways into one log
directory, times each write (median of ``--repeats``), then loads both tensors back with the
projector plugin's own readers and checks they return identical values. Also times the plugin's
load of each file, which is what a user waits for when opening the Projector tab.

Run: ``python benchmarks/projector_export.py [--rows 50000] [--dim 128] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from tensorboard.plugins.projector import projector_plugin
    from torch.utils.tensorboard import SummaryWriter

    from learnscope import EmbeddingSnapshot
    from learnscope.plugins.tensorboard import projector_files
    from learnscope.plugins.tensorboard.writer import TensorBoardWriter

    vectors = torch.randn(args.rows, args.dim, generator=torch.Generator().manual_seed(0))
    labels = (torch.arange(args.rows) % 10).tolist()
    root = Path(tempfile.mkdtemp(prefix="projector_export_"))

    ours = TensorBoardWriter(root / "learnscope")
    snapshot = EmbeddingSnapshot("bench", 0, vectors, {"label": labels})
    t_ours = timed(lambda: ours.write_embedding(snapshot), args.repeats)
    ours.close()

    theirs = SummaryWriter(str(root / "add_embedding"))
    t_theirs = timed(
        lambda: theirs.add_embedding(vectors, metadata=labels, tag="bench", global_step=0),
        args.repeats,
    )
    theirs.close()

    # Load back with the projector plugin's own readers (TSV first, raw float32 on decode error).
    def plugin_load(run_dir: Path) -> tuple[np.ndarray, float]:
        config = projector_files.read_config(run_dir)
        entry = config.embeddings[0]
        path = run_dir / entry.tensor_path
        start = time.perf_counter()
        try:
            tensor = projector_plugin._read_tensor_tsv_file(str(path))
        except UnicodeDecodeError:
            tensor = projector_plugin._read_tensor_binary_file(str(path), entry.tensor_shape)
        return tensor, time.perf_counter() - start

    got_ours, load_ours = plugin_load(root / "learnscope")
    theirs_dir = next((root / "add_embedding").rglob("projector_config.pbtxt")).parent
    got_theirs, load_theirs = plugin_load(theirs_dir)
    expected = vectors.numpy()
    identical_ours = np.array_equal(got_ours, expected)
    identical_theirs = np.allclose(got_theirs, expected, rtol=1e-6, atol=0)

    print(
        f"machine: {platform.machine()} {platform.processor() or ''}, torch {torch.__version__},"
        f" {torch.get_num_threads()} threads, date {time.strftime('%Y-%m-%d')}"
    )
    print(f"embedding: {args.rows} x {args.dim} float32, median of {args.repeats}\n")
    print("| writer | write (s) | plugin load (s) | values read back |")
    print("|---|---:|---:|---|")
    print(
        f"| learnscope TensorBoardWriter | {t_ours:.3f} | {load_ours:.3f} | "
        f"{'identical' if identical_ours else 'DIFFERENT'} |"
    )
    print(
        f"| SummaryWriter.add_embedding | {t_theirs:.3f} | {load_theirs:.3f} | "
        f"{'equal (TSV text)' if identical_theirs else 'DIFFERENT'} |"
    )
    print(
        f"\nwrite speed-up: {t_theirs / t_ours:.0f}x; load speed-up: {load_theirs / load_ours:.0f}x"
    )
    if not identical_ours:
        raise SystemExit("the projector plugin did not read back the values learnscope wrote")


if __name__ == "__main__":
    main()
