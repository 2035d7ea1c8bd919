"""The run folder's contract: a local folder, ``memory://`` and the local S3 server alike.

Every case runs on each kind of :class:`~learnscope.storage.RunFolder` (made by
:func:`~learnscope.storage.open_run_folder` from a path or a URL), so that the writers and
views, which never ask which kind they have, can rely on what is checked here: whole writes and
reads, appends, listings, removals, markers, the debris a crash left, free space, the errors
for missing files and bad names, and (where the store can refuse) a refused write.
"""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from learnscope.run_directory.file_names import RECORD_FILE, lock_name
from learnscope.storage import DiskSpace, RunFolder, UnreadableFile, open_run_folder
from learnscope.storage.files import write_atomic
from tests.kit.s3_server import LocalS3

pytest_plugins = ["tests.kit.s3_server"]  # its fixtures: s3_endpoint, s3_env, s3_fail_fast

KINDS = ("local", "memory", "s3")


@dataclass
class Kind:
    """One kind of folder under test: where it is, and what differs by nature, not by choice.

    Attributes:
        name: ``local``, ``memory`` or ``s3``.
        location: The folder's path or URL (a new, empty one).
        has_disk: Whether its free space can be known (a disk; an object store has none).
        plant_debris: Leaves what a crashed writer of this kind leaves; returns the names.
        s3: The local S3 server, for the ``s3`` kind.
    """

    name: str
    location: str
    has_disk: bool
    plant_debris: Callable[[], list[str]]
    s3: LocalS3 | None = None

    def open(self) -> RunFolder:
        return open_run_folder(self.location)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Kind]:
    if request.param == "local":
        root = tmp_path / "run"

        def plant_local() -> list[str]:
            root.mkdir(parents=True, exist_ok=True)
            host = write_atomic.__globals__["_HOST"]
            crashed = f".tensor.bin.999999999-{host}.abcd1234.tmp"  # its process is gone
            (root / crashed).write_bytes(b"half a tensor")
            stale = lock_name(RECORD_FILE)  # a lock file no process holds
            (root / stale).write_bytes(b"")
            return [crashed, stale]

        yield Kind("local", str(root), True, plant_local)
    elif request.param == "memory":
        yield Kind("memory", f"memory://contract/{uuid.uuid4().hex}", False, list)
    else:
        s3 = request.getfixturevalue("s3_fail_fast")
        yield Kind("s3", f"s3://{s3.bucket()}/runs/version_0", False, list, s3)


@pytest.fixture
def folder(kind: Kind) -> RunFolder:
    made = kind.open()
    made.make()
    return made


def test_a_file_written_is_read_back_whole(folder: RunFolder) -> None:
    folder.write("projector/enc/step_1/tensor.bin", b"\x00\x01" * 10)
    assert folder.read("projector/enc/step_1/tensor.bin", max_bytes=100) == b"\x00\x01" * 10
    assert folder.read("projector/enc/step_1/tensor.bin", max_bytes=20, size=20)
    assert folder.size("projector/enc/step_1/tensor.bin") == 20


def test_a_write_replaces_the_whole_file_and_changes_its_stamp(folder: RunFolder) -> None:
    folder.write("config.txt", b"a long first version")
    first = folder.stamp("config.txt")
    folder.write("config.txt", b"second")
    assert folder.read("config.txt", max_bytes=100) == b"second"
    assert first is not None and folder.stamp("config.txt") not in (None, first)


def test_a_file_too_large_or_of_another_size_is_not_read(folder: RunFolder) -> None:
    folder.write("big.bin", b"x" * 100)
    with pytest.raises(UnreadableFile):
        folder.read("big.bin", max_bytes=10)
    with pytest.raises(UnreadableFile):
        folder.read("big.bin", max_bytes=1000, size=99)


def test_a_missing_file_is_said_not_guessed(folder: RunFolder) -> None:
    with pytest.raises(UnreadableFile, match="cannot be opened"):
        folder.read("nothing/here.txt", max_bytes=10)
    assert folder.size("nothing/here.txt") is None
    assert folder.stamp("nothing/here.txt") is None
    folder.remove("nothing/here.txt")  # no error
    folder.remove_tree("nothing")  # no error
    assert folder.listing("nothing") == ([], [])  # a folder not there holds nothing
    assert folder.record_source().read(1 << 20) == b""
    assert folder.record_head(100) is None and folder.record_tail(100) is None
    assert folder.record_stamp() is None and not folder.has_record()


