"""`hydranet <command>`: parses arguments and calls into the packages, nothing more."""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
import tempfile
from pathlib import Path

from hydranet.cli.engine import add_engine
from hydranet.cli.flags import Registered, renamed
from hydranet.cli.paths import check_command_paths, fill_default_outputs
from hydranet.config import ConfigError, add_override_option, load_config
from hydranet.rig import RigError

# errors a user can act on: printed as one line, exit status 2. RuntimeErrors count only when the
# project raised them (RenderError, TrainingDiverged): one from torch is a bug and keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (ConfigError, RigError, ValueError, OSError)
OUR_PACKAGES = ("hydranet", "sim", "deploy", "data_engine")


def _is_user_error(e: BaseException) -> bool:
    return isinstance(e, USER_ERRORS) or (isinstance(e, RuntimeError) and type(e).__module__.split(".")[0] in OUR_PACKAGES)


# `pip install .` is the car side (numpy, onnxruntime, OpenCV, PyYAML, tqdm: README "Installing"); the rest
# comes with extras. A command whose extra is missing says which, in one line: top-level module -> extra.
MODULE_EXTRAS = {"torch": "train", "torchvision": "train", "albumentations": "train", "onnx": "train", "onnxslim": "train",
                 "pycocotools": "train", "tensorboard": "train", "moderngl": "sim", "ray": "ray", "pyarrow": "ray",
                 "pandas": "ray", "av": "engine", "tensorrt": "tensorrt"}
COMMAND_EXTRAS = {"demo": "all", "engine": "engine"}  # commands that need several extras name the one holding them all


def command_name(args) -> str:
    """'train', 'sim preview', 'engine run': the words of the command line that chose `args.func`."""
    sub = getattr(args, f"{args.command.replace('-', '_')}_command", None)
    return f"{args.command} {sub}" if sub else args.command


def missing_extra(e: BaseException, command: str) -> str | None:
    """The one-line message for an optional dependency that is not installed, or None (a broken
    install of a package that is there, or a module no extra brings, keeps its traceback). An error
    of ours raised while handling the import (sim's RenderError for moderngl) counts as the import."""
    for _ in range(3):
        if isinstance(e, ModuleNotFoundError) or e is None:
            break
        e = e.__cause__ or e.__context__
    if not isinstance(e, ModuleNotFoundError) or not e.name:
        return None
    top = e.name.split(".")[0]
    if top not in MODULE_EXTRAS or (e.name != top and importlib.util.find_spec(top) is not None):
        return None
    extra = MODULE_EXTRAS[top]
    whole = COMMAND_EXTRAS.get(command.split()[0])
    if whole and extra in ("train", "sim"):
        extra = whole
    jetson = "; on a Jetson install JetPack's torch and torchvision first" if extra in ("train", "engine", "all") else ""
    other = "; or run without it: --executor local" if top == "ray" else ""
    return (f"`hydranet {command}` needs the {extra} extra ({top} is not installed): pip install 'hydranet-stack[{extra}]' "
            f"(from a checkout: pip install '.[{extra}]'){jetson}{other}")


def _sim_config(args):
    from sim.config import SimConfig

    overrides = list(args.set)
    if getattr(args, "rig", None):
        overrides.append(f"rig={args.rig}")
    return load_config(SimConfig, args.config, overrides)


def cmd_sim_generate(args) -> None:
    from sim.generate import generate_dataset

    out = generate_dataset(args.out, _sim_config(args), args.scenes, args.seed, progress=not args.quiet,
                           workers=args.workers)
    print(f"wrote {out}")


def cmd_sim_preview(args) -> None:
    from hydranet.data import SimDataset
    from hydranet.viz import sample_preview, write_png
    from sim.generate import generate_dataset

    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if data is None:
            cfg = _sim_config(args)
            data = generate_dataset(Path(tmp) / "preview", cfg, 1, args.seed, progress=False)
        ds = SimDataset(data)
        if not 0 <= args.frame < len(ds):
            raise ValueError(f"--frame {args.frame} is outside the dataset's {len(ds)} frames")
        write_png(args.out, sample_preview(ds[args.frame], ds.meta))
    print(f"wrote {args.out}")


def cmd_sim_export_nuscenes(args) -> None:
    from sim.nuscenes_export import export_nuscenes_from_sim

    out = export_nuscenes_from_sim(args.out, _sim_config(args), args.scenes, args.seed, sweeps=args.sweeps)
    print(f"wrote {out}")


