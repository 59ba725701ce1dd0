"""One meaning per flag (hydranet/cli/flags.py, issue 33 item 5): a renamed flag keeps its old spelling for one
release, stores under the new name, and says which flag to use."""
from __future__ import annotations

import pytest

from hydranet.cli.main import build_parser

RENAMED = [  # (argv with the old spelling, the attribute, the new flag)
    (["quantize", "--model", "m.onnx", "--data", "d", "--out", "o.onnx"], "onnx", "--onnx"),
    (["data", "check", "--root", "d"], "data", "--data"),
    (["eval-nuscenes", "--dataroot", "d", "--split", "all", "--results", "r.json"], "data", "--data"),
    (["engine", "shadow", "--model", "m.onnx", "--data", "f", "--catalog", "c.db"], "onnx", "--onnx"),
    (["engine", "shadow", "--onnx", "m.onnx", "--data", "f", "--catalog", "c.db", "--candidate", "c.onnx"],
     "candidate_onnx", "--candidate-onnx"),
    (["engine", "shadow", "--onnx", "m.onnx", "--fleet", "f", "--catalog", "c.db"], "data", "--data"),
    (["engine", "similar", "--catalog", "c.db", "--image", "i.jpg", "--model", "m.onnx"], "onnx", "--onnx"),
    (["engine", "jobs", "--catalog", "c.db", "--accept", "1", "--version", "2"], "label_version", "--label-version"),
]


@pytest.mark.parametrize("argv,attr,new", RENAMED, ids=[f"{a[0]} {a[1]} {n}" for a, _, n in RENAMED])
def test_an_old_spelling_still_works_and_names_the_new_flag(argv, attr, new, capsys):
    old = next(w for w in argv if w in ("--model", "--root", "--dataroot", "--candidate", "--version", "--fleet"))
    args = build_parser().parse_args(argv)
    assert str(getattr(args, attr)) == argv[argv.index(old) + 1]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(f"{old} is deprecated and goes in the next release; use {new}")
    new_argv = [new if w == old else w for w in argv]
    assert str(getattr(build_parser().parse_args(new_argv), attr)) == argv[argv.index(old) + 1]
    assert capsys.readouterr().err == ""  # the current spelling: no warning


def test_eval_takes_an_exported_model_as_onnx(tmp_path, capsys):
    """eval: --checkpoint is a run folder or checkpoint.pt, --onnx an exported model; one of the two. An ONNX file
    under --checkpoint still works for one release, evaluated as --onnx, with a line naming the new flag."""
    from hydranet.cli.main import main

    with pytest.raises(SystemExit):
        build_parser().parse_args(["eval", "--checkpoint", "run", "--onnx", "m.onnx"])
    assert "not allowed with argument" in capsys.readouterr().err
    args = build_parser().parse_args(["eval", "--onnx", "m.onnx", "--data", "d"])
    assert str(args.onnx) == "m.onnx" and args.checkpoint is None
    # the old spelling: the ONNX path (missing here) reaches the ONNX evaluation, which names it
    (tmp_path / "d").mkdir()
    assert main(["eval", "--checkpoint", str(tmp_path / "m.onnx"), "--data", str(tmp_path / "d"), "--out",
                 str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == ("warning: hydranet eval --checkpoint with an ONNX file is deprecated and goes in the next "
                      "release; use --onnx")
    assert "m.onnx" in err[-1] and not (tmp_path / "m.json").exists()
