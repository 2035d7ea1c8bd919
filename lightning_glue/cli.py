"""The ``learnscope`` command: ``learnscope demo [--logdir runs] [--epochs N] [--wandb]``."""

from __future__ import annotations

import argparse
import logging
import sys
import time


def main(argv: list[str] | None = None) -> int:
    """Run the ``learnscope`` command line.

    Args:
        argv: Arguments without the program name; ``sys.argv[1:]`` by default.

    Returns:
        The exit status.

    Example:
        >>> main(["--help"])  # doctest: +SKIP
    """
    parser = argparse.ArgumentParser(prog="learnscope", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="train a small model on the digits data and fill a TensorBoard log directory"
    )
    demo.add_argument("--logdir", default="runs", help="log directory (default: runs)")
    demo.add_argument("--epochs", type=int, default=8, help="training epochs (default: 8)")
    demo.add_argument("--wandb", action="store_true", help="also log to an offline wandb run")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from learnscope.lightning_glue.demo import run_demo

    start = time.perf_counter()
    run_dir = run_demo(args.logdir, epochs=args.epochs, use_wandb=args.wandb)
    print(f"\nlearnscope demo finished in {time.perf_counter() - start:.0f} s; run: {run_dir}")
    print(f"Look at it with:\n  tensorboard --logdir {args.logdir}\nthen open the Projector tab.")
    if args.wandb:
        print(f"The offline wandb run is under {args.logdir}/wandb; upload it with `wandb sync`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
