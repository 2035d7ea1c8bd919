"""The README and the pages under ``docs/``: their code runs as written, their links resolve.

Every ```python block of ``README.md`` and ``docs/*.md`` that is meant to run (all but the
fragments listed in :data:`FRAGMENTS`) is saved as a script in its own empty working directory
and run there, in a fresh interpreter, the blocks at the same time. ``WANDB_MODE=offline`` is
set only for a block that uses wandb (the pages tell the reader to log in or set it). What each
block wrote is then read back.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.kit.readers import ProjectorReader, parse_metadata

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]  # every page a link can reach
# The pages written for users, each read on its own: the front page and its reference pages.
USER_PAGES = [README] + [
    DOCS / f"{name}.md"
    for name in ("demo", "views", "reading", "callbacks", "setups", "without_lightning")
]
LIGHTNING_EXAMPLE = DOCS / "callbacks.md"  # "A complete script"
PLAIN_LOOP = DOCS / "without_lightning.md"
SUMMARY_EXAMPLE = DOCS / "summary.md"  # two fits, then learnscope.read_summaries
FINDINGS_PAGE = DOCS / "reading.md"  # "What each finding means"
# ```python blocks that are fragments of a larger program, not meant to run on their own: the
# page and a line of the block.
FRAGMENTS = {
    ("docs/sharded.md", "history.record()  # local views, no communication"),
    ("docs/aligned_umap.md", "aligned_umap=True,  # or UMAPSettings"),
}


def python_blocks(page: Path) -> list[str]:
    """The ```python blocks of ``page``, in order (indented ones too, without the indent)."""
    found = re.findall(r"^( *)```python\n(.*?)^\1```$", page.read_text(), flags=re.M | re.S)
    return [re.sub(rf"^{indent}", "", block, flags=re.M) for indent, block in found]


def is_fragment(page: Path, block: str) -> bool:
    name = page.relative_to(ROOT).as_posix()
    return any(name == where and line in block for where, line in FRAGMENTS)


def runnable_blocks() -> list[tuple[Path, str]]:
    """Every block meant to run: each page's ```python blocks but the fragments."""
    return [
        (page, block)
        for page in PAGES
        for block in python_blocks(page)
        if not is_fragment(page, block)
    ]


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, list[tuple[str, Path]]]:
    """Run every block at once; each page's blocks, with their working directories."""
    started = []
    for index, (page, block) in enumerate(runnable_blocks()):
        cwd = tmp_path_factory.mktemp(f"block_{index}_{page.stem}")
        (cwd / "block.py").write_text(block)
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        env.pop("WANDB_MODE", None)
        if "wandb" in block.lower():
            env["WANDB_MODE"] = "offline"
        process = subprocess.Popen(
            [sys.executable, "block.py"],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        started.append((page, block, cwd, process))
    blocks: dict[Path, list[tuple[str, Path]]] = {}
    for page, block, cwd, process in started:
        output = process.communicate(timeout=600)[0]
        where = page.relative_to(ROOT)
        assert process.returncode == 0, f"{where} block failed:\n{block[:300]}\n{output[-3000:]}"
        blocks.setdefault(page, []).append((block, cwd))
    return blocks


def test_the_pages_hold_the_lightning_and_the_plain_loop_examples() -> None:
    """Three blocks run: the Lightning script, the summaries of a sweep and the plain loop; every
    other is a fragment."""
    runnable = runnable_blocks()
    assert [page for page, _ in runnable] == [LIGHTNING_EXAMPLE, SUMMARY_EXAMPLE, PLAIN_LOOP]
    lightning, summaries, plain = (block for _, block in runnable)
    assert "learnscope.read_summaries(" in summaries and "assert " in summaries
    assert "trainer.fit(" in lightning and "max_epochs=" in lightning
    assert "for step in range(" in plain and "writers.close()" in plain
    fragments = [
        (page, block) for page in PAGES for block in python_blocks(page) if is_fragment(page, block)
    ]
    assert len(fragments) == len(FRAGMENTS)  # each listed fragment is still there, once
    for page, block in fragments:
        compile(block, str(page), "exec")  # a fragment is still Python


def test_the_lightning_example_fills_every_tab(ran: dict[Path, list[tuple[str, Path]]]) -> None:
    ((_, cwd),) = ran[LIGHTNING_EXAMPLE]
    reader = ProjectorReader(cwd / "runs")
    (run,) = reader.runs()
    names = reader.names(run)
    assert names == sorted(names) and len(names) == 5  # one per epoch, in training order
    assert all(re.fullmatch(r"encoder/validate/step_\d{9}", name) for name in names)
    assert reader.tensor(run, names[-1]).shape == (128, 8)

    events = EventAccumulator(str(cwd / "runs" / run))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    assert {
        "~learnscope/autocorrelation/params/encoder/rho1_median",
        "~learnscope/health/grad_norm/encoder",
    } <= scalars
    assert "~learnscope/findings/text_summary" in events.Tags()["tensors"]
    assert list((cwd / "wandb").glob("offline-run-*"))  # the WandbLogger ran, offline


def test_the_plain_loop_writes_tensorboard_and_wandb(
    ran: dict[Path, list[tuple[str, Path]]],
) -> None:
    ((_, cwd),) = ran[PLAIN_LOOP]
    reader = ProjectorReader(cwd / "runs")
    names = ["encoder/validate/step_000000049", "encoder/validate/step_000000099"]
    assert reader.names("manual") == names
    assert list((cwd / "wandb").glob("offline-run-*"))


def test_the_plain_loop_gets_the_aligned_views_as_the_callback_does(
    ran: dict[Path, list[tuple[str, Path]]],
) -> None:
    """``AlignedViews.add`` in the plain loop: PCA columns, the scatter, one frame, the view."""
    from learnscope.plugins.views.run_status import LOOP_PCA_HINT, PCA_HINT
    from learnscope.plugins.views.run_view import read_view

    ((_, cwd),) = ran[PLAIN_LOOP]
    reader = ProjectorReader(cwd / "runs")
    for name in reader.names("manual"):
        header, rows = parse_metadata(reader.metadata("manual", name))
        assert header == ["label", "pca_x", "pca_y", "pca_z"] and len(rows) == 256
    events = EventAccumulator(str(cwd / "runs" / "manual"), size_guidance={"images": 0})
    events.Reload()
    pictures = events.Images("~learnscope/embeddings/encoder/validate/pca")
    assert [p.step for p in pictures] == [49, 99]
    view = read_view(cwd / "runs" / "manual")
    (shown,) = view["embeddings"]
    assert shown["steps"] == [49, 99]
    said = [str(view["status"]["embeddings"]), *view["messages"]]
    assert not any(hint in words for words in said for hint in (PCA_HINT, LOOP_PCA_HINT))


def test_the_findings_page_says_what_every_finding_code_means_and_what_to_try() -> None:
    from learnscope.records import FINDING_ADVICE

    text = FINDINGS_PAGE.read_text()
    rows = re.findall(r"^\| `([a-z-]+)`(?: \(info\))? \| .+ \| (.+) \|$", text, re.M)
    advice = dict(rows)
    assert set(FINDING_ADVICE) <= set(advice), set(FINDING_ADVICE) - set(advice)
    for code, said in FINDING_ADVICE.items():  # the page says what every finding says
        assert advice[code] == said, code


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda page: page.name)
def test_every_learnscope_name_on_a_page_has_its_import_path(page: Path) -> None:
    """A public class or function a page names is imported in a snippet or given dotted on that
    page: a reader who lands on it from a link learns where it comes from."""
    import importlib

    text = page.read_text()
    public = {}
    for package in ("learnscope", "learnscope.health", "learnscope.lightning_glue"):
        module = importlib.import_module(package)
        public.update({name: package for name in getattr(module, "__all__", ())})
    named = set(re.findall(r"`([A-Za-z_]\w*)\(?", text)) & set(public)
    imported = set(re.findall(r"from learnscope[\w.]* import ([\w, ]+)", text))
    imported = {n.strip() for names in imported for n in names.split(",")}
    dotted = set(re.findall(r"learnscope(?:\.\w+)*\.([A-Za-z_]\w*)", text))
    missing = sorted(named - imported - dotted)
    assert not missing, [f"{name} (from {public[name]})" for name in missing]


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text (link text, no markup) in lower case, every
    character but letters, digits, ``_``, ``-`` and spaces dropped, spaces made ``-``.

    Example: ``## The W&B page: `~learnscope/view`!`` is ``the-wb-page-learnscopeview``.
    """
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_github_slug_follows_githubs_rule() -> None:
    assert github_slug("The W&B page: `~learnscope/view`!") == "the-wb-page-learnscopeview"
    assert github_slug("Weights & Biases") == "weights--biases"
    assert (
        github_slug("Multi-GPU, sharded training, resuming")
        == "multi-gpu-sharded-training-resuming"
    )
    assert github_slug("The `run_record` [file](x.md)") == "the-run_record-file"


def without_fences(text: str) -> str:
    """``text`` without its fenced code blocks."""
    return re.sub(r"^( *)```.*?^\1```$", "", text, flags=re.M | re.S)


def without_code(text: str) -> str:
    """``text`` without fenced code blocks and inline code, where a link is no link."""
    return re.sub(r"`[^`\n]*`", "", without_fences(text))


def anchors(page: Path) -> set[str]:
    """The heading anchors of ``page``, as GitHub makes them (``-1``, ``-2`` for repeats)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", without_fences(page.read_text()), re.M):
        slug = github_slug(heading)
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


