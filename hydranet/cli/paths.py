"""Which paths of a parsed command line are outputs and which are inputs, for `hydranet.io.check_apart`:
every command is checked, before it writes or deletes anything, that no output is, contains or sits
inside an input it was given, and that a file it replaces is of its own kind (docs/reliability.md,
"No output destroys an input").

Outputs are the `--out` and `--save-predictions` arguments; every other path argument is an input
(a run folder counts as its own files, so RUN/metrics.json beside RUN/checkpoint.pt is fine), and so is
what a `--catalog` reads through it: its fleets and a recorded fleet's recording (`catalog_inputs`).
Inputs read through another file of a library call (a config's data.root) are checked by the library
function that opens them.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from hydranet.io import check_apart, check_replaceable

OUTPUTS = ("out", "save_predictions")
# (command, output): a working folder that may hold its own inputs (a resumed loop's suites, catalog)
WORKING_FOLDERS = {("engine run", "out")}
# (command, input): an input the command continues in place when it is the output (train --resume RUN)
IN_PLACE = {("train", "resume")}
# (command, output) -> the kind of file it writes (hydranet.io.file_kind's words): an existing file there
# of another kind (a checkpoint under eval's --out, a catalog under mine's) is never replaced
FILE_KINDS = {("eval", "out"): "json", ("eval-nuscenes", "out"): "json", ("engine mine", "out"): "json",
              ("viz", "out"): "PNG image", ("sim preview", "out"): "PNG image", ("quantize", "out"): "onnx",
              ("export", "out"): lambda args: "tensorrt" if args.format == "tensorrt" else "onnx"}


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _paths(value) -> list[Path] | None:
    if isinstance(value, Path):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, Path) for v in value):
        return value
    return None


def check_command_paths(args: argparse.Namespace, command: str) -> None:
    """`check_apart` over the command line's own paths (module docstring); ValueError naming both."""
    given = {k: p for k, v in vars(args).items() if (p := _paths(v)) is not None}
    for out_key in OUTPUTS:
        if out_key not in given:
            continue
        out = given[out_key][0]
        inputs = {}
        for key, paths in given.items():
            if key in OUTPUTS:
                continue
            if (command, key) in IN_PLACE and any(p.resolve() == out.resolve() for p in paths):
                continue
            if (command, out_key) in WORKING_FOLDERS:
                paths = [p for p in paths if out.resolve() not in p.resolve().parents]
            inputs[_flag(key)] = paths
        if "catalog" in given and (command, out_key) not in WORKING_FOLDERS and given["catalog"][0].exists():
            from data_engine.catalog import catalog_inputs

            inputs["a fleet or recording of --catalog"] = catalog_inputs(given["catalog"][0])
        check_apart({_flag(out_key): out}, inputs)
        kind = FILE_KINDS.get((command, out_key))
        if kind is not None:
            check_replaceable(out, kind(args) if callable(kind) else kind, flag=_flag(out_key))


def model_folder(model: Path) -> Path:
    """The folder a model lives in: a run folder itself, or the folder of its checkpoint.pt / model.onnx."""
    return model if model.is_dir() else model.parent


def fill_default_outputs(args: argparse.Namespace, command: str) -> None:
    """`eval` and `viz` without --out write beside the model they were given, never into the working directory:
    eval to MODEL_FOLDER/eval/<dataset folder name>[-<split>]/metrics.json ("sources" for several datasets or
    the run's own), viz to MODEL_FOLDER/viz/frame<N>.png (targets<N>.png with --targets). viz --targets from a
    --config alone has no model folder: ValueError asking for --out."""
    if command not in ("eval", "viz") or args.out is not None:
        return
    model = getattr(args, "checkpoint", None) or getattr(args, "onnx", None)
    if model is None:
        raise ValueError(f"{command} --config: give --out FILE (there is no run folder to write beside)")
    if command == "eval":
        data = args.data[0] if args.data and len(args.data) == 1 else None
        name = "sources" if data is None else data.resolve().name + (f"-{args.split}" if args.split else "")
        args.out = model_folder(model) / "eval" / name / "metrics.json"
    else:
        args.out = model_folder(model) / "viz" / f"{'targets' if args.targets else 'frame'}{args.frame}.png"
