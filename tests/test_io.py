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