def cmd_sim_export_videos(args) -> None:
    from hydranet.data import SimDataset
    from sim.recordings import write_image_sequences, write_rig, write_videos

    SimDataset(args.data)  # a readable sim dataset, or a one-line error naming the file
    if args.out.exists():
        raise ValueError(f"{args.out} exists; choose a new --out")
    if args.fps is not None and not args.fps > 0:
        raise ValueError(f"--fps must be positive, got {args.fps}")
    out = write_image_sequences(args.data, args.out) if args.images else write_videos(args.data, args.out, args.fps)
    rig = write_rig(args.data, args.out / "rig.yaml")  # inside --out: ingest reads only its clip folders
    print(f"wrote {out} ({'image sequences' if args.images else 'videos'}) and its rig file {rig}")


def cmd_sim_stats(args) -> None:
    from sim.stats import dataset_stats, format_stats

    print(format_stats(dataset_stats(args.data, progress=not args.quiet)))


def cmd_data_check(args) -> None:
    from hydranet.data.formats import check_dataset, format_report

    report = check_dataset(args.data, args.format, args.split, args.version, args.limit, progress=not args.quiet)
    print(format_report(report))
    if report["bad"]:  # a bad file is a user error like a corrupt table: exit 2, one line on stderr
        raise ValueError(f"{len(report['bad'])} bad file(s) in {args.data} (listed above; first: {report['bad'][0]}); fix "
                         "or remove them, or train with data.on_bad_frame=skip")


def cmd_demo(args) -> None:
    import shutil
    import time

    from hydranet.cli.demo import engine_round, run_demo

    t0 = time.perf_counter()
    out = Path(args.out)
    run_demo(out, train_seed=args.seed)
    engine = out / "engine"
    if engine.exists():
        shutil.rmtree(engine)  # the demo's own output folder, as run_demo does for its stages
    engine_round(engine, out / "run")
    print(f"demo with the engine round done in {time.perf_counter() - t0:.1f} s")


def cmd_eval_nuscenes(args) -> None:
    from hydranet.metrics import DetectionConfig, evaluate_nuscenes, format_metrics, write_metrics

    cfg = DetectionConfig.from_json(args.config) if args.config else None
    metrics = evaluate_nuscenes(args.data, args.version, args.split, args.results, cfg)
    print(format_metrics(metrics))
    print(f"wrote {write_metrics(metrics, args.out)}")


def cmd_train(args) -> None:
    from hydranet.checkpoint import CHECKPOINT, config_from_checkpoint, load_checkpoint
    from hydranet.experiment import load_experiment
    from hydranet.train import check_resume, train

    if args.config is None and args.resume is None:
        raise ValueError("give --config FILE (a new run) or --resume RUN_DIR (continue one)")
    if args.init is not None and args.resume is not None:
        raise ValueError("--init starts a new run from a checkpoint's weights and --resume continues a run from its own; "
                         "give one of them")
    ckpt = load_checkpoint(args.resume) if args.resume is not None else None
    if args.config is not None:
        cfg = load_experiment(args.config, args.set)
    else:  # resuming without a config file: the run's own resolved config
        cfg = config_from_checkpoint(ckpt, args.set)
    if args.init is not None:  # the command line over the config file's init_from, as --set is
        if any(s.split("=", 1)[0].strip() == "init_from" for s in args.set):
            raise ValueError("--init and --set init_from=... both name the init checkpoint; give one of them")
        cfg = dataclasses.replace(cfg, init_from=str(args.init))
    if args.overfit_batch:
        cfg = dataclasses.replace(cfg, overfit_batch=True)
    out = args.out or args.resume
    if out is None:
        raise ValueError("give --out RUN_DIR")
    start = 0
    if ckpt is not None:
        start = int(ckpt["step"])
        for change in check_resume(cfg, ckpt, str(args.resume)):
            print(f"resume: config {change} (applied and recorded in {Path(out) / 'config.json'})")
    if args.trunk_steps < 0:
        raise ValueError(f"--trunk-steps {args.trunk_steps}: give N >= 1 trunk steps, or 0 (the default) for none")
    if args.trunk_steps:
        from hydranet.curriculum import train_two_stage

        if ckpt is not None or cfg.init_from is not None:
            raise ValueError("--trunk-steps starts a new run with its own trunk stage; it cannot be combined with "
                             "--resume or --init (resume the run folder, or its trunk/ run, by itself)")
        train_two_stage(cfg, out, args.trunk_steps, progress=not args.quiet, overwrite=args.overwrite)
    else:
        train(cfg, out, resume=args.resume, progress=not args.quiet, overwrite=args.overwrite)
    print(f"trained steps {start + 1}..{cfg.steps}; wrote {Path(out) / CHECKPOINT} (step {cfg.steps})")