def relative_links(page: Path) -> list[str]:
    """The targets of ``page``'s links and images that are not web addresses."""
    targets = re.findall(r"\]\(([^()\s]+)(?: \"[^\"]*\")?\)", without_code(page.read_text()))
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_every_relative_link_reaches_a_file_and_a_heading() -> None:
    """Every relative link of the README and of the pages under docs/ points to a file of the
    repository, and its ``#anchor`` to a heading of that file, as GitHub renders them."""
    broken = []
    count = 0
    for page in PAGES:
        for target in relative_links(page):
            count += 1
            path, _, anchor = target.partition("#")
            goal = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)}: {target}"
            if not goal.is_file() or not goal.is_relative_to(ROOT):
                broken.append(f"{where} (no such file)")
            elif anchor and (goal.suffix != ".md" or anchor not in anchors(goal)):
                broken.append(f"{where} (no such heading)")
    assert count >= 40  # the README alone links every page under docs/
    assert not broken, broken


def test_the_readme_is_a_short_front_page_linking_every_reference_page() -> None:
    """At most 200 lines; every page under docs/ is one click from the README."""
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in relative_links(README)}
    pages = {page.resolve() for page in DOCS.glob("*.md")}
    assert pages <= linked, sorted(p.name for p in pages - linked)


def test_the_first_screen_is_a_quick_start_whose_three_lines_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Install, demo, TensorBoard and the lines to add, before line 60; the lines, added to a
    tiny model's trainer, fill a TensorBoard run."""
    from tests.kit.models import TinyClassifier, loaders, trainer

    lines = README.read_text().splitlines()
    start = lines.index("## Quick start")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
    assert start < 12 and end < 60, (start, end)
    quick = "\n".join(lines[start:end])
    for step in ('pip install "torch==2.13.0" -e ".[all]"', "learnscope demo", "--logdir runs"):
        assert step in quick
    (diff,) = re.findall(r"```diff\n(.*?)```", quick, flags=re.S)
    added = [
        line.strip()[1:].split("  #")[0].strip()  # without the comment
        for line in diff.splitlines()
        if line.strip()[:1] == "+"
    ]
    assert len(added) == 3
    namespace: dict = {}
    exec(added[0] + "\nfrom lightning.pytorch.loggers import TensorBoardLogger", namespace)
    monkeypatch.chdir(tmp_path)
    arguments = eval("dict(" + " ".join(added[1:]) + ")", namespace)
    fit = trainer(tmp_path, arguments["logger"], arguments["callbacks"], max_epochs=2)
    fit.fit(TinyClassifier(), *loaders())
    reader = ProjectorReader(tmp_path / "runs")
    (run,) = reader.runs()
    assert reader.names(run) == [
        "encoder/validate/step_000000006",
        "encoder/validate/step_000000012",
    ]
    events = EventAccumulator(str(tmp_path / "runs" / run))
    events.Reload()
    assert any(tag.startswith("~learnscope/health/") for tag in events.Tags()["scalars"])