@pytest.mark.parametrize("bad", ["../outside.txt", "/etc/passwd", "", "a/../../b", "C:/x"])
def test_a_name_leading_out_of_the_folder_is_refused(folder: RunFolder, bad: str) -> None:
    with pytest.raises(ValueError, match="refusing to write"):
        folder.write(bad, b"x")
    with pytest.raises(UnreadableFile):
        folder.read(bad, max_bytes=10)
    with pytest.raises(UnreadableFile):
        folder.child(bad)


def test_a_listing_shows_folders_and_files_directly_in_it(folder: RunFolder) -> None:
    folder.write("a.txt", b"1")
    folder.write("sub/b.txt", b"2")
    folder.write("sub/deeper/c.txt", b"3")
    assert folder.listing() == (["sub"], ["a.txt"])
    folders, files = folder.listing("sub")
    assert (folders, files) == (["deeper"], ["b.txt"])
    assert folder.child("sub").read("deeper/c.txt", max_bytes=10) == b"3"


def test_removals_leave_no_file_and_no_empty_folder(folder: RunFolder) -> None:
    folder.write("a/one.txt", b"1")
    folder.write("marker/events.out.tfevents.1.learnscope", b"m")
    folder.write("marker/inner/x", b"m")
    folder.remove("a/one.txt")
    folder.remove_empty("a")
    folder.remove_tree("marker")
    assert folder.listing() == ([], [])
    assert folder.size("a/one.txt") is None


def test_a_file_not_read_is_set_aside_under_a_new_name(folder: RunFolder) -> None:
    folder.write("layout.json", b"{")
    aside = folder.set_aside("layout.json", ValueError("cut short"), "the layout", "a new one")
    assert aside.startswith("layout.json.corrupt-")
    assert folder.size("layout.json") is None
    assert folder.read(aside, max_bytes=10) == b"{"


def test_the_record_grows_by_whole_appends_and_its_stamp_follows(folder: RunFolder) -> None:
    source = folder.record_source()
    folder.append_record(b'{"kind":"run"}\n')
    first = folder.record_stamp()
    folder.append_record(b'{"kind":"end"}\n')
    second = folder.record_stamp()
    assert source.read(1 << 20) == b'{"kind":"run"}\n{"kind":"end"}\n'
    assert source.read(1 << 20) == b""
    assert first is not None and second is not None
    assert first.identity == second.identity and first.written != second.written
    assert folder.has_record() and folder.shows_record(*folder.listing())
    head = folder.record_head(1 << 10)
    assert head is not None and head[0].startswith(b'{"kind":"run"}\n')
    assert folder.record_tail(1 << 10) == b'{"kind":"run"}\n{"kind":"end"}\n'


def test_a_searched_record_is_read_once_the_search_saw_it_change(folder: RunFolder) -> None:
    noted = {"written": None}
    source = folder.searched_record_source(lambda: noted["written"])
    folder.append_record(b'{"kind":"run"}\n')
    noted["written"] = folder.record_stamp().written  # type: ignore[union-attr]
    assert source.read(1 << 20) == b'{"kind":"run"}\n'
    folder.append_record(b'{"kind":"end"}\n')
    noted["written"] = folder.record_stamp().written  # type: ignore[union-attr]
    assert source.read(1 << 20) == b'{"kind":"end"}\n'


def appended_files(folder: RunFolder, stem: str) -> list[bytes]:
    """The files (objects) of an append file named ``<stem>.<n>``, in the order of names."""
    names = sorted(name for name in folder.listing()[1] if name.startswith(stem))
    return [folder.read(name, max_bytes=1 << 20) for name in names]