def cmd_eval(args) -> None:
    from hydranet.evaluate import evaluate_checkpoint, format_sources_table, format_table

    if args.checkpoint is not None and args.checkpoint.suffix == ".onnx":  # the old spelling, for one release
        print("warning: hydranet eval --checkpoint with an ONNX file is deprecated and goes in the next release; use "
              "--onnx", file=sys.stderr)
        args.onnx, args.checkpoint = args.checkpoint, None
    data = args.data[0] if args.data and len(args.data) == 1 else args.data  # None/several: per source
    reference = getattr(args, "reference", None)
    if not isinstance(data, Path) and (args.onnx is not None or reference is not None):
        why = "to evaluate an ONNX model on" if reference is None else "with --reference"
        raise ValueError(f"--data: give one dataset folder {why} (per-source evaluation of several is for checkpoints)")
    if args.onnx is not None:  # an exported fp32/int8 model: same frames, same metrics
        from deploy.onnx_eval import evaluate_onnx

        results = evaluate_onnx(args.onnx, data, args.out, progress=not args.quiet,
                                save_predictions=args.save_predictions, fit=args.fit)
    else:
        results = evaluate_checkpoint(args.checkpoint, data, args.out, args.save_predictions, progress=not args.quiet,
                                      format=args.format, split=args.split, version=args.version, fit=args.fit)
    if results.get("note"):  # a model run on some of its cameras: the BEV heads left out
        print(results["note"])
    per = results["sources"].values() if "sources" in results else [results]
    print(format_sources_table(results) if "sources" in results else format_table(results))
    for r in per:
        for path in r["predictions"]:
            root = r["data"] if r.get("format") == "nuscenes" else f"<export_nuscenes of {r['data']}>"
            split = r.get("split") or "all" if r.get("format") == "nuscenes" else "all"
            version = r.get("version") or "v1.0-mini"
            note = (f" (the nuScenes submission format: `hydranet eval-nuscenes --dataroot {root} --version {version} "
                    f"--split {split} --results ...`)") if path.endswith("nuscenes_results.json") else ""
            print(f"wrote {path}{note}")
    if reference is not None:
        from deploy.onnx_eval import evaluate_any, format_drop, primary_drop

        ref = evaluate_any(args.reference, data, progress=False, fit=args.fit)
        print(format_drop(primary_drop(ref, results), str(args.reference), str(args.onnx or args.checkpoint)))
    print(f"wrote {args.out}")


def cmd_export(args) -> None:
    from deploy.export import export_command

    given = [c for c in (args.checkpoint_path, args.checkpoint) if c is not None]
    if len(set(given)) != 1:  # none, or two different ones
        raise ValueError("give the checkpoint once: `hydranet export CHECKPOINT --out OUT` or `--checkpoint CHECKPOINT`")
    export_command(given[0], args.out, args.data, args.format, args.dynamic_batch, args.input_dtype, args.int8,
                   rig=args.rig, overwrite=args.overwrite, cameras=args.cameras)


def cmd_quantize(args) -> None:
    from deploy.quantize import QuantizeConfig, parse_keep_float, quantize_model

    pats, ops = parse_keep_float(args.keep_float)
    keep = {"keep_float": pats, "keep_float_op_types": ops} if args.keep_float else {}
    quantize_model(args.onnx, args.data, args.out, QuantizeConfig(target=args.target, calibration_frames=args.frames,
                                                                    **keep))


def cmd_bench(args) -> None:
    from deploy.bench import run_bench

    run_bench(args.checkpoint, args.out, args.data, args.runs, args.warmup, args.threads)


def cmd_viz(args) -> None:
    if args.targets:
        import dataclasses

        from hydranet.checkpoint import config_from_checkpoint, load_checkpoint
        from hydranet.experiment import load_experiment
        from hydranet.viz_targets import viz_targets

        if (args.config is None) == (args.checkpoint is None):
            raise ValueError("--targets draws an experiment's training items: give --config FILE or --checkpoint RUN "
                             "(its config), one of them")
        cfg = load_experiment(args.config, args.set) if args.config is not None else \
            config_from_checkpoint(load_checkpoint(args.checkpoint), args.set)
        if args.data is not None:
            cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, root=str(args.data)))
        print(f"wrote {viz_targets(cfg, args.out, args.frame, args.epoch)}")
        return
    from hydranet.evaluate import viz_checkpoint

    if args.checkpoint is None or args.data is None or args.config is not None or args.set:
        raise ValueError("viz draws a checkpoint's predictions: give --checkpoint RUN and --data DATASET "
                         "(--config and --set belong to --targets)")
    print(f"wrote {viz_checkpoint(args.checkpoint, args.data, args.out, args.frame)}")


