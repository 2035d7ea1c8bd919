"""The ``learnscope`` command line: ``learnscope demo`` and ``learnscope export``.

Nothing heavy is imported before a command runs (torch and Lightning are imported by the demo
itself), so ``learnscope --help`` answers at once.
"""

from __future__ import annotations

import argparse
import sys
import time

DESCRIPTION = """\
See what your PyTorch Lightning model is learning, in TensorBoard and Weights & Biases.

examples:
  learnscope demo              train a small model on the digits data (CPU, about a minute)
                               into runs/demo/version_0; then: tensorboard --logdir runs
  learnscope demo --seed 1     then a second run, runs/demo/version_1: other initial weights
                               and batch order, the same 540 validation digits
  learnscope demo --wandb      also write an offline wandb run, and print the command that
                               uploads it
  learnscope demo --sweep      a sweep: six runs over learning rate and weight decay (one
                               collapses, one diverges) into runs/sweep/version_0, in about
                               a minute; then: tensorboard --logdir runs/sweep/version_0
  learnscope export runs --html view.html
                               write the training-dynamics view of ./runs as one page
                               that opens offline
  learnscope export s3://bucket/runs --html view.html
                               the same, of runs logged to object storage (any fsspec URL,
                               with its package: s3fs, gcsfs, adlfs)
  learnscope export runs --html compare.html --compare demo/version_0 demo/version_1
                               the same page, opening on the two demo runs side by side
                               (--tags: one tag of each, or two tags of one run)

each command's options: learnscope demo --help, learnscope export --help
"""