# The arguments that change what the dashboards show, which the README's table gives.
SHOWN = {
    "EmbeddingProjector": (
        "module",
        "stages",
        "every_n_epochs",
        "every_n_train_steps",
        "max_points",
        "ids_fn",
        "aligned_pca",
        "aligned_umap",
        "metadata_fn",
        "images_fn",
        "mask_fn",
        "spatial",
        "gather",
        "tag",
    ),
    "ModelAutocorrelation": (
        "analyze_every_n_steps",
        "lags",
        "buffer_size",
        "elements_per_tensor",
        "max_elements",
        "all_scalars",
        "analyze_grads",
        "group_depth",
        "seed",
    ),
    "TrainingHelper": (
        "check_every_n_steps",
        "embedding_module",
        "head_modules",
        "histograms",
        "warn_every_n_steps",
        "small_grad_threshold",
        "max_head_to_encoder_ratio",
        "collapse_thresholds",
        "embedding_rows_per_dim",
        "max_embedding_rows",
        "edge_index_fn",
        "input_checks",
    ),
}


def default_rows(callback: str) -> dict[str, str]:
    """The README's defaults table of ``callback``: each argument's default cell."""
    text = README.read_text()
    start = text.index(f"**`{callback}`**")
    table = text[start:].split("\n\n")[1]
    rows = {}
    for line in table.splitlines()[2:]:  # after the header and the rule
        names, default, _ = line.strip("|").split(" | ", 2)
        for name in re.findall(r"`(\w+)`", names):
            rows[name] = default
    return rows


