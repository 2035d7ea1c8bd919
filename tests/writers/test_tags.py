"""Tags become projector folders and tensor names that never collide and always fit on disk."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from learnscope import EmbeddingSnapshot
from learnscope.plugins.tensorboard.projector_files import entry_name, read_config, tag_folder
from learnscope.plugins.tensorboard.writer import TensorBoardWriter
from learnscope.storage.files import safe_name
from tests.kit.readers import ProjectorReader


def write(run_dir: Path, *snapshots: EmbeddingSnapshot) -> None:
    writer = TensorBoardWriter(run_dir)
    for snapshot in snapshots:
        writer.write_embedding(snapshot)
    writer.close()


def vectors(seed: int) -> torch.Tensor:
    return torch.randn(4, 3, generator=torch.Generator().manual_seed(seed))


def test_tags_that_differ_only_in_empty_parts_keep_their_own_data(tmp_path: Path) -> None:
    tags = ["enc//x", "enc/x", "enc/x/"]
    write(tmp_path / "run", *(EmbeddingSnapshot(t, 0, vectors(i)) for i, t in enumerate(tags)))

    reader = ProjectorReader(tmp_path)
    assert sorted(reader.names("run")) == sorted(f"{t}/step_000000000" for t in tags)
    for i, tag in enumerate(tags):
        tensor = reader.tensor("run", f"{tag}/step_000000000")
        np.testing.assert_array_equal(tensor, vectors(i).numpy())
    paths = [e.tensor_path for e in read_config(tmp_path / "run").embeddings]
    assert len(set(paths)) == 3


@pytest.mark.parametrize("tag", ["x" * 10_000, "a/" * 5_000, "é/" * 3_000 + "\t" * 4_000])
def test_a_10000_character_tag_writes_and_reads_back(tmp_path: Path, tag: str) -> None:
    snapshot = EmbeddingSnapshot(tag, 3, vectors(0), {"l": list("abcd")}, torch.rand(4, 1, 2, 2))
    write(tmp_path / "run", snapshot)

    reader = ProjectorReader(tmp_path)
    assert reader.names("run") == [f"{tag}/step_000000003"]
    np.testing.assert_array_equal(reader.tensor("run", f"{tag}/step_000000003"), vectors(0).numpy())
    for path in (tmp_path / "run").rglob("*"):
        relative = path.relative_to(tmp_path / "run").as_posix()
        assert len(relative.encode()) < 300
        assert all(len(part.encode()) < 100 for part in path.relative_to(tmp_path).parts)


def test_a_tag_with_lone_surrogates_writes_under_a_replaced_name(tmp_path: Path) -> None:
    tags = ["enc\ud800", "enc\udfff", "enc\ufffd", "\ud83d\ude00/x"]
    write(
        tmp_path / "run",
        *(EmbeddingSnapshot(t, 0, vectors(i), {"l": ["\ud800"] * 4}) for i, t in enumerate(tags)),
    )

    reader = ProjectorReader(tmp_path)
    names = [entry_name(EmbeddingSnapshot(t, 0, vectors(0))) for t in tags]
    assert sorted(reader.names("run")) == sorted(names) and len(set(names)) == 4
    assert names[0].startswith("enc\ufffd [") and names[2] == "enc\ufffd/step_000000000"
    assert names[3].startswith("\U0001f600/x [")
    for i, name in enumerate(names):
        np.testing.assert_array_equal(reader.tensor("run", name), vectors(i).numpy())
        assert reader.metadata("run", name) == "\ufffd\n" * 4


def test_folders_of_different_tags_differ() -> None:
    rng = random.Random(3)
    pool = ["", "/", "//", "a", "b", ".", "..", "_", "-", " ", "\ud800", "é", "x-0123abcd"]
    pool += ["step_1", "step_-1"]
    tags = {"".join(rng.choice(pool) for _ in range(rng.randrange(6))) for _ in range(5_000)}
    tags |= {"/".join(tag_folder(t)) for t in list(tags)}  # tags that look like made folders
    tags |= {"x" * n for n in range(150, 170)} | {"a/" * n for n in range(40, 60)}
    folders = {tag_folder(t) for t in tags}
    assert len(folders) == len(tags)


def test_a_tag_part_named_like_a_step_folder_is_not_one(tmp_path: Path) -> None:
    first = EmbeddingSnapshot("enc", 0, vectors(0))
    second = EmbeddingSnapshot("enc/step_0/tensor.bin", 1, vectors(1))
    write(tmp_path / "run", first, second)

    reader = ProjectorReader(tmp_path)
    np.testing.assert_array_equal(reader.tensor("run", "enc/step_000000000"), vectors(0).numpy())
    np.testing.assert_array_equal(
        reader.tensor("run", "enc/step_0/tensor.bin/step_000000001"), vectors(1).numpy()
    )


def test_names_that_look_hashed_are_hashed_again() -> None:
    made = safe_name("a b")
    assert made.startswith("a_b-") and safe_name(made) != made
    assert safe_name("\udc80") != safe_name("_")
