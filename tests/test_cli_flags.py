"""One meaning per flag (hydranet/cli/flags.py, issue 33 item 5): a renamed flag keeps its old spelling for one
release, stores under the new name, and says which flag to use."""
from __future__ import annotations

import pytest

from hydranet.cli.main import build_parser

RENAMED = [  # (argv with the old spelling, the attribute, the new flag)
    (["quantize", "--model", "m.onnx", "--data", "d", "--out", "o.onnx"], "onnx", "--onnx"),
    (["data", "check", "--root", "d"], "data", "--data"),
    (["eval-nuscenes", "--dataroot", "d", "--split", "all", "--results", "r.json"], "data", "--data"),
    (["engine", "shadow", "--model", "m.onnx", "--fleet", "f", "--catalog", "c.db"], "onnx", "--onnx"),
    (["engine", "shadow", "--onnx", "m.onnx", "--fleet", "f", "--catalog", "c.db", "--candidate", "c.onnx"],
     "candidate_onnx", "--candidate-onnx"),
    (["engine", "similar", "--catalog", "c.db", "--image", "i.jpg", "--model", "m.onnx"], "onnx", "--onnx"),
    (["engine", "jobs", "--catalog", "c.db", "--accept", "1", "--version", "2"], "label_version", "--label-version"),
]


@pytest.mark.parametrize("argv,attr,new", RENAMED, ids=[f"{a[0]} {a[1]} {n}" for a, _, n in RENAMED])
def test_an_old_spelling_still_works_and_names_the_new_flag(argv, attr, new, capsys):
    old = next(w for w in argv if w in ("--model", "--root", "--dataroot", "--candidate", "--version"))
    args = build_parser().parse_args(argv)
    assert str(getattr(args, attr)) == argv[argv.index(old) + 1]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(f"{old} is deprecated and goes in the next release; use {new}")
    new_argv = [new if w == old else w for w in argv]
    assert str(getattr(build_parser().parse_args(new_argv), attr)) == argv[argv.index(old) + 1]
    assert capsys.readouterr().err == ""  # the current spelling: no warning
