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
import json
from pathlib import Path

from hydranet.io import CHECKPOINT, check_apart, check_replaceable, checkpoint_file

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



def _default_eval_out(args: argparse.Namespace, model: Path) -> Path:
    """MODEL_FOLDER/eval/<name>/metrics.json, <name> from what decides the figures: the model file (an ONNX file or
    a checkpoint under another name), the dataset folder ("sources" for several or the run's own), split, fit."""
    data = args.data[0] if args.data and len(args.data) == 1 else None
    parts = [model.stem] if model.is_file() and model.name != CHECKPOINT else []
    parts.append("sources" if data is None else data.resolve().name)
    if args.split and args.onnx is None:  # an ONNX evaluation reads the dataset's own split
        parts.append(args.split)
    if args.fit:
        parts.append(f"fit-{args.fit}")
    out = checkpoint_file(model).parent / "eval" / "-".join(parts) / "metrics.json"
    if out.is_file() and args.data:  # re-evaluating the same data replaces its figures; another dataset's are kept
        try:
            before = json.loads(out.read_text()).get("data")
        except (OSError, ValueError):
            before = None
        before = [before] if isinstance(before, str) else before
        if isinstance(before, list) and [Path(b).resolve() for b in before] != [d.resolve() for d in args.data]:
            raise ValueError(f"{out} holds the evaluation of {', '.join(map(str, before))}, not "
                             f"{', '.join(map(str, args.data))}: give --out FILE")
    return out


def fill_default_outputs(args: argparse.Namespace, command: str) -> None:
    """Commands whose --out may be left out write beside what they read, never into the working directory:
    eval to MODEL_FOLDER/eval/<model, dataset, split, fit>/metrics.json (`_default_eval_out`), viz to
    RUN/viz/<dataset folder>-frame<N>.png (targets<N>[-epoch<E>].png with --targets), eval-nuscenes to
    <results file>_metrics.json beside it. A model path that does not exist is a ValueError naming it; viz --targets
    from a --config alone has no run folder: ValueError asking for --out."""
    if getattr(args, "out", None) is not None or command not in ("eval", "viz", "eval-nuscenes"):
        return
    if command == "eval-nuscenes":
        args.out = args.results.with_name(f"{args.results.stem}_metrics.json")
        return
    flag, model = next(((f, m) for f in ("checkpoint", "onnx") if (m := getattr(args, f, None)) is not None),
                       (None, None))
    if model is None or (command == "viz" and not args.targets and args.data is None):
        if command == "viz" and args.targets and args.config is not None:
            raise ValueError("viz --targets --config: give --out FILE (there is no run folder to write beside)")
        return  # the command names what it lacks
    if not model.exists():
        raise ValueError(f"--{flag} {model} does not exist")
    if command == "eval":
        args.out = _default_eval_out(args, model)
    elif args.targets:
        args.out = checkpoint_file(model).parent / "viz" / f"targets{args.frame}{f'-epoch{args.epoch}' if args.epoch else ''}.png"
    else:
        args.out = checkpoint_file(model).parent / "viz" / f"{args.data.resolve().name}-frame{args.frame}.png"
