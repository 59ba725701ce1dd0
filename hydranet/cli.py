"""`hydranet <command>`: parses arguments and calls into the packages, nothing more."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from hydranet.config import ConfigError, load_config
from hydranet.rig import RigError

# errors a user can act on: printed as one line, exit status 2. RuntimeErrors count only when the
# project raised them (RenderError, TrainingDiverged): one from torch is a bug and keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (ConfigError, RigError, ValueError, OSError)
OUR_PACKAGES = ("hydranet", "sim", "deploy", "data_engine")


def _is_user_error(e: BaseException) -> bool:
    return isinstance(e, USER_ERRORS) or (isinstance(e, RuntimeError) and type(e).__module__.split(".")[0] in OUR_PACKAGES)


def _sim_config(args):
    from sim.config import SimConfig

    overrides = list(args.set)
    if getattr(args, "rig", None):
        overrides.append(f"rig={args.rig}")
    return load_config(SimConfig, args.config, overrides)


def cmd_sim_generate(args) -> None:
    from sim.generate import generate_dataset

    out = generate_dataset(args.out, _sim_config(args), args.scenes, args.seed, progress=not args.quiet)
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


def cmd_sim_stats(args) -> None:
    from sim.stats import dataset_stats, format_stats

    print(format_stats(dataset_stats(args.data, progress=not args.quiet)))


def cmd_data_check(args) -> None:
    from hydranet.data.formats import check_dataset, format_report

    report = check_dataset(args.root, args.format, args.split, args.version, args.limit, progress=not args.quiet)
    print(format_report(report))
    if report["bad"]:
        raise SystemExit(1)


def cmd_demo(args) -> None:
    import shutil
    import time

    from data_engine.demo import engine_round
    from hydranet.demo import run_demo

    t0 = time.perf_counter()
    out = Path(args.out)
    run_demo(out)
    engine = out / "engine"
    if engine.exists():
        shutil.rmtree(engine)  # the demo's own output folder, as run_demo does for its stages
    engine_round(engine, out / "run")
    print(f"demo with the engine round done in {time.perf_counter() - t0:.1f} s")


def cmd_eval_nuscenes(args) -> None:
    from hydranet.metrics import DetectionConfig, evaluate_nuscenes, format_metrics, write_metrics

    cfg = DetectionConfig.from_json(args.config) if args.config else None
    metrics = evaluate_nuscenes(args.dataroot, args.version, args.split, args.results, cfg)
    print(format_metrics(metrics))
    print(f"wrote {write_metrics(metrics, args.out)}")


def cmd_train(args) -> None:
    from hydranet.checkpoint import CHECKPOINT, config_from_checkpoint, load_checkpoint
    from hydranet.experiment import load_experiment
    from hydranet.train import check_resume, train

    if args.config is None and args.resume is None:
        raise ValueError("give --config FILE (a new run) or --resume RUN_DIR (continue one)")
    ckpt = load_checkpoint(args.resume) if args.resume is not None else None
    if args.config is not None:
        cfg = load_experiment(args.config, args.set)
    else:  # resuming without a config file: the run's own resolved config
        cfg = config_from_checkpoint(ckpt, args.set)
    out = args.out or args.resume
    if out is None:
        raise ValueError("give --out RUN_DIR")
    start = 0
    if ckpt is not None:
        start = int(ckpt["step"])
        for change in check_resume(cfg, ckpt, str(args.resume)):
            print(f"resume: config {change} (applied and recorded in {Path(out) / 'config.json'})")
    train(cfg, out, resume=args.resume, progress=not args.quiet, overwrite=args.overwrite)
    print(f"trained steps {start + 1}..{cfg.steps}; wrote {Path(out) / CHECKPOINT} (step {cfg.steps})")


def cmd_eval(args) -> None:
    from hydranet.evaluate import evaluate_checkpoint, format_sources_table, format_table

    data = args.data[0] if args.data and len(args.data) == 1 else args.data  # None/several: per source
    reference = getattr(args, "reference", None)
    if not isinstance(data, Path) and (str(args.checkpoint).endswith(".onnx") or reference is not None):
        why = "to evaluate an ONNX model on" if reference is None else "with --reference"
        raise ValueError(f"--data: give one dataset folder {why} (per-source evaluation of several is for checkpoints)")
    if str(args.checkpoint).endswith(".onnx"):  # an exported fp32/int8 model: same frames, same metrics
        from deploy.onnx_eval import evaluate_onnx

        results = evaluate_onnx(args.checkpoint, data, args.out, progress=not args.quiet,
                                save_predictions=args.save_predictions)
    else:
        results = evaluate_checkpoint(args.checkpoint, data, args.out, args.save_predictions, progress=not args.quiet,
                                      format=args.format, split=args.split, version=args.version)
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

        ref = evaluate_any(args.reference, data, progress=False)
        print(format_drop(primary_drop(ref, results), str(args.reference), str(args.checkpoint)))
    print(f"wrote {args.out}")


def cmd_export(args) -> None:
    from deploy.export import export_command

    export_command(args.checkpoint, args.out, args.data, args.format, args.dynamic_batch, args.input_dtype, args.int8)


def cmd_quantize(args) -> None:
    from deploy.quantize import QuantizeConfig, parse_keep_float, quantize_model

    pats, ops = parse_keep_float(args.keep_float)
    keep = {"keep_float": pats, "keep_float_op_types": ops} if args.keep_float else {}
    quantize_model(args.model, args.data, args.out, QuantizeConfig(target=args.target, calibration_frames=args.frames,
                                                                    **keep))


def cmd_bench(args) -> None:
    from deploy.bench import run_bench

    run_bench(args.checkpoint, args.out, args.data, args.runs, args.warmup, args.threads)


def cmd_viz(args) -> None:
    from hydranet.evaluate import viz_checkpoint

    print(f"wrote {viz_checkpoint(args.checkpoint, args.data, args.out, args.frame)}")


def _add_sim_args(p: argparse.ArgumentParser, scenes: bool = True) -> None:
    p.add_argument("--config", type=Path, default=None, help="sim config: a YAML file, or a shipped config name (sim)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--rig", default=None, help="rig preset name (nuscenes6, tesla8) or calibration YAML file")
    p.add_argument("--seed", type=int, default=0)
    if scenes:
        p.add_argument("--scenes", type=int, default=4)


def cmd_engine_fleet(args) -> None:
    from data_engine.fleet import FleetConfig, generate_fleet

    cfg = load_config(FleetConfig, args.config, list(args.set))
    print(f"wrote {generate_fleet(args.out, cfg, args.clips, args.seed, progress=not args.quiet)}")


def cmd_engine_shadow(args) -> None:
    from data_engine.shadow import run_shadow

    st = run_shadow(args.model, args.fleet, args.catalog, args.candidate, args.executor, args.workers, progress=not args.quiet,
                    ray_address=args.ray_address)
    print(f"shadow run {st['run_id']}: {st['clips'] - st['done_before']} of {st['clips']} clips shadowed now "
          f"({st['done_before']} done before), {st['frames']} frames, {st['corrupt']} corrupt -> {args.catalog}")


def _engine_config(args):
    from data_engine.config import EngineConfig

    return load_config(EngineConfig, args.config, list(args.set))


def cmd_engine_triggers(args) -> None:
    from data_engine.catalog import Catalog
    from data_engine.evaluation import load_run_truth, trigger_markdown, trigger_rows, truth_summary
    from data_engine.triggers import build_triggers, fire_all

    triggers = build_triggers(_engine_config(args).trigger_params() or None)
    run_id, hits = fire_all(args.catalog, triggers, args.run)
    with Catalog(args.catalog) as cat:  # the fleet's truth, where it has one (a sim fleet): precision and recall
        truth, why = load_run_truth(cat, run_id)
    print(f"triggers over shadow run {run_id} of {args.catalog}")
    print(truth_summary(truth) if truth is not None else f"no precision/recall: {why}")
    print(trigger_markdown(trigger_rows(triggers, hits, truth), truth))


def cmd_engine_mine(args) -> None:
    from data_engine.mining import mine, write_selection

    sel = mine(args.catalog, args.budget, args.strategy, _engine_config(args), args.unit, args.run, args.name)
    write_selection(sel, args.out)
    print(f"selected {len(sel['items'])} {args.unit}(s) of {sel['pool']} by {args.strategy} -> {args.out}")


def cmd_engine_similar(args) -> None:
    from data_engine.mining import similar
    from data_engine.shadow import similar_image

    if (args.frame is None) == (args.image is None):
        raise ValueError("give exactly one of --frame ID (a frame of the catalog) or --image FILE (with --model)")
    if args.image is not None:
        res = similar_image(args.catalog, args.model, args.image, args.camera, args.k, args.run)
    else:
        if args.model is not None or args.camera is not None:
            raise ValueError("--model and --camera go with --image; --frame uses the catalog's embeddings")
        res = similar(args.catalog, args.frame, args.k, args.run)
    for r in res:
        print(f"{r['frame_id']:8d}  {r['clip']}/{r['frame']:06d}  {r['similarity']:.4f}")


def cmd_engine_report(args) -> None:
    from data_engine.report import write_report

    rep = write_report(args.catalog, args.out, args.selection, args.run, _engine_config(args), args.camera, args.max_frames,
                       args.overwrite)
    print(f"report of selection {rep['selection']} ({rep['shown']} of {rep['items']} frames on the contact sheet), "
          f"shadow run {rep['run']}: {rep['out']}/report.md, contact_sheet.png, signals.png")


def _label_backend(args):
    from data_engine.labeling import build_backend
    from data_engine.labeling.oracle import OracleNoise

    noise = OracleNoise(getattr(args, "jitter_px", 0.0), getattr(args, "miss_small", 0.0), getattr(args, "small_area", 256.0),
                        getattr(args, "confusion", 0.0), getattr(args, "noise_seed", 0))
    return build_backend(args.backend, noise=noise, out=getattr(args, "out", None), files=getattr(args, "file", None) or (),
                         labeller=getattr(args, "labeller", None), url=args.ls_url, token=args.ls_token, project=args.ls_project)


def _selection_name(sel):
    from data_engine.labels import read_selection

    return None if sel is None else read_selection(sel)[0] if str(sel).endswith(".json") else str(sel)


def cmd_engine_label(args) -> None:
    from data_engine.labels import create_jobs, open_catalog, send

    backend = _label_backend(args)
    with open_catalog(args.catalog) as cat:
        made = create_jobs(cat, args.selection, backend.name)
        st = send(cat, backend, made["selection"], progress=not args.quiet)
    print(f"selection {made['selection']}: {made['created']} label jobs queued ({made['existing']} existed), "
          f"{st['sent']} sent to {backend.name}" + (f" -> {args.out}" if getattr(args, "out", None) else ""))


def cmd_engine_import_labels(args) -> None:
    from data_engine.labels import import_labels, open_catalog

    with open_catalog(args.catalog) as cat:
        got = import_labels(cat, _label_backend(args), _selection_name(args.selection), progress=not args.quiet)
    print(f"{got['new']} new label versions ({got['duplicate']} already recorded), {got['waiting']} sent jobs still waiting, "
          f"{len(got['conflicts'])} conflicts")
    for c in got["conflicts"]:
        print(f"  conflict: frame {c['frame']} (id {c['frame_id']}) versions {c['versions']} ({' vs '.join(c['sources'])}): {c['detail']}")


def cmd_engine_jobs(args) -> None:
    from data_engine.labels import conflicts, job_table, open_catalog, transition

    sel = _selection_name(args.selection)
    with open_catalog(args.catalog) as cat:
        for flag, to, source in (("requeue", "queued", "rejected"), ("reject", "rejected", "labelled"),
                                 ("accept", "accepted", "labelled")):
            ids = getattr(args, flag)
            if ids is None:
                continue
            if ids == "all":
                jobs = [r["job"] for r in job_table(cat, sel) if r["state"] == source]
            else:
                try:
                    jobs = [int(i) for i in ids.split(",") if i.strip()]
                except ValueError:
                    raise ValueError(f"--{flag} takes job ids like 3,4,7 or 'all', got {ids!r}") from None
            transition(cat, jobs, to, args.version)
            print(f"{len(jobs)} jobs -> {to}")
        rows = job_table(cat, sel)
        print("| job | selection | frame | state | backend | label versions |\n|---:|---|---|---|---|---:|")
        print("\n".join(f"| {r['job']} | {r['selection']} | {r['frame']} | {r['state']} | {r['backend']} | {r['versions']} |"
                        for r in rows))
        for c in conflicts(cat, sel):
            print(f"conflict: frame id {c['frame_id']} versions {c['versions']} ({' vs '.join(c['sources'])}): {c['detail']}")


def _add_engine(sub) -> None:
    """`hydranet engine ...`: the data engine (docs/data_engine.md)."""
    eng = sub.add_parser("engine", help="the data engine: fleet, shadow mode, triggers, mining (docs/data_engine.md)")
    eng = eng.add_subparsers(dest="engine_command", required=True)
    f = eng.add_parser("fleet", help="many sim clips with conditions and rare scenarios at realistic rates")
    f.add_argument("--out", type=Path, required=True)
    f.add_argument("--clips", type=int, default=20)
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--config", type=Path, default="fleet", help="fleet config: a YAML file or a shipped name (fleet)")
    f.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    f.add_argument("--quiet", action="store_true", help="no progress bar")
    f.set_defaults(func=cmd_engine_fleet)
    sh = eng.add_parser("shadow", help="run the deployed ONNX model over every fleet clip; per-frame signals into the catalog")
    sh.add_argument("--model", type=Path, required=True, help="model.onnx written by `hydranet export`")
    sh.add_argument("--fleet", type=Path, required=True, help="a fleet folder (`hydranet engine fleet`)")
    sh.add_argument("--catalog", type=Path, required=True, help="catalog file (created if missing)")
    sh.add_argument("--candidate", type=Path, default=None, help="a candidate model run alongside (it never drives)")
    sh.add_argument("--executor", default="local", help="local (process pool) or ray")
    sh.add_argument("--workers", type=int, default=None, help="worker processes or Ray actors (default: one per CPU)")
    sh.add_argument("--ray-address", default=None, help="with --executor ray: the cluster to join, e.g. ray://head:10001 "
                    "(default: $RAY_ADDRESS, else a local Ray instance of --workers CPUs)")
    sh.add_argument("--quiet", action="store_true", help="no progress bar")
    sh.set_defaults(func=cmd_engine_shadow)
    for cmd, helptext in (("triggers", "fire the configured triggers over a shadow run; frames fired per trigger"),
                          ("mine", "select a budget of frames (or clips) worth labelling, each with its reason"),
                          ("similar", "the frames most like a given frame (embedding cosine)")):
        c = eng.add_parser(cmd, help=helptext)
        c.add_argument("--catalog", type=Path, required=True)
        c.add_argument("--run", type=int, default=None, help="shadow run id (default: the latest)")
        if cmd != "similar":
            c.add_argument("--config", type=Path, default="engine", help="engine config: YAML file or shipped name (engine)")
            c.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
        if cmd == "mine":
            c.add_argument("--budget", type=int, required=True)
            c.add_argument("--strategy", default="hybrid", help="random | uncertainty | diversity | hybrid | triggers")
            c.add_argument("--unit", default="frame", help="frame or clip")
            c.add_argument("--out", type=Path, default=Path("selection.json"))
            c.add_argument("--name", default=None, help="selection name in the catalog (default: strategy-unit-budget)")
        if cmd == "similar":
            c.add_argument("--frame", type=int, default=None, help="query frame id (selection.json items' frame_id)")
            c.add_argument("--image", type=Path, default=None, help="query image file (JPEG/PNG, one camera's image)")
            c.add_argument("--model", type=Path, default=None, help="with --image: the shadow run's model.onnx (embeds it)")
            c.add_argument("--camera", default=None, help="with --image: the camera it is from (default: the model's first)")
            c.add_argument("--k", type=int, default=50)
        c.set_defaults(func={"triggers": cmd_engine_triggers, "mine": cmd_engine_mine, "similar": cmd_engine_similar}[cmd])
    rep = eng.add_parser("report", help="contact sheet of mined frames, signal histograms, trigger table (markdown)")
    rep.add_argument("--catalog", type=Path, required=True)
    rep.add_argument("--out", type=Path, required=True, help="report folder (refused if it exists, unless --overwrite)")
    rep.add_argument("--selection", default=None, help="selection name in the catalog or selection.json (default: newest)")
    rep.add_argument("--run", type=int, default=None, help="shadow run id (default: the selection's, else the latest)")
    rep.add_argument("--camera", default=None, help="camera shown on the contact sheet (default: the model's first)")
    rep.add_argument("--max-frames", type=int, default=48, help="frames on the contact sheet (best ranks first)")
    rep.add_argument("--config", type=Path, default="engine", help="engine config: YAML file or shipped name (engine)")
    rep.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    rep.add_argument("--overwrite", action="store_true", help="replace an existing report folder")
    rep.set_defaults(func=cmd_engine_report)
    _add_engine_labels(eng)
    _add_engine_retrain(eng)
    _add_engine_gate(eng)
    _add_engine_loop(eng)


def cmd_engine_run(args) -> None:
    from data_engine.config import EngineConfig
    from data_engine.loop import Loop

    cfg = load_config(EngineConfig, args.config, list(args.set))
    Loop(args.out, cfg, args.production, progress=not args.quiet, suites=args.suites, fleets=args.fleets).run(args.rounds)
    print(f"loop run -> {args.out} (catalog {args.out / 'catalog.sqlite'}, journal {args.out / 'loop.json'})")


def _add_engine_loop(eng) -> None:
    """`hydranet engine run`: the whole loop, K rounds, resumable (docs/data_engine.md)."""
    r = eng.add_parser("run", help="the loop: fleet, shadow, triggers, mine, label, retrain, export, gate, promote; K rounds")
    r.add_argument("--out", type=Path, required=True, help="the loop's folder (catalog, suites, rounds); rerun to resume")
    r.add_argument("--production", type=Path, default=None, help="the run (checkpoint) that drives the first fleet")
    r.add_argument("--rounds", type=int, default=1)
    r.add_argument("--suites", type=Path, default=None, help="frozen suites to gate on (default: generated into OUT/suites)")
    r.add_argument("--fleets", type=Path, default=None, help="fleets already rendered, one per round: FLEETS/r000, r001, ...")
    r.add_argument("--config", type=Path, default="engine", help="engine config: YAML file or shipped name (engine)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    r.add_argument("--quiet", action="store_true", help="no progress bars")
    r.set_defaults(func=cmd_engine_run)


def cmd_engine_retrain(args) -> None:
    import json

    from data_engine.retrain import RECORD, retrain

    out = retrain(args.production, args.catalog, args.out, args.steps, args.mix, args.base, args.resume, args.overwrite,
                  progress=not args.quiet, cfg=_engine_config(args))
    rec = json.loads((out / RECORD).read_text())
    acc = rec["accepted"]
    by = ", ".join(f"{n} {s}" for s, n in sorted(acc["by_source"].items()))
    print(f"retrained {rec['production']} for {rec['steps']} steps on the base set + {acc['frames']} accepted labels ({by}), "
          f"mix {rec['mix']} -> {out / 'checkpoint.pt'}; export it with `hydranet export --checkpoint {out} --out MODEL.onnx`")


def _add_engine_retrain(eng) -> None:
    """`hydranet engine retrain`: fine-tune production on base + accepted labels (docs/data_engine.md)."""
    r = eng.add_parser("retrain", help="fine-tune the production model on its training set plus the accepted labels")
    r.add_argument("--production", type=Path, required=True, help="the production checkpoint.pt or its run folder")
    r.add_argument("--catalog", type=Path, required=True, help="the catalog whose accepted labels are added")
    r.add_argument("--out", type=Path, required=True, help="run folder (checkpoint.pt, config.json, retrain.json, accepted/)")
    r.add_argument("--steps", type=int, default=None, help="fine-tuning steps (default: retrain.steps of --config)")
    r.add_argument("--mix", type=float, default=None, help="fraction of batches from the accepted labels (default: retrain.mix)")
    r.add_argument("--base", type=Path, default=None, help="base training set (default: the production's data.root/sources)")
    r.add_argument("--resume", action="store_true", help="continue the run in --out exactly")
    r.add_argument("--overwrite", action="store_true", help="replace a run already in --out (refused without it)")
    r.add_argument("--config", type=Path, default="engine", help="engine config: YAML file or shipped name (engine)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    r.add_argument("--quiet", action="store_true", help="no progress bars")
    r.set_defaults(func=cmd_engine_retrain)


def _add_engine_labels(eng) -> None:
    """`hydranet engine label | import-labels | jobs`: the relabel queue (docs/labeling.md)."""
    def backend_args(c, importing: bool) -> None:
        c.add_argument("--catalog", type=Path, required=True)
        c.add_argument("--backend", default="oracle", help="oracle (default) | files | label-studio")
        c.add_argument("--ls-url", default=None, help="Label Studio URL (or $HYDRANET_LABEL_STUDIO_URL)")
        c.add_argument("--ls-token", default=None, help="Label Studio API token (or $HYDRANET_LABEL_STUDIO_TOKEN)")
        c.add_argument("--ls-project", default=None, help="Label Studio project title (default: 'hydranet <selection>')")
        c.add_argument("--quiet", action="store_true", help="no progress bar")
        if importing:
            c.add_argument("--selection", default=None, help="selection name or file (default: every sent job of the backend)")
            c.add_argument("--file", type=Path, action="append", default=[], help="files: a COCO .json or CVAT .xml to import")
            c.add_argument("--labeller", default=None, help="files: who labelled them (default: file:<name>)")
            c.add_argument("--jitter-px", type=float, default=0.0, help="oracle noise: box edge jitter sigma, pixels")
            c.add_argument("--miss-small", type=float, default=0.0, help="oracle noise: rate of missed small boxes")
            c.add_argument("--small-area", type=float, default=256.0, help="oracle noise: a small box is under this many px^2")
            c.add_argument("--confusion", type=float, default=0.0, help="oracle noise: rate of class confusions")
            c.add_argument("--noise-seed", type=int, default=0)

    lab = eng.add_parser("label", help="queue a selection's frames as label jobs and send them to a labelling backend")
    backend_args(lab, importing=False)
    lab.add_argument("--selection", type=Path, required=True, help="selection.json (`hydranet engine mine --out`)")
    lab.add_argument("--out", type=Path, default=None, help="files: folder for the COCO/CVAT exports and images")
    lab.set_defaults(func=cmd_engine_label)
    imp = eng.add_parser("import-labels", help="fetch finished labels from a backend into the catalog as new label versions")
    backend_args(imp, importing=True)
    imp.set_defaults(func=cmd_engine_import_labels)
    jobs = eng.add_parser("jobs", help="list label jobs and conflicts; accept, reject or requeue jobs")
    jobs.add_argument("--catalog", type=Path, required=True)
    jobs.add_argument("--selection", default=None, help="selection name or file (default: all)")
    jobs.add_argument("--accept", default=None, metavar="IDS", help="job ids (3,4) or 'all' labelled jobs")
    jobs.add_argument("--reject", default=None, metavar="IDS", help="job ids or 'all' labelled jobs")
    jobs.add_argument("--requeue", default=None, metavar="IDS", help="job ids or 'all' rejected jobs")
    jobs.add_argument("--version", type=int, default=None, help="accept this label version of the frame (needed on a conflict)")
    jobs.set_defaults(func=cmd_engine_jobs)


def cmd_engine_suites(args) -> None:
    from data_engine.fleet import FleetConfig
    from data_engine.suites import generate_suites

    fleet = load_config(FleetConfig, args.fleet_config, list(args.fleet_set))
    out = generate_suites(args.out, _engine_config(args).suites, fleet, args.clips, args.seed, args.overwrite,
                          progress=not args.quiet)
    print(f"wrote {out} ({out / 'suites.json'}: slices, seeds, digests)")


def cmd_engine_gate(args) -> None:
    from data_engine.gate import format_gate, gate, write_gate
    from data_engine.registry import checkpoint_file, production, promote

    rule = _engine_config(args).gate
    if args.promote and args.catalog is None:
        raise ValueError("--promote moves the production pointer of a catalog: give --catalog CAT")
    if args.onnx is not None and not args.promote:
        raise ValueError("--onnx is the candidate's export for --promote; add --promote or drop --onnx")
    prod_entry = production(args.catalog) if args.catalog is not None and (args.promote or args.production is None) else None
    prod = args.production
    if prod is None:
        if prod_entry is None:
            raise ValueError("give --production CKPT, or --catalog CAT whose registry has a production model")
        prod = prod_entry["checkpoint"]
    elif prod_entry is not None:
        from data_engine.catalog import file_sha256

        if file_sha256(checkpoint_file(prod)) != prod_entry["sha256"]:
            raise ValueError(f"--production {prod} is not the production model of {args.catalog} ({prod_entry['checkpoint']});"
                             " gate against it (omit --production) or drop --promote")
    report = gate(args.candidate, prod, args.suites, rule, args.catalog, progress=not args.quiet)
    print(format_gate(report))
    out = write_gate(report, args.out)
    print(f"wrote {out / 'gate.json'}, {out / 'gate.md'}" + (f"; recorded in {args.catalog}" if args.catalog else ""))
    if args.promote and report["promote"]:
        entry = promote(args.catalog, args.candidate, args.onnx, note=f"gate passed ({out / 'gate.json'})")
        print(f"promoted {entry['checkpoint']} (registry entry {entry['id']}) in {args.catalog}")
    if not report["promote"]:
        raise SystemExit(1)


def cmd_engine_promote(args) -> None:
    from data_engine.registry import promote

    e = promote(args.catalog, args.checkpoint, args.onnx, args.note)
    print(f"production: {e['checkpoint']} (sha256 {e['sha256'][:12]}, registry entry {e['id']}, since {e['when']}) "
          f"in {args.catalog}")


def cmd_engine_rollback(args) -> None:
    from data_engine.registry import rollback

    e = rollback(args.catalog)
    print(f"rolled back: production is {e['checkpoint']} (sha256 {e['sha256'][:12]}) again, registry entry {e['id']}")


def cmd_engine_registry(args) -> None:
    from data_engine.registry import format_history, history

    rows = history(args.catalog)
    print(format_history(rows) if rows else f"catalog {args.catalog} has no registry entries; `hydranet engine promote` one")


def _add_engine_gate(eng) -> None:
    """`hydranet engine suites | gate | promote | rollback | registry` (docs/data_engine.md)."""
    s = eng.add_parser("suites", help="render the frozen held-out scenario suites, one sim dataset per slice")
    s.add_argument("--out", type=Path, required=True, help="suites folder (refused if it exists, unless --overwrite)")
    s.add_argument("--config", type=Path, default="engine", help="engine config (its suites: section): YAML or shipped name")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override an engine config key (suites.clips=1)")
    s.add_argument("--fleet-config", type=Path, default="fleet", help="fleet config whose rig, image size and frame rate to use")
    s.add_argument("--fleet-set", action="append", default=[], metavar="KEY=VALUE", help="override a fleet config key")
    s.add_argument("--clips", type=int, default=None, help="clips per slice (default: suites.clips)")
    s.add_argument("--seed", type=int, default=None, help="suite seed (default: suites.seed)")
    s.add_argument("--overwrite", action="store_true", help="replace an existing suites folder (its unit tests are kept)")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_engine_suites)
    g = eng.add_parser("gate", help="candidate vs production on every suite and head; exit 0 promote, 1 reject")
    g.add_argument("--candidate", type=Path, required=True, help="candidate checkpoint.pt or its run folder")
    g.add_argument("--production", type=Path, default=None, help="production checkpoint (default: the catalog's production)")
    g.add_argument("--suites", type=Path, required=True, help="suites folder (`hydranet engine suites`)")
    g.add_argument("--catalog", type=Path, default=None, help="record the result (and cache metrics) in this catalog")
    g.add_argument("--out", type=Path, default=Path("gate"), help="folder for gate.json and gate.md")
    g.add_argument("--promote", action="store_true", help="on a pass, make the candidate the catalog's production")
    g.add_argument("--onnx", type=Path, default=None, help="with --promote: the candidate's exported model.onnx")
    g.add_argument("--config", type=Path, default="engine", help="engine config (its gate: rule): YAML or shipped name")
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a key (gate.tolerance=0.05)")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.set_defaults(func=cmd_engine_gate)
    p = eng.add_parser("promote", help="make a checkpoint the production model of a catalog (previous one kept)")
    p.add_argument("--catalog", type=Path, required=True, help="catalog file (created if missing)")
    p.add_argument("--checkpoint", type=Path, required=True, help="checkpoint.pt or its run folder")
    p.add_argument("--onnx", type=Path, default=None, help="its exported model.onnx (what shadow mode runs)")
    p.add_argument("--note", default="", help="why (kept in the registry)")
    p.set_defaults(func=cmd_engine_promote)
    rb = eng.add_parser("rollback", help="return to the production model before the current one")
    rb.add_argument("--catalog", type=Path, required=True)
    rb.set_defaults(func=cmd_engine_rollback)
    rg = eng.add_parser("registry", help="the registry's history: every production model, the current one marked")
    rg.add_argument("--catalog", type=Path, required=True)
    rg.set_defaults(func=cmd_engine_registry)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="hydranet", description="HydraNet perception stack")
    sub = ap.add_subparsers(dest="command", required=True)
    sim = sub.add_parser("sim", help="the built-in driving simulator").add_subparsers(dest="sim_command", required=True)

    g = sim.add_parser("generate", help="render a dataset (docs/dataset_format.md)")
    g.add_argument("--out", type=Path, required=True)
    g.add_argument("--quiet", action="store_true", help="no progress bar")
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

    st = sim.add_parser("stats", help="content statistics of a sim dataset next to nuScenes' (docs/sim_look.md)")
    st.add_argument("--data", type=Path, required=True, help="a generated sim dataset")
    st.add_argument("--quiet", action="store_true", help="no progress bar")
    st.set_defaults(func=cmd_sim_stats)

    t = sub.add_parser("train", help="train a HydraNet experiment (configs/tiny.yaml); torchrun for several processes")
    t.add_argument("--config", type=Path, default=None, help="experiment: a YAML file, or a shipped config name (tiny, bev, regnet)")
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    t.add_argument("--out", type=Path, default=None, help="run folder (checkpoint.pt, config.json, tb/)")
    t.add_argument("--resume", type=Path, default=None, help="run folder or checkpoint to continue exactly")
    t.add_argument("--overwrite", action="store_true", help="replace a run already in --out (refused without it)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.set_defaults(func=cmd_train)

    ev = sub.add_parser("eval", help="every head's metrics against trivial baselines; JSON and a table")
    ev.add_argument("--checkpoint", type=Path, required=True,
                    help="checkpoint.pt or its run folder, or an exported model.onnx / model.int8.onnx")
    ev.add_argument("--reference", type=Path, default=None,
                    help="also evaluate this checkpoint/ONNX model and print the primary-metric drop per head")
    ev.add_argument("--data", type=Path, nargs="+", default=None,
                    help="a dataset folder to evaluate on: sim, nuScenes, BDD100K or KITTI (docs/datasets.md); several "
                         "folders, or none on a run with data.sources: each evaluated on its own, one table per source")
    ev.add_argument("--format", choices=["auto", "sim", "nuscenes", "kitti", "bdd100k"], default=None,
                    help="dataset format (default: the config's for its data.root/sources, else detected)")
    ev.add_argument("--split", default=None, help="nuScenes/KITTI/BDD100K split (default: the config's, else the reader's)")
    ev.add_argument("--version", default=None, help="nuScenes version folder (default: the only one)")
    ev.add_argument("--out", type=Path, default=Path("metrics.json"))
    ev.add_argument("--save-predictions", type=Path, default=None, metavar="DIR",
                    help="where the heads write their predictions (det2d COCO JSON, det3d nuscenes_results.json); "
                         "default: the folder of --out")
    ev.add_argument("--quiet", action="store_true", help="no progress bar")
    ev.set_defaults(func=cmd_eval)

    v = sub.add_parser("viz", help="PNG: predictions next to ground truth for every camera")
    v.add_argument("--checkpoint", type=Path, required=True)
    v.add_argument("--data", type=Path, required=True)
    v.add_argument("--out", type=Path, default=Path("predictions.png"))
    v.add_argument("--frame", type=int, default=0)
    v.set_defaults(func=cmd_viz)

    n = sub.add_parser("eval-nuscenes", help="nuScenes detection metrics (mAP, NDS, TP errors) of a submission file")
    n.add_argument("--dataroot", type=Path, required=True, help="nuScenes-format dataset root")
    n.add_argument("--version", default="v1.0-trainval", help="version folder under the dataroot")
    n.add_argument("--split", required=True, help="split name: mini_train, mini_val, a key of <version>/splits.json, all")
    n.add_argument("--results", type=Path, required=True, help="submission JSON {meta, results}")
    n.add_argument("--out", type=Path, default=Path("metrics.json"), help="metrics_summary.json-style output")
    n.add_argument("--config", type=Path, default=None, help="devkit detection config JSON (default detection_cvpr_2019)")
    n.set_defaults(func=cmd_eval_nuscenes)

    x = sub.add_parser("export", help="the whole network as one checked ONNX graph (or TensorRT engines)")
    x.add_argument("--checkpoint", type=Path, required=True, help="checkpoint.pt or its run folder")
    x.add_argument("--out", type=Path, required=True, help="model.onnx (--format onnx) or model.engine (tensorrt)")
    x.add_argument("--data", type=Path, default=None, help="sim dataset for the parity check (default: the config's)")
    x.add_argument("--format", choices=["onnx", "tensorrt"], default="onnx")
    x.add_argument("--dynamic-batch", action="store_true", help="free batch axis (TensorRT: optimization profile)")
    x.add_argument("--input-dtype", choices=["uint8", "float32"], default="uint8", help="dtype of the images input")
    x.add_argument("--int8", action="store_true", help="tensorrt: also the INT8 engine from a Q/DQ model")
    x.set_defaults(func=cmd_export)

    qz = sub.add_parser("quantize", help="INT8 QDQ static quantization of an exported model, calibrated on sim frames")
    qz.add_argument("--model", type=Path, required=True, help="model.onnx written by `hydranet export`")
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
    dc.add_argument("--root", type=Path, required=True)
    dc.add_argument("--format", choices=["sim", "nuscenes", "kitti", "bdd100k"], default=None, help="default: detected")
    dc.add_argument("--split", default=None, help="nuScenes/KITTI/BDD100K split (BDD100K default: val)")
    dc.add_argument("--version", default=None, help="nuScenes version folder (default: the only one)")
    dc.add_argument("--limit", type=int, default=None, help="check only the first N frames")
    dc.add_argument("--quiet", action="store_true", help="no progress bar")
    dc.set_defaults(func=cmd_data_check)

    d = sub.add_parser("demo", help="the main job on the built-in sim (what `make demo` runs)")
    d.add_argument("--out", type=Path, default=Path("out/demo"))
    d.set_defaults(func=cmd_demo)
    _add_engine(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - sorted below: actionable errors become one line, bugs re-raise
        if not _is_user_error(e):
            raise
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
