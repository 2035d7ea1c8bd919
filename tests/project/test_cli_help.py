"""``learnscope --help`` and each command's help: clean lines, every option described, examples
that run as written on what ``learnscope demo`` writes."""

from __future__ import annotations

import argparse
import re
import shlex

import pytest

from learnscope.lightning_glue.cli import build_parser

# What `learnscope demo` writes: its TensorBoardLogger's runs and its EmbeddingProjector's tag.
DEMO_RUN = re.compile(r"demo/version_\d+")
DEMO_TAGS = {"encoder/validate"}
EXAMPLE_INDENT = "  learnscope "


@pytest.fixture
def parser(monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps to the terminal's width
    return build_parser()


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    found = {"learnscope": parser.format_help()}
    found.update({name: sub.format_help() for name, sub in commands(parser).items()})
    return found


def examples(parser: argparse.ArgumentParser) -> list[str]:
    """The commands of the examples: the text before the description's column."""
    lines = parser.format_help().split("examples:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return [
        re.split(r" {2,}", line.strip())[0] for line in lines if line.startswith(EXAMPLE_INDENT)
    ]


def test_no_help_line_is_blank_looking_or_joined(parser: argparse.ArgumentParser) -> None:
    """No line of trailing or stray spaces (a backslash once joined two example lines with a run
    of spaces), and no line wider than a terminal."""
    for name, text in helps(parser).items():
        for line in text.splitlines():
            assert line == line.rstrip(), f"{name}: trailing spaces in {line!r}"
            assert len(line) <= 92, f"{name}: {line!r}"
            # spaces inside a line only between a name and its description, in the first columns
            gaps = list(re.finditer(r"\S {3,}(?=\S)", line))
            assert len(gaps) <= 1, f"{name}: stray spaces in {line!r}"
            assert all(gap.end() <= 32 for gap in gaps), f"{name}: stray spaces in {line!r}"


def test_every_option_is_described_in_its_command_and_named_at_the_top(
    parser: argparse.ArgumentParser,
) -> None:
    top = parser.format_help()
    for name, command in commands(parser).items():
        own = command.format_help()
        for action in command._actions:
            if not action.option_strings or "-h" in action.option_strings:
                continue
            option = action.option_strings[-1]
            assert action.help and action.help != argparse.SUPPRESS, f"{name} {option}"
            assert len(action.help.split()) >= 3, f"{name} {option}: {action.help!r}"
            assert option in own, f"{name} {option}"
            assert re.search(rf"{re.escape(option)}\b", top), f"{name} {option} not at the top"


def test_the_examples_parse_and_name_what_the_demo_writes(
    parser: argparse.ArgumentParser,
) -> None:
    found = examples(parser)
    assert len(found) >= 6 and "learnscope demo --seed 1" in found, found
    for example in found:
        words = shlex.split(example)
        assert words[0] == "learnscope", example
        args = build_parser().parse_args(words[1:])  # exits on an unknown option
        if args.command == "export":
            assert args.logdir.endswith("runs"), example  # the demo's default --logdir
            for run in args.compare or ():
                assert DEMO_RUN.fullmatch(run), f"{run} is not a demo run: {example}"
            assert set(args.tags or ()) <= DEMO_TAGS, example


def test_the_demo_tags_are_the_demo_s_projector() -> None:
    """The tag the examples may name is the demo's EmbeddingProjector's, at validation."""
    pytest.importorskip("sklearn")
    from learnscope.lightning_glue import EmbeddingProjector
    from learnscope.lightning_glue.demo import callbacks

    (projector,) = (c for c in callbacks() if isinstance(c, EmbeddingProjector))
    assert {f"{projector.module}/validate"} == DEMO_TAGS