def _add_sim_args(p: argparse.ArgumentParser, scenes: bool = True) -> None:
    p.add_argument("--config", type=Path, default=None, help="sim config: a YAML file, or a shipped config name (sim)")
    add_override_option(p)
    p.add_argument("--rig", default=None, help="rig preset name (nuscenes6, tesla8) or calibration YAML file")
    p.add_argument("--seed", type=int, default=0)
    if scenes:
        p.add_argument("--scenes", type=int, default=4)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="hydranet", description="HydraNet perception stack")
    sub = ap.add_subparsers(dest="command", required=True)
    sim = sub.add_parser("sim", help="the built-in driving simulator").add_subparsers(dest="sim_command", required=True)

    g = sim.add_parser("generate", help="render a dataset (docs/dataset_format.md)")
    g.add_argument("--out", type=Path, required=True)
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.add_argument("--workers", type=int, default=1,
                   help="processes rendering whole scenes at once (default 1); the output is byte-identical")
    _add_sim_args(g)
    g.set_defaults(func=cmd_sim_generate)

    p = sim.add_parser("preview", help="PNG mosaic of all cameras with labels, plus the BEV")
    p.add_argument("--out", type=Path, default=Path("preview.png"))
    p.add_argument("--data", type=Path, default=None, help="a generated dataset (default: render one scene now)")
    p.add_argument("--frame", type=int, default=0)
    _add_sim_args(p, scenes=False)
    p.set_defaults(func=cmd_sim_preview)

    e = sim.add_parser("export-nuscenes", help="write the sim in the nuScenes v1.0 table format")
    e.add_argument("--out", type=Path, required=True)
    e.add_argument("--sweeps", type=int, default=0, metavar="N",
                   help="N unlabelled camera sweeps (non-keyframe sample_data, sweeps/<CAM>/) between two keyframes, "
                        "rendered at the intermediate times (default 0: keyframes only)")
    _add_sim_args(e)
    e.set_defaults(func=cmd_sim_export_nuscenes)

    ev = sim.add_parser("export-videos", help="a sim dataset as camera videos (or image sequences) plus its rig file, "
                        "the layout `hydranet engine ingest` reads (docs/recordings.md)")
    ev.add_argument("--data", type=Path, required=True, help="a generated sim dataset")
    ev.add_argument("--out", type=Path, required=True, help="folder for <clip>/<CAMERA>.mp4 (refused if it exists)")
    ev.add_argument("--fps", type=float, default=None, help="video frame rate (default: the dataset's)")
    ev.add_argument("--images", action="store_true", help="write <clip>/<CAMERA>/<timestamp_us>.jpg instead of videos")
    ev.set_defaults(func=cmd_sim_export_videos)

    st = sim.add_parser("stats", help="content statistics of a sim dataset next to nuScenes' (docs/sim_look.md)")
    st.add_argument("--data", type=Path, required=True, help="a generated sim dataset")
    st.add_argument("--quiet", action="store_true", help="no progress bar")
    st.set_defaults(func=cmd_sim_stats)

    t = sub.add_parser("train", help="train a HydraNet experiment (configs/tiny.yaml); torchrun for several processes")
    t.add_argument("--config", type=Path, default=None, help="experiment: a YAML file, or a shipped config name (tiny, bev, regnet)")
    add_override_option(t)
    t.add_argument("--out", type=Path, default=None, help="run folder (checkpoint.pt, config.json, tb/)")
    t.add_argument("--resume", type=Path, default=None, help="run folder or checkpoint to continue exactly")
    t.add_argument("--overwrite", action="store_true", help="replace a run already in --out (refused without it)")
    t.add_argument("--init", type=Path, default=None, metavar="CHECKPOINT",
                   help="start from this checkpoint (or run folder): every weight whose name and shape match is loaded, "
                        "the rest keep their initialization (a summary is printed); a shape mismatch is refused "
                        "(config key init_from)")
    t.add_argument("--trunk-steps", type=int, default=0, metavar="N",
                   help="first train the trunk with the camera heads on CAM_FRONT + CAM_BACK for N steps (into "
                        "OUT/trunk), then the whole config from it (hydranet.curriculum; what make demo does)")
    t.add_argument("--overfit-batch", action="store_true",
                   help="train on one fixed batch (the first, no augmentation) every step and print each head's loss "
                        "at step 1 and at the end: every head should go to ~0 (config key overfit_batch)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.set_defaults(func=cmd_train)

    ev = sub.add_parser("eval", help="every head's metrics against trivial baselines; JSON and a table")
    model = ev.add_mutually_exclusive_group(required=True)
    model.add_argument("--checkpoint", type=Path, help="checkpoint.pt or its run folder")
    model.add_argument("--onnx", type=Path, help="an exported model.onnx / model.int8.onnx (`hydranet export`, `quantize`)")
    ev.add_argument("--reference", type=Path, default=None,
                    help="also evaluate this checkpoint/ONNX model and print the primary-metric drop per head")
    ev.add_argument("--data", type=Path, nargs="+", default=None,
                    help="a dataset folder to evaluate on: sim, nuScenes, BDD100K or KITTI (docs/datasets.md); several "
                         "folders, or none on a run with data.sources: each evaluated on its own, one table per source")
    ev.add_argument("--format", choices=Registered("hydranet.data.formats:format_names", "auto"), default=None,
                    help="dataset format (default: the config's for its data.root/sources, else detected)")
    ev.add_argument("--split", default=None, help="nuScenes/KITTI/BDD100K split (default: the config's, else the reader's)")
    ev.add_argument("--version", default=None, help="nuScenes version folder (default: the only one)")
    ev.add_argument("--fit", choices=Registered("hydranet.experiment:FITS"), default=None,
                    help="how a frame of another camera reaches the model's input size (default: the run's data.fit): "
                         "stretch it, crop it (aspect kept) or resample it to the model's camera of that name (its focal "
                         "length: objects keep their training size; needs the source's intrinsics)")
    ev.add_argument("--out", type=Path, default=None,
                    help="metrics JSON (default: MODEL_FOLDER/eval/[<model file>-]<dataset folder>[-<split>][-fit-<fit>]/"
                         "metrics.json, beside the run or ONNX file)")
    ev.add_argument("--save-predictions", type=Path, default=None, metavar="DIR",
                    help="where the heads write their predictions (det2d COCO JSON, det3d nuscenes_results.json); "
                         "default: the folder of --out")
    ev.add_argument("--quiet", action="store_true", help="no progress bar")
    ev.set_defaults(func=cmd_eval)

    v = sub.add_parser("viz", help="PNG: predictions next to ground truth for every camera (--targets: the network's "
                                   "inputs and targets)")
    v.add_argument("--checkpoint", type=Path, default=None, help="run folder or checkpoint.pt")
    v.add_argument("--data", type=Path, default=None, help="dataset (--targets: default the config's data.root)")
    v.add_argument("--out", type=Path, default=None,
                   help="PNG (default: RUN/viz/<dataset folder>-frame<N>.png, or targets<N>.png with --targets; needed "
                        "with --config)")
    v.add_argument("--frame", type=int, default=0)
    v.add_argument("--targets", action="store_true",
                   help="draw training item --frame as the network sees it (augmented inputs, every head's targets), "
                        "from --config (or the --checkpoint's config)")
    v.add_argument("--config", type=Path, default=None, help="--targets: experiment YAML or shipped config name")
    add_override_option(v)
    v.add_argument("--epoch", type=int, default=0, help="--targets: the epoch whose augmentation is drawn")
    v.set_defaults(func=cmd_viz)

    n = sub.add_parser("eval-nuscenes", help="nuScenes detection metrics (mAP, NDS, TP errors) of a submission file")
    renamed(n, "--data", "--dataroot", type=Path, required=True, help="nuScenes-format dataset root")
    n.add_argument("--version", default="v1.0-trainval", help="version folder under the dataroot")
    n.add_argument("--split", required=True, help="split name: mini_train, mini_val, a key of <version>/splits.json, all")
    n.add_argument("--results", type=Path, required=True, help="submission JSON {meta, results}")
    n.add_argument("--out", type=Path, default=None,
                   help="metrics_summary.json-style output (default: <results file>_metrics.json beside it)")
    n.add_argument("--config", type=Path, default=None, help="devkit detection config JSON (default detection_cvpr_2019)")
    n.set_defaults(func=cmd_eval_nuscenes)

    x = sub.add_parser("export", help="the whole network as one checked ONNX graph (or TensorRT engines)")
    x.add_argument("checkpoint_path", nargs="?", type=Path, default=None, metavar="CHECKPOINT",
                   help="checkpoint.pt or its run folder (or --checkpoint)")
    x.add_argument("--checkpoint", type=Path, default=None, help="checkpoint.pt or its run folder")
    x.add_argument("--out", type=Path, required=True, help="model.onnx (--format onnx) or model.engine (tensorrt)")
    x.add_argument("--data", type=Path, default=None, help="sim dataset for the parity check (default: the config's)")
    x.add_argument("--format", choices=["onnx", "tensorrt"], default="onnx")
    x.add_argument("--dynamic-batch", action="store_true", help="free batch axis (TensorRT: optimization profile)")
    x.add_argument("--input-dtype", choices=["uint8", "float32"], default="uint8", help="dtype of the images input")
    x.add_argument("--int8", action="store_true", help="tensorrt: also the INT8 engine from a Q/DQ model")
    x.add_argument("--rig", type=Path, default=None, metavar="FLEET_OR_RIG",
                   help="export for another rig (a rig YAML, a sim dataset/fleet or a recorded fleet folder): same weights, "
                        "the BEV view transform rebuilt from its calibration (docs/deploy.md)")
    x.add_argument("--cameras", nargs="+", default=None, metavar="CAMERA",
                   help="export the camera heads alone on these of the model's cameras (e.g. CAM_FRONT for a one-camera "
                        "dashcam; the BEV heads need every camera and are left out)")
    x.add_argument("--overwrite", action="store_true", help="replace an existing --out (refused without it)")
    x.set_defaults(func=cmd_export)

    qz = sub.add_parser("quantize", help="INT8 QDQ static quantization of an exported model, calibrated on sim frames")
    renamed(qz, "--onnx", "--model", type=Path, required=True, help="model.onnx written by `hydranet export`")
    qz.add_argument("--data", type=Path, required=True, help="sim dataset for calibration")
    qz.add_argument("--out", type=Path, required=True)
    qz.add_argument("--frames", type=int, default=16, help="calibration frames")
    qz.add_argument("--target", choices=["cpu", "tensorrt"], default="cpu")
    qz.add_argument("--keep-float", action="append", default=[], metavar="PATTERN",
                    help="node-name pattern (fnmatch) or op:TYPE to keep in float; repeatable (replaces the "
                         "default '*/neck/*')")
    qz.set_defaults(func=cmd_quantize)

    b = sub.add_parser("bench", help="latency table: torch eager, ONNX Runtime fp32/int8 (+ TensorRT)")
    b.add_argument("--checkpoint", type=Path, required=True)
    b.add_argument("--data", type=Path, default=None, help="sim dataset (default: the config's)")
    b.add_argument("--out", type=Path, default=Path("out/bench"), help="folder for models, latency.md and latency.json")
    b.add_argument("--runs", type=int, default=30)
    b.add_argument("--warmup", type=int, default=5)
    b.add_argument("--threads", type=int, default=2)
    b.set_defaults(func=cmd_bench)

    dc = sub.add_parser("data", help="public and sim datasets (docs/datasets.md)").add_subparsers(
        dest="data_command", required=True).add_parser("check", help="validate a dataset folder and print what it holds")
    renamed(dc, "--data", "--root", type=Path, required=True, help="the dataset folder")
    dc.add_argument("--format", choices=Registered("hydranet.data.formats:format_names"), default=None, help="default: detected")
    dc.add_argument("--split", default=None, help="nuScenes/KITTI/BDD100K split (BDD100K default: val)")
    dc.add_argument("--version", default=None, help="nuScenes version folder (default: the only one)")
    dc.add_argument("--limit", type=int, default=None, help="check only the first N frames")
    dc.add_argument("--quiet", action="store_true", help="no progress bar")
    dc.set_defaults(func=cmd_data_check)

    d = sub.add_parser("demo", help="the main job on the built-in sim (what `make demo` runs)")
    d.add_argument("--out", type=Path, default=Path("out/demo"))
    d.add_argument("--seed", type=int, default=0, help="training seed of the demo's model (default 0)")
    d.set_defaults(func=cmd_demo)
    add_engine(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        fill_default_outputs(args, command_name(args))
        check_command_paths(args, command_name(args))
        args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - sorted below: actionable errors become one line, bugs re-raise
        extra = missing_extra(e, command_name(args))
        if extra is None and not _is_user_error(e):
            raise
        print(f"error: {extra or e}", file=sys.stderr)
        return 2
    return 0

