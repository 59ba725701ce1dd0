"""hydranet.io: the one owner of reading JSON, atomic writes and run-or-checkpoint paths."""
from __future__ import annotations

import os

import pytest

from hydranet.data.reader import DatasetError
from hydranet.io import CHECKPOINT, TMP, atomic_path, atomic_write_bytes, atomic_write_text, checkpoint_file, read_json


def test_read_json_one_line_errors(tmp_path):
    good = tmp_path / "a.json"
    good.write_text('{"x": 1}')
    assert read_json(good) == {"x": 1}
    with pytest.raises(ValueError, match=r"b.json: table is missing; regenerate it$"):
        read_json(tmp_path / "b.json", "table", fix="regenerate it")
    with pytest.raises(ValueError, match=r"is missing"):
        read_json(tmp_path, "table")  # a folder is no file
    bad = tmp_path / "bad.json"
    bad.write_text('{"x": ')
    with pytest.raises(DatasetError, match=r"bad.json: corrupt JSON \(.*\); fix it") as e:
        read_json(bad, error=DatasetError, fix="fix it")
    assert e.value.path == bad and "\n" not in str(e.value)
    bad.write_bytes(b"\xff\xfe\x00garbage\xff")
    with pytest.raises(ValueError, match="corrupt JSON"):
        read_json(bad)
    if os.geteuid() != 0:
        good.chmod(0)
        with pytest.raises(ValueError, match="cannot be read: permission denied; check the file's permissions"):
            read_json(good)


# a Git LFS pointer as a repository without its LFS objects holds it (git-lfs.com/spec/v1)
POINTER = ("version https://git-lfs.github.com/spec/v1\noid sha256:"
           "4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 9307571\n")


def test_a_git_lfs_pointer_is_named_as_one(tmp_path):
    """A table or an image copied from a repository whose LFS objects were not fetched is a ~130-byte pointer:
    the error says so and how to get the file, not "corrupt JSON" or "not a JPEG"."""
    from hydranet.data.reader import decode_image

    table = tmp_path / "sample_annotation.json"
    table.write_text(POINTER)
    with pytest.raises(DatasetError, match=r"sample_annotation.json: a Git LFS pointer, not the table itself; fetch "
                                           r"the file itself \(`git lfs pull` in the repository it came from\)$"):
        read_json(table, "table", DatasetError)
    image = tmp_path / "n015-CAM_FRONT.jpg"
    image.write_text(POINTER)
    with pytest.raises(DatasetError, match=r"n015-CAM_FRONT.jpg: image is a Git LFS pointer, not the image itself: "
                                           r"fetch the file itself .*; re-extract"):
        decode_image(image, "re-extract")
    image.write_text("version 2 of nothing")  # not a pointer: the plain message
    with pytest.raises(DatasetError, match="is not a JPEG or PNG image"):
        decode_image(image, "re-extract")


def test_atomic_writes(tmp_path):
    p = tmp_path / "f.txt"
    assert atomic_write_text(p, "one") == p and p.read_text() == "one"
    atomic_write_bytes(p, b"two")
    assert p.read_bytes() == b"two"
    with pytest.raises(RuntimeError), atomic_path(p) as tmp:
        assert TMP in tmp.name
        tmp.write_text("half")
        raise RuntimeError("crash")
    assert p.read_bytes() == b"two" and [q.name for q in tmp_path.iterdir()] == ["f.txt"]  # no temp left


def test_checkpoint_file(tmp_path):
    assert checkpoint_file(tmp_path) == tmp_path / CHECKPOINT
    assert checkpoint_file(tmp_path / "x.pt") == tmp_path / "x.pt"
