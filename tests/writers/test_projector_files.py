"""The TensorBoard writer's projector files, read back by the real projector plugin."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from learnscope import EmbeddingSnapshot
from learnscope.plugins.tensorboard import projector_files
from learnscope.plugins.tensorboard.writer import TensorBoardWriter
from tests.kit.readers import ProjectorReader, parse_metadata, png_size


def write(run_dir: Path, *snapshots: EmbeddingSnapshot) -> None:
    writer = TensorBoardWriter(run_dir)
    for snapshot in snapshots:
        writer.write_embedding(snapshot)
    writer.close()


def test_binary_tensor_round_trips_exactly(tmp_path: Path) -> None:
    vectors = torch.randn(300, 17, generator=torch.Generator().manual_seed(0))
    write(tmp_path / "run", EmbeddingSnapshot("encoder", 5, vectors, stage="validate"))

    reader = ProjectorReader(tmp_path)
    assert reader.runs() == ["run"]
    assert reader.names("run") == ["encoder/validate/step_000000005"]
    entry = reader.info("run")["embeddings"][0]
    assert entry["tensorPath"].endswith("tensor.bin")
    assert [int(x) for x in entry["tensorShape"]] == [300, 17]
    tensor = reader.tensor("run", "encoder/validate/step_000000005")
    np.testing.assert_array_equal(tensor, vectors.numpy())


def test_all_zero_tensor_falls_back_to_tsv(tmp_path: Path) -> None:
    write(tmp_path / "run", EmbeddingSnapshot("zeros", 0, torch.zeros(50, 4)))

    reader = ProjectorReader(tmp_path)
    entry = reader.info("run")["embeddings"][0]
    assert entry["tensorPath"].endswith("tensor.tsv")
    np.testing.assert_array_equal(reader.tensor("run", "zeros/step_000000000"), np.zeros((50, 4)))


def test_nonzero_tensor_whose_bytes_decode_as_utf8_round_trips_as_tsv(tmp_path: Path) -> None:
    vectors = np.frombuffer(b"abcdABCD0123wxyz", "<f4").reshape(2, 2).copy()  # ASCII bytes
    write(tmp_path / "run", EmbeddingSnapshot("ascii", 0, torch.from_numpy(vectors)))

    reader = ProjectorReader(tmp_path)
    assert reader.info("run")["embeddings"][0]["tensorPath"].endswith("tensor.tsv")
    np.testing.assert_array_equal(reader.tensor("run", "ascii/step_000000000"), vectors)


def test_bfloat16_vectors_are_written_as_float32(tmp_path: Path) -> None:
    vectors = torch.randn(20, 8).to(torch.bfloat16)
    write(tmp_path / "run", EmbeddingSnapshot("bf16", 1, vectors))
    got = ProjectorReader(tmp_path).tensor("run", "bf16/step_000000001")
    np.testing.assert_array_equal(got, vectors.float().numpy())


def test_one_column_metadata_has_no_header(tmp_path: Path) -> None:
    labels = ["cat", "", "  ", "dog", "ünïcödé ✓"]
    write(tmp_path / "run", EmbeddingSnapshot("e", 0, torch.randn(5, 3), {"label": labels}))

    header, rows = parse_metadata(ProjectorReader(tmp_path).metadata("run", "e/step_000000000"))
    assert header is None
    assert [r[0] for r in rows] == ["cat", "<empty>", "<empty>", "dog", "ünïcödé ✓"]


def test_multi_column_metadata_has_header_and_safe_values(tmp_path: Path) -> None:
    metadata = {
        "label": torch.tensor([0, 1, 2]),
        "name": ["tab\there", "new\nline", "carriage\r\nreturn"],
        "col\twith tab": ["x", "y", "z"],
    }
    write(tmp_path / "run", EmbeddingSnapshot("e", 0, torch.randn(3, 2), metadata))

    header, rows = parse_metadata(ProjectorReader(tmp_path).metadata("run", "e/step_000000000"))
    assert header == ["label", "name", "col with tab"]
    assert rows == [["0", "tab here", "x"], ["1", "new line", "y"], ["2", "carriage return", "z"]]


def test_sprite_has_one_tile_per_point(tmp_path: Path) -> None:
    images = torch.rand(10, 3, 6, 5)
    write(tmp_path / "run", EmbeddingSnapshot("img", 0, torch.randn(10, 2), images=images))

    reader = ProjectorReader(tmp_path)
    entry = reader.info("run")["embeddings"][0]
    assert entry["sprite"]["singleImageDim"] == [5, 6]  # width, height
    sprite = reader.sprite("run", "img/step_000000000")
    assert png_size(sprite) == (4 * 5, 4 * 6)  # ceil(sqrt(10)) = 4


def test_sprite_pixels_are_the_thumbnails(tmp_path: Path) -> None:
    from io import BytesIO

    from PIL import Image

    images = (torch.arange(4 * 2 * 2).reshape(4, 1, 2, 2) * 8).to(torch.uint8)
    write(tmp_path / "run", EmbeddingSnapshot("img", 0, torch.randn(4, 2), images=images))
    sprite = ProjectorReader(tmp_path).sprite("run", "img/step_000000000")
    sheet = np.array(Image.open(BytesIO(sprite)))
    assert sheet.shape[:2] == (4, 4)
    for i in range(4):
        r, c = divmod(i, 2)
        np.testing.assert_array_equal(
            sheet[2 * r : 2 * r + 2, 2 * c : 2 * c + 2].reshape(2, 2, -1)[..., 0],
            images[i, 0].numpy(),
        )


def test_large_sprite_is_shrunk_to_8192_pixels() -> None:
    images = np.zeros((2000, 200, 200, 3), np.uint8)
    png, (width, height) = projector_files.sprite_png(images)
    assert png_size(png)[0] <= 8192 and png_size(png)[1] <= 8192
    assert (width, height) == (182, 182)  # 45 tiles a side, floor(8192 / 45)


def test_two_writers_and_a_resumed_writer_keep_every_entry(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first, second = TensorBoardWriter(run), TensorBoardWriter(run)
    first.write_embedding(EmbeddingSnapshot("a", 1, torch.randn(4, 2)))
    second.write_embedding(EmbeddingSnapshot("b", 1, torch.randn(4, 2)))
    first.write_embedding(EmbeddingSnapshot("a", 2, torch.randn(4, 2)))
    first.close()
    second.close()
    resumed = TensorBoardWriter(run)
    resumed.write_embedding(EmbeddingSnapshot("a", 3, torch.randn(4, 2)))
    rewritten = torch.randn(4, 2)
    resumed.write_embedding(EmbeddingSnapshot("b", 1, rewritten))  # same name: replaced
    resumed.close()

    reader = ProjectorReader(tmp_path)
    expected = [f"{t}/step_{s:09d}" for t, s in (("a", 1), ("a", 2), ("a", 3), ("b", 1))]
    assert sorted(reader.names("run")) == expected
    np.testing.assert_array_equal(reader.tensor("run", "b/step_000000001"), rewritten.numpy())


def test_names_sort_as_text_in_training_order(tmp_path: Path) -> None:
    steps = [0, 5, 20, 100, 120, 1_000, 99_999, 123_456_789]
    write(tmp_path / "run", *(EmbeddingSnapshot("enc", s, torch.randn(3, 2)) for s in steps))

    names = ProjectorReader(tmp_path).names("run")
    assert names == sorted(names) == [f"enc/step_{s:09d}" for s in steps]
    folders = sorted(p.name for p in (tmp_path / "run" / "projector" / "enc").iterdir())
    assert folders == [f"step_{s:09d}" for s in steps]


def test_resume_into_a_run_with_unpadded_names_renames_them_and_adds_no_duplicate(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    old = {5: torch.randn(3, 2), 20: torch.randn(3, 2), 100: torch.randn(3, 2)}
    write(run, *(EmbeddingSnapshot("enc", s, v) for s, v in old.items()))
    config = (run / projector_files.CONFIG_NAME).read_text()  # as earlier versions wrote it
    for step in old:
        folder = run / "projector" / "enc"
        (folder / f"step_{step:09d}").rename(folder / f"step_{step}")
        config = config.replace(f"step_{step:09d}", f"step_{step}")
    (run / projector_files.CONFIG_NAME).write_text(config)
    assert ProjectorReader(tmp_path).names("run") == ["enc/step_5", "enc/step_20", "enc/step_100"]

    again = torch.randn(3, 2)
    write(run, EmbeddingSnapshot("enc", 20, again), EmbeddingSnapshot("enc", 120, old[5]))

    names = ProjectorReader(tmp_path).names("run")
    assert sorted(names) == [f"enc/step_{s:09d}" for s in (5, 20, 100, 120)]  # 20 once
    reader = ProjectorReader(tmp_path)
    np.testing.assert_array_equal(reader.tensor("run", "enc/step_000000005"), old[5].numpy())
    np.testing.assert_array_equal(reader.tensor("run", "enc/step_000000020"), again.numpy())
    np.testing.assert_array_equal(reader.tensor("run", "enc/step_000000100"), old[100].numpy())


@pytest.mark.parametrize("tag", ["../../x", "/etc/passwd", "a/../../b", "..", "C:\\evil"])
def test_tags_never_write_outside_the_run_directory(tmp_path: Path, tag: str) -> None:
    run = tmp_path / "logs" / "run"
    write(
        run, EmbeddingSnapshot(tag, 0, torch.randn(3, 2), {"l": [1, 2, 3]}, torch.rand(3, 1, 2, 2))
    )

    outside = [p for p in tmp_path.rglob("*") if run not in p.parents and p != run and p.is_file()]
    assert outside == []
    reader = ProjectorReader(tmp_path / "logs")
    assert reader.names("run") == [f"{tag}/step_000000000"]
    assert reader.tensor("run", f"{tag}/step_000000000").shape == (3, 2)


def test_safe_names_of_different_tags_differ() -> None:
    from learnscope.storage.files import safe_name

    names = {safe_name(t) for t in ["a/b", "a_b", "a b", "a\\b", "a:b"]}
    assert len(names) == 5


def test_more_than_100k_rows_are_subsampled_with_a_warning(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    vectors = torch.arange(100_010, dtype=torch.float32)[:, None].repeat(1, 2)
    write(tmp_path / "run", EmbeddingSnapshot("big", 0, vectors, {"i": torch.arange(100_010)}))

    reader = ProjectorReader(tmp_path)
    tensor = reader.tensor("run", "big/step_000000000")
    assert tensor.shape == (100_000, 2)
    assert np.all(np.diff(tensor[:, 0]) > 0)  # original order kept
    _, rows = parse_metadata(reader.metadata("run", "big/step_000000000"))
    assert [int(r[0]) for r in rows[:50]] == tensor[:50, 0].astype(int).tolist()
    assert any("100010 rows" in r.getMessage() for r in learnscope_log.records)


def test_bad_snapshots_are_refused_with_clear_errors() -> None:
    with pytest.raises(ValueError, match=r"metadata column 'label' has 2 values .* 3 rows"):
        EmbeddingSnapshot("e", 0, torch.randn(3, 2), {"label": [1, 2]})
    with pytest.raises(ValueError, match=r"\[N, D\]"):
        EmbeddingSnapshot("e", 0, torch.randn(3))
    with pytest.raises(ValueError, match="images"):
        EmbeddingSnapshot("e", 0, torch.randn(3, 2), images=torch.rand(3, 2, 4, 4))


def test_writer_reuses_a_summary_writer_and_leaves_it_open(tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    summary = SummaryWriter(str(tmp_path / "run"))
    writer = TensorBoardWriter(summary)
    writer.write_embedding(EmbeddingSnapshot("e", 0, torch.randn(3, 2)))
    writer.write_scalars({"x": 1.5}, step=4)
    writer.close()
    summary.add_scalar("after", 1.0, 0)  # still open
    summary.close()

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "run"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("x")] == [(4, 1.5)]
    assert ProjectorReader(tmp_path).names("run") == ["e/step_000000000"]


def test_png_decodes_with_pillow() -> None:
    from io import BytesIO

    from PIL import Image

    from learnscope.plugins.pipeline.drawing import png_bytes

    for channels in (1, 2, 3, 4):
        image = np.random.default_rng(channels).integers(0, 256, (7, 9, channels), np.uint8)
        decoded = np.array(Image.open(BytesIO(png_bytes(image))))
        np.testing.assert_array_equal(decoded.reshape(7, 9, channels), image)