@pytest.mark.parametrize("callback", sorted(SHOWN))
def test_the_readme_gives_every_default_that_shapes_the_views(callback: str) -> None:
    """Every such argument has a row; a default given as literals is the signature's default."""
    import ast
    import dataclasses
    import inspect

    import learnscope.lightning_glue as glue
    from learnscope.collapse.verdicts import CollapseThresholds

    parameters = inspect.signature(getattr(glue, callback)).parameters
    rows = default_rows(callback)
    assert set(SHOWN[callback]) <= set(rows), set(SHOWN[callback]) - set(rows)
    groups: dict[str, list[str]] = {}  # a row of several arguments: its default cell
    for name, cell in rows.items():
        groups.setdefault(cell, []).append(name)
    checked = 0
    for cell, names in groups.items():
        literals = re.fullmatch(r"`[^`]+`(?:, `[^`]+`)*", cell) and re.findall(r"`([^`]+)`", cell)
        if names == ["collapse_thresholds"]:
            given = dict(item.split("=") for item in literals)
            defaults = dataclasses.asdict(CollapseThresholds())
            assert {k: float(v) for k, v in given.items()} == defaults
        elif literals and len(literals) in (1, len(names)):  # one default for all, or each
            for name, literal in zip(
                names, literals * len(names) if len(literals) == 1 else literals, strict=True
            ):
                assert ast.literal_eval(literal) == parameters[name].default, name
                checked += 1
    assert checked >= 6


def test_the_readme_says_which_browser_tests_the_quick_run_keeps() -> None:
    """The quick run's marker expression is the README's, and its words on the browser tests
    are true: it says a few short ones still run exactly when pytest selects some."""
    text = " ".join(README.read_text().split())
    (expression,) = set(re.findall(r'python -m pytest -q -m "([^"]+)"', text))
    assert expression == "not slow" and "leaves out the tests marked `slow`" in text
    files = [
        p for p in sorted((ROOT / "tests").rglob("test_*.py")) if "mark.browser" in p.read_text()
    ]
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:randomly"]
        + ["-m", f"browser and ({expression})", *map(str, files)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert collected.returncode in (0, 5), collected.stdout[-2000:] + collected.stderr[-2000:]
    quick_browser_tests = [line for line in collected.stdout.splitlines() if "::" in line]
    says_some_run = "a few short browser tests still run" in text
    assert says_some_run == bool(quick_browser_tests), quick_browser_tests