COMMANDS = {  # name: (the line in the command list, the command's own description)
    "demo": (
        "train a small model on the digits data into a TensorBoard log directory "
        "(--logdir, --epochs, --seed, --wandb, --sweep)",
        "Train a small MLP on scikit-learn's digits data (on the CPU, no download) with "
        "every learnscope callback attached, and fill a TensorBoard log directory.",
    ),
    "export": (
        "write a log directory's training-dynamics view as one offline page (--html, "
        "--max-points, --compare, --compare-mb, --tags, --views-mb)",
        "Write the learnscope view (embedding evolution, autocorrelation, findings) of every "
        "learnscope run under LOGDIR as one HTML page that opens from file:// offline, above "
        "it the runs table (a row per run).",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``learnscope`` command (plain-text help).

    Example:
        >>> "learnscope demo" in build_parser().format_help()
        True
    """
    parser = argparse.ArgumentParser(
        prog="learnscope",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(
        dest="command", title="commands", metavar="COMMAND", help="one of:"
    )
    demo, export = (
        commands.add_parser(name, help=short, description=long)
        for name, (short, long) in COMMANDS.items()
    )
    demo.add_argument("--logdir", default="runs", help="log directory (default: runs)")
    demo.add_argument("--epochs", type=int, default=8, help="training epochs (default: 8)")
    demo.add_argument(
        "--seed",
        type=int,
        default=0,  # demo.SEED, written out: --help imports no torch
        help="seed of the model's initial weights and of the order of the training batches "
        "(default: 0); the same seed gives the same run, another seed another run on the same "
        "540 validation digits, so that two runs compare point by point",
    )
    demo.add_argument(
        "--wandb", action="store_true", help="also log to an offline wandb run under LOGDIR/wandb"
    )
    demo.add_argument(
        "--sweep",
        action="store_true",
        help="train a sweep instead: six runs of the same model and seed over learning rate and "
        "weight decay, one that collapses and one that diverges, into LOGDIR/sweep/version_<n> "
        "(with --wandb, its W&B runs under that folder's wandb/); then print each run's status "
        "and findings",
    )
    export.add_argument(
        "logdir",
        metavar="LOGDIR",
        help="a log directory or one run directory: a local path or a URL such as s3://bucket/runs",
    )
    export.add_argument("--html", required=True, help="the HTML file to write")
    export.add_argument(
        "--max-points",
        type=int,
        default=5000,  # view_page.EXPORT_MAX_POINTS, written out: --help imports no numpy
        help="most points per embedding tag; more are subsampled by id (default: 5000)",
    )
    export.add_argument(
        "--compare",
        nargs=2,
        metavar=("RUN_A", "RUN_B"),
        help="also compare two runs (named as the export lists them) on every tag they share: "
        "aligned views and the overlap of each point's nearest neighbours; the page opens on it",
    )
    export.add_argument(
        "--tags",
        nargs=2,
        metavar=("TAG_A", "TAG_B"),
        help="with --compare: RUN_A's TAG_A beside RUN_B's TAG_B only, each a module and its "
        "stage, such as the demo's encoder/validate; RUN_A may be RUN_B, to compare two modules "
        "of one run",
    )
    export.add_argument(
        "--compare-mb",
        type=float,
        default=16.0,  # compare_steps.COMPARE_PAGE_BYTES in MB, written out (as --max-points)
        metavar="MB",
        help="with --compare: the most MB of comparisons the page holds, one at each step the "
        "step cursor can show, so that the comparison follows it (evenly spaced steps beyond "
        "that, said on the page); each is one comparison to compute; 0: the newest step only "
        "(default: 16)",
    )
    export.add_argument(
        "--views-mb",
        type=float,
        default=4.0,  # view_page.EXPORT_VIEW_BYTES in MB, written out (as --max-points)
        metavar="MB",
        help="the most MB of run views the page holds, the newest runs first (the newest run's "
        "and the compared runs' always); every run keeps its row in the page's runs table, and "
        "a run without its view says how to export it alone (default: 4)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``learnscope`` command line.

    With no command, the help goes to standard error and the exit status is 2, as argparse
    does for any other missing argument, so a script that calls ``learnscope`` by mistake
    fails instead of passing.

    Args:
        argv: Arguments without the program name; ``sys.argv[1:]`` by default.

    Returns:
        The exit status.

    Example:
        >>> main([])  # doctest: +SKIP
        2
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if args.command == "export":
        if args.tags and not args.compare:
            parser.error("--tags TAG_A TAG_B needs --compare RUN_A RUN_B")
        return run_export_command(
            args.logdir,
            args.html,
            args.max_points,
            args.compare,
            args.tags,
            args.compare_mb,
            views_mb=args.views_mb,
        )
    if args.sweep:
        return run_sweep_command(args.logdir, args.epochs, args.wandb, args.seed)
    return run_demo_command(args.logdir, args.epochs, args.wandb, args.seed)


def run_export_command(
    logdir: str,
    html: str,
    max_points: int,
    compare: list[str] | None = None,
    tags: list[str] | None = None,
    compare_mb: float = 16.0,
    views_mb: float = 4.0,
) -> int:
    """``learnscope export LOGDIR --html FILE``: write the view page; 1 when there is nothing.

    ``LOGDIR`` is a local path or a URL (``s3://bucket/runs``). The runs that cannot be read
    are listed on standard error; the others are written, and those whose training failed or
    was interrupted (Ctrl-C) are named on standard error too, one line each, with the step.
    With ``compare`` (two run names), the page also compares them, on the two ``tags`` when
    given, at the steps the step cursor can show (at most ``compare_mb`` MB of comparisons; 0:
    the newest step only); 2 when one is not a run or a tag is not one of its run's keys. A URL
    whose file-system package is missing (``gcsfs`` for ``gs://``), or an object store that
    cannot be listed, is one line on standard error, and 1. The page holds every run's row of
    the runs table and the views of the newest runs within ``views_mb`` MB; a line on standard
    error names how many views it holds when that is not all.
    """
    from learnscope.plugins.views.view_page import export_html
    from learnscope.storage import MissingFileSystem

    if max_points < 1:
        print(
            f"learnscope export: --max-points must be at least 1, not {max_points}", file=sys.stderr
        )
        return 2
    if not compare_mb >= 0:  # NaN too
        print(
            f"learnscope export: --compare-mb must be 0 or more, not {compare_mb}", file=sys.stderr
        )
        return 2
    if not views_mb >= 0:  # NaN too
        print(f"learnscope export: --views-mb must be 0 or more, not {views_mb}", file=sys.stderr)
        return 2
    try:
        pair = (compare[0], compare[1]) if compare else None
        keys = (tags[0], tags[1]) if tags else None
        export = export_html(
            logdir,
            html,
            max_points=max_points,
            compare=pair,
            tags=keys,
            compare_bytes=round(compare_mb * 2**20),
            view_bytes=round(views_mb * 10**6),
        )
    except (MissingFileSystem, OSError) as error:
        print(f"learnscope export: {error}", file=sys.stderr)
        return 1
    except ValueError as error:
        print(f"learnscope export: {error}", file=sys.stderr)
        return 2
    for name, why in export.failed:
        print(f"learnscope export: left out {name}: {why}", file=sys.stderr)
    for name, how in [*export.failed_runs, *export.interrupted_runs]:
        print(f"learnscope export: {name} {how} (its page says so)", file=sys.stderr)
    if not export.runs:
        what = "no readable learnscope run" if export.failed else "no learnscope run"
        print(f"learnscope export: {what} under {logdir}", file=sys.stderr)
        return 1
    if export.not_held:
        held = len(export.runs) - len(export.not_held)
        print(
            f"learnscope export: the page holds the views of the newest {held} of "
            f"{len(export.runs)} runs (--views-mb {views_mb:g}) and every run's row of the runs "
            f"table; learnscope export {logdir}/RUN --html RUN.html writes one run's page",
            file=sys.stderr,
        )
    print(f"wrote {html}: {len(export.runs)} run(s): {', '.join(export.runs)}")
    return 0


def run_demo_command(logdir: str, epochs: int, use_wandb: bool, seed: int = 0) -> int:
    """``learnscope demo``: train, then say how long it took.

    What was written and the commands that open it are said once, by learnscope's end-of-fit
    line (as in any fit); Lightning's own lines are hidden while the demo trains.
    """
    import logging

    # learnscope's info lines, once: a root handler would print Lightning's lines a second time
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    learnscope_log = logging.getLogger("learnscope")
    learnscope_log.addHandler(handler)
    learnscope_log.setLevel(logging.INFO)
    learnscope_log.propagate = False
    from learnscope.lightning_glue.demo import run_demo

    start = time.perf_counter()
    run_demo(logdir, epochs=epochs, use_wandb=use_wandb, seed=seed)
    took = time.perf_counter() - start
    print(f"learnscope demo: {epochs} epochs, seed {seed}, in {took:.0f} s")
    return 0


def run_sweep_command(logdir: str, epochs: int, use_wandb: bool, seed: int = 0) -> int:
    """``learnscope demo --sweep``: train the sweep, then say what each run shows.

    A line before each run names it; learnscope's warnings (the findings as they are found)
    follow it on standard error. Each run's end-of-fit line is left out: the lines at the end
    say, run by run, how it ended and what it found, and the commands that open them.
    """
    import logging

    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    learnscope_log = logging.getLogger("learnscope")
    learnscope_log.addHandler(handler)
    learnscope_log.setLevel(logging.WARNING)
    learnscope_log.propagate = False
    # the end-of-fit lines (a failed fit's, a warning, would still show)
    logging.getLogger("lightning.pytorch.learnscope").setLevel(logging.WARNING)
    from learnscope.lightning_glue.demo_sweep import run_sweep, sweep_lines

    def announce(line: str) -> None:
        print(f"learnscope demo --sweep: {line}", flush=True)

    start = time.perf_counter()
    sweep = run_sweep(logdir, epochs=epochs, use_wandb=use_wandb, seed=seed, announce=announce)
    took = time.perf_counter() - start
    print("\n".join(sweep_lines(sweep, epochs, took)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