def test_an_append_file_holds_every_record_after_its_header_in_order(folder: RunFolder) -> None:
    events = folder.append_file(lambda n: f"events.{n:06d}.x", b"HEADER;")
    events.touch()
    assert all(data == b"HEADER;" for data in appended_files(folder, "events."))
    events.append(b"one;")
    events.append(b"two;")
    events.flush()
    events.append(b"three;")
    events.close()
    with pytest.raises(ValueError):
        events.append(b"four;")
    files = appended_files(folder, "events.")
    assert all(data.startswith(b"HEADER;") for data in files)
    records = b"".join(data.removeprefix(b"HEADER;") for data in files)
    assert records == b"one;two;three;"
    assert events.location.startswith(folder.location)


def test_two_append_files_never_share_a_name(folder: RunFolder) -> None:
    first = folder.append_file(lambda n: f"log.{n:06d}", b"H")
    second = folder.append_file(lambda n: f"log.{n:06d}", b"H")
    first.append(b"a")
    second.append(b"b")
    first.close()
    second.close()
    records = sorted(data.removeprefix(b"H") for data in appended_files(folder, "log."))
    assert [r for r in records if r] == [b"a", b"b"]


def test_debris_goes_at_the_first_change_and_never_before(kind: Kind) -> None:
    planted = kind.plant_debris()
    folder = kind.open()
    before = folder.listing()
    assert folder.exists()
    folder.record_source().read(1 << 10)  # reading changes nothing
    assert folder.listing() == before
    folder.write("a.txt", b"x")
    _, files = folder.listing()
    assert not set(planted) & set(files)
    assert folder.remove_debris() == []  # nothing more to remove


def test_free_space_is_known_on_a_disk_and_none_elsewhere(folder: RunFolder, kind: Kind) -> None:
    space = folder.free_space()
    if kind.has_disk:
        assert isinstance(space, DiskSpace) and 0 <= space.free <= space.total and space.total
    else:
        assert space is None


def test_a_full_disk_is_no_lasting_failure(folder: RunFolder) -> None:
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert folder.lasting_failure(full) is None


def test_a_folder_knows_itself_and_its_name(folder: RunFolder, kind: Kind) -> None:
    assert folder.same_as(kind.open())
    assert not folder.same_as(folder.child("other"))
    assert folder.child("version_3").name == "version_3"


def test_a_refused_write_raises_and_leaves_the_old_file(folder: RunFolder, kind: Kind) -> None:
    if kind.s3 is None:
        pytest.skip("only a store refuses a request")
    folder.write("config.txt", b"old")
    kind.s3.faults.refuse(503, "SlowDown", methods={"PUT"})
    with pytest.raises(OSError):
        folder.write("config.txt", b"new")
    kind.s3.faults.clear()
    assert folder.read("config.txt", max_bytes=10) == b"old"


def test_refused_credentials_are_a_lasting_failure(folder: RunFolder, kind: Kind) -> None:
    if kind.s3 is None:
        pytest.skip("only a store refuses credentials")
    kind.s3.faults.refuse(403, "AccessDenied", methods={"PUT"})
    with pytest.raises(PermissionError) as refused:
        folder.write("x.txt", b"x")
    assert folder.lasting_failure(refused.value) == "the object store refuses its credentials"


def test_a_removed_local_folder_is_a_lasting_failure(tmp_path: Path) -> None:
    folder = open_run_folder(tmp_path / "run")
    folder.make()
    folder.write("a.txt", b"x")
    folder.remove("a.txt")
    (tmp_path / "run").rmdir()
    assert folder.lasting_failure(OSError(errno.ENOENT, "gone")) is not None


def test_markers_are_kept_on_a_disk_and_cost_an_object_store_nothing(
    folder: RunFolder, kind: Kind
) -> None:
    folder.write_marker(".refresh-1/events.out.tfevents.1.learnscope", b"m")
    expected = [".refresh-1"] if kind.has_disk else []  # a store keeps none
    assert folder.markers(".refresh-") == expected
    folder.remove_tree(".refresh-1")
    assert folder.markers(".refresh-") == []
    if kind.s3 is not None:
        kind.s3.requests.reset()
        folder.write_marker(".refresh-2/x", b"m")
        assert folder.markers(".refresh-") == [] and kind.s3.requests.total == 0
