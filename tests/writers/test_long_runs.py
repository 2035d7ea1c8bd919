"""Long runs: the projector config, the Custom Scalars layout and the findings table are kept in
memory and written without re-reading or repeating what is already there, yet every change made
by another writer (another process, a person) is seen. Speed is measured in
``benchmarks/long_run.py``; these tests check correctness only.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from learnscope import EmbeddingSnapshot
from learnscope.plugins.tensorboard import layout as tensorboard_layout
from learnscope.plugins.tensorboard import projector_files
from learnscope.plugins.tensorboard.layout import LAYOUT_TAG, multiline
from learnscope.plugins.tensorboard.writer import TensorBoardWriter
from learnscope.records import Finding
from learnscope.storage import open_run_folder
from learnscope.tags import FINDINGS
from tests.kit.readers import ProjectorReader


def snap(tag: str, step: int) -> EmbeddingSnapshot:
    return EmbeddingSnapshot(tag, step, torch.randn(4, 3), {"label": [0, 1, 2, 3]})


def names(run: Path) -> list[str]:
    return [e.tensor_name for e in projector_files.read_config(run).embeddings]


def other_process_writes(run: Path, tag: str, step: int) -> None:
    """A second writer in a second process, as a second trainer on the same run would be."""
    code = (
        "import sys, torch; from pathlib import Path; from learnscope import EmbeddingSnapshot; "
        "from learnscope.plugins.tensorboard import projector_files; "
        "projector_files.write_snapshot(Path(sys.argv[1]), "
        "EmbeddingSnapshot(sys.argv[2], int(sys.argv[3]), torch.randn(4, 3)))"
    )
    subprocess.run([sys.executable, "-c", code, str(run), tag, str(step)], check=True)


def count_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = projector_files.ProjectorConfig._parse

    def counting(self: projector_files.ProjectorConfig) -> dict[str, str]:
        calls.append(self.folder.location)
        return real(self)

    monkeypatch.setattr(projector_files.ProjectorConfig, "_parse", counting)
    return calls


def test_config_is_parsed_once_and_matches_protobufs_own_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.protobuf import text_format

    parses = count_parses(monkeypatch)
    run = tmp_path / "run"
    config = projector_files.ProjectorConfig(open_run_folder(run))  # as a writer owns it
    for step in range(30):
        projector_files.write_snapshot(run, snap("enc", step), config)
    projector_files.write_snapshot(run, snap("enc", 7), config)  # rewritten: replaced, moved last

    assert len(parses) == 1  # the first snapshot only
    expected = [f"enc/step_{s:09d}" for s in range(30) if s != 7] + ["enc/step_000000007"]
    assert names(run) == expected
    on_disk = (run / projector_files.CONFIG_NAME).read_text(encoding="utf-8")
    parsed = projector_files.read_config(run)
    assert text_format.MessageToString(parsed, as_utf8=True) == on_disk


def test_a_second_process_appending_between_snapshots_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parses = count_parses(monkeypatch)
    run = tmp_path / "run"
    writer = TensorBoardWriter(run)
    for step in range(3):
        writer.write_embedding(snap("a", step))
        other_process_writes(run, "b", step)  # changes the file behind the cached copy
    writer.write_embedding(snap("a", 3))
    writer.write_embedding(snap("a", 4))  # nothing changed since: no parse
    writer.close()

    expected = [f"{tag}/step_{step:09d}" for step in range(3) for tag in "ab"]
    later = ["a/step_000000003", "a/step_000000004"]
    assert names(run) == [*expected, *later]
    assert len(parses) == 4  # the first snapshot, and once after each of the other's writes
    reader = ProjectorReader(tmp_path)
    assert sorted(reader.names("run")) == sorted([*expected, *later])
    assert reader.tensor("run", "b/step_000000002").shape == (4, 3)


def test_an_entry_removed_by_hand_is_not_brought_back(tmp_path: Path) -> None:
    from google.protobuf import text_format

    run = tmp_path / "run"
    for step in range(3):
        projector_files.write_snapshot(run, snap("enc", step))
    config = projector_files.read_config(run)
    del config.embeddings[1]  # someone drops step_1 from the list, keeping its files
    text = text_format.MessageToString(config, as_utf8=True)
    (run / projector_files.CONFIG_NAME).write_text(text, encoding="utf-8")  # in place, no replace

    projector_files.write_snapshot(run, snap("enc", 3))
    assert names(run) == ["enc/step_000000000", "enc/step_000000002", "enc/step_000000003"]


def test_a_removed_config_starts_afresh(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for step in range(3):
        projector_files.write_snapshot(run, snap("enc", step))
    (run / projector_files.CONFIG_NAME).unlink()

    projector_files.write_snapshot(run, snap("enc", 3))
    assert names(run) == ["enc/step_000000003"]  # the cached entries are not resurrected


def test_a_corrupt_config_is_moved_aside_and_not_overwritten_from_memory(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for step in range(2):
        projector_files.write_snapshot(run, snap("enc", step))
    path = run / projector_files.CONFIG_NAME
    path.write_text("embeddings { tensor_name: ", encoding="utf-8")

    projector_files.write_snapshot(run, snap("enc", 2))
    (aside,) = run.glob(f"{projector_files.CONFIG_NAME}.corrupt-*")
    assert aside.read_text(encoding="utf-8") == "embeddings { tensor_name: "  # kept as found
    assert names(run) == ["enc/step_000000002"]  # cached entries were not written back from memory

    path.unlink()  # removed by hand: the next write starts afresh
    projector_files.write_snapshot(run, snap("enc", 3))
    assert names(run) == ["enc/step_000000003"]


def test_two_writers_of_one_process_share_one_config(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first, second = TensorBoardWriter(run), TensorBoardWriter(run)
    for step in range(3):
        first.write_embedding(snap("a", step))
        second.write_embedding(snap("b", step))
    first.close()
    second.close()
    assert sorted(names(run)) == sorted(f"{t}/step_{s:09d}" for t in "ab" for s in range(3))


def event_records(run: Path, tag: str) -> list[tuple[int, str]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run), size_guidance={"tensors": 0})
    events.Reload()
    if tag not in events.Tags()["tensors"]:
        return []
    return [(t.step, t.tensor_proto.string_val[0].decode()) for t in events.Tensors(tag)]


def test_layout_is_written_only_when_a_chart_is_new(tmp_path: Path) -> None:
    run = tmp_path / "run"
    writer = TensorBoardWriter(run)
    charts = {"acf": {"lags": multiline(["a/lag_1"])}}
    for _ in range(20):  # every analysis asks for the same charts
        writer.add_charts(charts)
    writer.add_charts({"acf": {"tau": multiline(["a/tau"])}})
    writer.add_charts(charts)
    writer.close()

    records = event_records(run, LAYOUT_TAG)
    assert [step for step, _ in records] == [1, 2]


def test_layout_changed_by_another_process_is_read_again(tmp_path: Path) -> None:
    import json

    run = tmp_path / "run"
    writer = TensorBoardWriter(run)
    writer.add_charts({"acf": {"lags": multiline(["a/lag_1"])}})
    code = (
        "import sys; from pathlib import Path; from learnscope.plugins.tensorboard import layout "
        "as t; t.merge_charts(Path(sys.argv[1]), {'loss': {'all': t.multiline(['loss'])}})"
    )
    subprocess.run([sys.executable, "-c", code, str(run)], check=True)
    writer.add_charts({"acf": {"lags": multiline(["a/lag_1"])}})  # already there: not written
    writer.add_charts({"acf": {"tau": multiline(["a/tau"])}})
    writer.close()

    state = json.loads((run / tensorboard_layout.LAYOUT_FILE).read_text())
    assert state["version"] == 3
    assert state["layout"] == {
        "acf": {"lags": multiline(["a/lag_1"]), "tau": multiline(["a/tau"])},
        "loss": {"all": multiline(["loss"])},
    }
    assert [step for step, _ in event_records(run, LAYOUT_TAG)] == [1, 3]  # ours only
    assert tensorboard_layout.merge_charts(run, {"loss": {"all": multiline(["loss"])}}) is None


def test_findings_table_is_not_written_twice_at_one_step(tmp_path: Path) -> None:
    run = tmp_path / "run"
    writer = TensorBoardWriter(run)
    table = [Finding("zero-gradient", "head.bias", "zero", 3)]
    writer.write_findings(table, step=3)
    writer.write_findings(table, step=3)  # unchanged: skipped
    changed = [*table, Finding("tiny-gradient", "enc", "tiny", 3)]
    writer.write_findings(changed, step=3)  # changed: written
    writer.write_findings(changed, step=9)  # the same at a later step: written
    writer.close()

    records = event_records(run, f"{FINDINGS}/text_summary")
    assert [step for step, _ in records] == [3, 3, 9]
    assert "tiny-gradient" not in records[0][1] and "tiny-gradient" in records[1][1]
