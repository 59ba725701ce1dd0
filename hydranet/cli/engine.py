"""`hydranet engine <command>`: the data engine's half of the CLI (docs/data_engine.md,
docs/engine_loop.md). Parses arguments and calls into `data_engine`, nothing more; `hydranet.cli.main`
adds these subcommands to its parser. The application package (hydranet/cli/) is the only code outside
`data_engine` that may import it (tests/test_layering.py).
"""
from __future__ import annotations

from pathlib import Path

from hydranet.cli.engine_labels import add_engine_autolabel, add_engine_labels
from hydranet.cli.flags import Registered, engine_config, renamed
from hydranet.config import add_override_option, load_config


def cmd_engine_fleet(args) -> None:
    from data_engine.fleet import FleetConfig, generate_fleet

    cfg = load_config(FleetConfig, args.config, list(args.set))
    print(f"wrote {generate_fleet(args.out, cfg, args.clips, args.seed, progress=not args.quiet, workers=args.workers)}")


def cmd_engine_ingest(args) -> None:
    from data_engine.ingest import IngestError, ingest

    need = {"video": ("videos", "rig"), "images": ("root", "rig"), "dataset": ("root",)}[args.source]
    allowed = {"video": ("hz", "timestamps", "poses", "on_bad_clip", "follow_links"),
               "images": ("hz", "poses", "on_bad_clip", "follow_links"),
               "dataset": ("format", "split", "version", "sweeps")}[args.source]
    given = [n for n in ("root", "videos", "rig", "hz", "timestamps", "poses", "format", "split", "version", "sweeps",
                         "on_bad_clip", "follow_links") if getattr(args, n) not in (None, 0, False)]
    missing = [n for n in need if getattr(args, n) is None]
    if missing:
        raise IngestError(f"--source {args.source} needs --{missing[0]} (docs/recordings.md)")
    extra = [n for n in given if n not in need + allowed]
    if extra:
        raise IngestError(f"--{extra[0].replace('_', '-')} does not go with --source {args.source} (docs/recordings.md)")
    r = ingest(args.out, args.source, args.overwrite, progress=not args.quiet, videos=args.videos, root=args.root,
               rig=args.rig, hz=args.hz, timestamps=args.timestamps, poses=args.poses, format=args.format, split=args.split,
               version=args.version, sweeps=args.sweeps, on_bad_clip=args.on_bad_clip, follow_links=args.follow_links)
    skipped = (f"; skipped {len(r['skipped'])} unreadable clip(s) (listed in fleet.json; first: {r['skipped'][0]['reason']})"
               if r["skipped"] else "")
    linked = (f"; followed {len(r['linked'])} link(s) out of the source folder, read in place at {', '.join(r['linked'][:3])}"
              f"{' ...' if len(r['linked']) > 3 else ''}" if r["linked"] else "")
    print(f"ingested {r['clips']} clip(s), {r['frames']} frames of cameras {', '.join(r['cameras'])} ({r['source']}) -> "
          f"{r['out']}{skipped}{linked}")


def cmd_engine_shadow(args) -> None:
    from data_engine.shadow import run_shadow

    st = run_shadow(args.onnx, args.data, args.catalog, args.candidate_onnx, args.executor, args.workers, progress=not args.quiet,
                    ray_address=args.ray_address)
    for line in st["notes"]:
        print(line)
    print(f"shadow run {st['run_id']}: {st['clips'] - st['done_before']} of {st['clips']} clips shadowed now "
          f"({st['done_before']} done before), {st['frames']} frames, {st['corrupt']} corrupt -> {args.catalog}")


def cmd_engine_triggers(args) -> None:
    from data_engine.catalog import Catalog
    from data_engine.evaluation import load_run_truth, trigger_markdown, trigger_rows, truth_summary
    from data_engine.triggers import build_triggers, fire_all, run_table

    triggers = build_triggers(engine_config(args).trigger_params() or None)
    run_id, hits = fire_all(args.catalog, triggers, args.run)
    with Catalog(args.catalog) as cat:  # the fleet's truth, where it has one (a sim fleet): precision and recall
        truth, why = load_run_truth(cat, run_id)
        table = run_table(cat, run_id)  # the share each fires on, and why a degenerate one is
    print(f"triggers over shadow run {run_id} of {args.catalog} (how to read: docs/data_engine.md, Triggers)")
    print(truth_summary(truth) if truth is not None else f"no precision/recall: {why}")
    print(trigger_markdown(trigger_rows(triggers, hits, truth, table), truth))


def cmd_engine_mine(args) -> None:
    from data_engine.mining import mine, write_selection

    sel = mine(args.catalog, args.budget, args.strategy, engine_config(args), args.unit, args.run, args.name,
               args.search)
    write_selection(sel, args.out)
    print(f"selected {len(sel['items'])} {args.unit}(s) of {sel['pool']} by {args.strategy} -> {args.out}")
    print(format_picks(sel["items"]))


PICKS_SHOWN = 20


def format_picks(items: list[dict]) -> str:
    """The first PICKS_SHOWN picks as a table: rank, frame id, clip/frame, the strategy's score, triggers fired."""
    lines = [f"{'rank':>4}  {'frame id':>8}  {'clip/frame':<28} {'score':>8}  triggers fired"]
    for it in items[:PICKS_SHOWN]:
        r = it.get("reason") or {}
        score = "-" if r.get("score") is None else f"{r['score']:.4f}"
        fired = ", ".join(f"{t} {v:.3g}" for t, v in (r.get("trigger_scores") or {}).items()) or "-"
        lines.append(f"{it['rank']:>4}  {it['frame_id']:>8}  {it['clip'] + '/' + format(it['frame'], '06d'):<28} "
                     f"{score:>8}  {fired}")
    if len(items) > PICKS_SHOWN:
        lines.append(f"... and {len(items) - PICKS_SHOWN} more in the selection file")
    return "\n".join(lines)


def cmd_engine_uncertainty(args) -> None:
    from data_engine.uncertainty import run_uncertainty

    st = run_uncertainty(args.catalog, args.models, args.run, not args.no_tta, args.overwrite, progress=not args.quiet)
    print(f"offline uncertainty of shadow run {st['run_id']}: {len(args.models)} models over {st['frames']} frames in "
          f"{st['seconds']:.1f} s; columns {', '.join(st['columns'])} -> {args.catalog} (mine with --strategy ensemble"
          f"{'' if args.no_tta else ' or tta'})")


def _add_engine_uncertainty(eng) -> None:
    u = eng.add_parser("uncertainty", help="server-side: an ensemble's disagreement and flip TTA over a shadow run's frames, "
                       "stored as offline columns (`engine mine --strategy ensemble | tta`)")
    u.add_argument("--catalog", type=Path, required=True)
    u.add_argument("--models", type=Path, nargs="+", required=True,
                   help="2+ exported model.onnx files: the shadow run's model first, then other members (other seeds, "
                        "snapshots or training sets)")
    u.add_argument("--run", type=int, default=None, help="shadow run id (default: the latest)")
    u.add_argument("--no-tta", action="store_true", help="no flip test-time augmentation (ensemble columns only)")
    u.add_argument("--overwrite", action="store_true", help="replace the run's offline columns")
    u.add_argument("--quiet", action="store_true", help="no progress bar")
    u.set_defaults(func=cmd_engine_uncertainty)


def cmd_engine_similar(args) -> None:
    from data_engine.mining import similar
    from data_engine.similar import similar_image

    if (args.frame is None) == (args.image is None):
        raise ValueError("give exactly one of --frame ID (a frame of the catalog) or --image FILE (with --onnx)")
    if args.image is not None:
        if args.ann:
            raise ValueError("--ann goes with --frame (the run's index of frame embeddings); --image searches exactly")
        res = similar_image(args.catalog, args.onnx, args.image, args.camera, args.k, args.run)
    else:
        if args.onnx is not None or args.camera is not None:
            raise ValueError("--onnx and --camera go with --image; --frame uses the catalog's embeddings")
        notes: list[str] = []
        res = similar(args.catalog, args.frame, args.k, args.run, args.ann, notes)
        for n in notes:
            print(n)
    print(f"{'frame id':>8}  {'clip/frame':<28} similarity")
    for r in res:
        print(f"{r['frame_id']:8d}  {r['clip'] + '/' + format(r['frame'], '06d'):<28} {r['similarity']:.4f}")


def cmd_engine_report(args) -> None:
    from data_engine.report import write_report

    rep = write_report(args.catalog, args.out, args.selection, args.run, engine_config(args), args.camera, args.max_frames,
                       args.overwrite)
    print(f"report of selection {rep['selection']} ({rep['shown']} of {rep['items']} frames on the contact sheet), "
          f"shadow run {rep['run']}: {rep['out']}/report.md, contact_sheet.png (+ .json), signals.png")


def cmd_engine_export_fiftyone(args) -> None:
    from data_engine.fiftyone_export import export_fiftyone

    r = export_fiftyone(args.catalog, args.out, args.selection, args.run, args.overwrite, masks=not args.no_masks)
    skipped = f", {len(r['skipped'])} camera images unreadable and left out (first: {r['skipped'][0][2]})" if r["skipped"] else ""
    print(f"exported {r['frames']} frames ({r['samples']} camera images: {', '.join(r['cameras'])}) of shadow run {r['run']}"
          + (f", selection {r['selection']}" if r["selection"] else "") + f"{skipped} -> {r['out']} (FiftyOneDataset"
          + ("" if r["grouped"] else ", flat: one camera") + f"; open it with fo.Dataset.from_dir('{r['out']}', "
          "dataset_type=fo.types.FiftyOneDataset))")
    print(f"ground truth on {r['truth']} frames, accepted labels on {r['accepted']}; predicted masks: "
          + (f"none ({r['no_masks']})" if r["no_masks"] else "drivable and lanes"))


def _add_engine_fiftyone(eng) -> None:
    """`hydranet engine export-fiftyone` (docs/data_engine.md, "Browse in FiftyOne")."""
    f = eng.add_parser("export-fiftyone", help="a shadow run's frames, predictions, signals, trigger hits and selections "
                       "as a FiftyOne dataset (fo.types.FiftyOneDataset)")
    f.add_argument("--catalog", type=Path, required=True)
    f.add_argument("--out", type=Path, required=True, help="export folder (refused if it exists, unless --overwrite)")
    f.add_argument("--selection", default=None, help="export only this selection's frames (name in the catalog or selection.json)")
    f.add_argument("--run", type=int, default=None, help="shadow run id (default: the selection's, else the latest)")
    f.add_argument("--no-masks", action="store_true", help="no predicted drivable/lane masks (they run the model on each "
                   "frame again; ground-truth masks are kept)")
    f.add_argument("--overwrite", action="store_true", help="replace an existing export folder")
    f.set_defaults(func=cmd_engine_export_fiftyone)


def cmd_engine_catalog(args) -> None:
    from data_engine.catalog import Catalog
    from data_engine.catalog_pg import masked
    from data_engine.lake import create

    if args.catalog_command == "create":
        out = create(args.out, args.backend, args.postgres)
        Catalog(out).close()  # its SQLite file (or its schema on the PostgreSQL server), with the current tables
        where = f" (tables on PostgreSQL, {masked(args.postgres)})" if args.postgres else ""
        print(f"created a {args.backend} catalog in {out}{where}; give it to any command as --catalog {out}")
        return
    if args.catalog_command == "compact":
        if not args.catalog.is_dir():
            raise ValueError(f"--catalog {args.catalog} is not a catalog folder; only a lake catalog's parts are compacted")
        from hydranet.io import exclusive_lock

        with exclusive_lock(f"{args.catalog}.lock", f"catalog {args.catalog}", ValueError), Catalog(args.catalog) as cat:
            if cat.lake is None:
                raise ValueError(f"--catalog {args.catalog} is a sqlite catalog folder, not a lake; only a lake's parts "
                                 "are compacted")
            run = cat.latest_run(args.run)
            r = cat.compact(run, args.rows)
        print(f"shadow run {run} of {args.catalog}: {r['clips']} clip part(s) gathered into {r['blocks']} block(s); "
              f"{r['removed']} clip part(s) removed")
        return
    from data_engine.catalog_migrate import migrate

    r = migrate(args.src, args.out, args.postgres)
    where = f", tables on PostgreSQL, {masked(args.postgres)}" if args.postgres else ""
    print(f"migrated {args.src} -> {r['out']} (lake{where}): " + ", ".join(f"{t} {n}" for t, n in r["counts"].items())
          + f"; counts and checksums verified ({r['parts']} parts)")


def _add_engine_catalog(eng) -> None:
    c = eng.add_parser("catalog", help="make a catalog folder (SQLite or a Parquet lake), or move a catalog file to a lake")
    sub = c.add_subparsers(dest="catalog_command", required=True)
    cr = sub.add_parser("create", help="an empty catalog folder whose backend is written in it")
    cr.add_argument("--out", type=Path, required=True, help="the new catalog folder (give it as --catalog)")
    cr.add_argument("--backend", default="sqlite", help="sqlite (one file) or lake (Parquet parts per shadow task + DuckDB)")
    cr.add_argument("--postgres", default=None, metavar="URL", help="keep the transactional tables (jobs, labels, registry, "
                    "gate, selections, done markers) on this PostgreSQL server (postgresql://USER@HOST:PORT/DB), for a team")
    cr.set_defaults(func=cmd_engine_catalog)
    mg = sub.add_parser("migrate", help="copy a catalog file into a new lake folder, every row, verified")
    mg.add_argument("--from", dest="src", type=Path, required=True, help="the catalog file (catalog.db)")
    mg.add_argument("--to", dest="out", type=Path, required=True, help="the new lake catalog folder")
    mg.add_argument("--postgres", default=None, metavar="URL", help="put the new catalog's transactional tables on this "
                    "PostgreSQL server (as `catalog create --postgres`) instead of the folder's SQLite file")
    mg.set_defaults(func=cmd_engine_catalog)
    cp = sub.add_parser("compact", help="gather a lake run's clip parts into large blocks (queries pay per file); rows "
                        "unchanged. `engine shadow` does it for every full block at the end of a run")
    cp.add_argument("--catalog", type=Path, required=True, help="the lake catalog folder")
    cp.add_argument("--run", type=int, default=None, help="shadow run id (default: the latest good run)")
    cp.add_argument("--rows", type=int, default=None, help="rows a block gathers at least (default 131,072; the clips short "
                    "of it stay as they are until more arrive)")
    cp.set_defaults(func=cmd_engine_catalog)


def add_engine(sub) -> None:
    """`hydranet engine ...`: the data engine (docs/data_engine.md)."""
    eng = sub.add_parser("engine", help="the data engine: fleet, shadow mode, triggers, mining (docs/data_engine.md)")
    eng = eng.add_subparsers(dest="engine_command", required=True)
    f = eng.add_parser("fleet", help="many sim clips with conditions and rare scenarios at realistic rates")
    f.add_argument("--out", type=Path, required=True)
    f.add_argument("--clips", type=int, default=20)
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--config", type=Path, default="fleet", help="fleet config: a YAML file or a shipped name (fleet)")
    add_override_option(f)
    f.add_argument("--quiet", action="store_true", help="no progress bar")
    f.add_argument("--workers", type=int, default=1,
                   help="processes rendering whole clips at once (default 1); the output is byte-identical")
    f.set_defaults(func=cmd_engine_fleet)
    ing = eng.add_parser("ingest", help="register recordings as a fleet: a dataset, camera videos or image sequences, "
                         "read in place")
    ing.add_argument("--out", type=Path, required=True, help="the fleet folder to write (FLEET/fleet.json)")
    ing.add_argument("--source", required=True, choices=["dataset", "video", "images"])
    ing.add_argument("--root", type=Path, default=None, help="dataset or image-sequence folder")
    ing.add_argument("--videos", type=Path, default=None, help="video folder: DIR/<clip>/<CAMERA>.mp4|mov|mkv")
    ing.add_argument("--rig", type=Path, default=None, help="rig file naming the cameras (videos, images)")
    ing.add_argument("--hz", type=float, default=None, help="frames per second to sample (default: every frame)")
    ing.add_argument("--timestamps", type=Path, default=None, help="video frame timestamps: CSV clip,camera,frame,"
                     "timestamp_us or JSON")
    ing.add_argument("--poses", type=Path, default=None, help="ego poses: CSV clip,timestamp_us,m00..m33 or JSON")
    ing.add_argument("--format", default=None,
                     help="dataset format, a registered reader's name (listed by `hydranet data check --help`; default: detected)")
    ing.add_argument("--split", default=None)
    ing.add_argument("--version", default=None)
    ing.add_argument("--sweeps", type=int, default=0, help="nuScenes: unlabelled camera sweeps between two keyframes")
    ing.add_argument("--on-bad-clip", choices=["raise", "skip"], default=None,
                     help="videos, images: a clip that cannot be read (truncated video, missing camera) stops the "
                          "ingest (raise, default) or is left out and counted (skip)")
    ing.add_argument("--follow-links", action="store_true",
                     help="videos, images: a clip, camera folder, video or image that is a symbolic link out of the source "
                          "folder is read where it points (fleet.json records its resolved path); refused without it")
    ing.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    ing.add_argument("--quiet", action="store_true", help="no progress bar")
    ing.set_defaults(func=cmd_engine_ingest)
    sh = eng.add_parser("shadow", help="run the deployed ONNX model over every fleet clip; per-frame signals into the catalog")
    renamed(sh, "--onnx", "--model", type=Path, required=True, help="model.onnx written by `hydranet export`")
    renamed(sh, "--data", "--fleet", type=Path, required=True, help="a fleet folder (`hydranet engine fleet` or `engine ingest`)")
    sh.add_argument("--catalog", type=Path, required=True, help="catalog file (created if missing) or catalog folder "
                    "(`hydranet engine catalog create`)")
    renamed(sh, "--candidate-onnx", "--candidate", type=Path, default=None,
            help="a candidate's exported model.onnx run alongside (it never drives)")
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
            add_override_option(c)
        if cmd == "mine":
            c.add_argument("--budget", type=int, required=True)
            c.add_argument("--strategy", default="hybrid", help="random | uncertainty | diversity | hybrid | triggers | "
                           "ensemble | tta (these two after `engine uncertainty`)")
            c.add_argument("--unit", default="frame", help="frame or clip")
            c.add_argument("--out", type=Path, default=Path("selection.json"))
            c.add_argument("--name", default=None, help="selection name in the catalog (default: strategy-unit-budget)")
            c.add_argument("--search", choices=Registered("data_engine.mining:SEARCHES"), default="auto",
                           help="diversity's k-center search: exact, ann (the lake catalog's ANN index) or auto (ann on a "
                                "lake pool of 100k frames or more, else exact)")
        if cmd == "similar":
            c.add_argument("--frame", type=int, default=None, help="query frame id (selection.json items' frame_id)")
            c.add_argument("--image", type=Path, default=None, help="query image file (JPEG/PNG, one camera's image)")
            renamed(c, "--onnx", "--model", type=Path, default=None, help="with --image: the shadow run's model.onnx (embeds it)")
            c.add_argument("--camera", default=None, help="with --image: the camera it is from (default: the model's first)")
            c.add_argument("--k", type=int, default=50)
            c.add_argument("--ann", action="store_true", help="with --frame: approximate search through the run's FAISS "
                           "IVF index (built, then grown as clips arrive; exact search is the default)")
        c.set_defaults(func={"triggers": cmd_engine_triggers, "mine": cmd_engine_mine, "similar": cmd_engine_similar}[cmd])
    rep = eng.add_parser("report", help="contact sheet of mined frames, signal histograms, trigger table (markdown)")
    rep.add_argument("--catalog", type=Path, required=True)
    rep.add_argument("--out", type=Path, required=True, help="report folder (refused if it exists, unless --overwrite)")
    rep.add_argument("--selection", default=None, help="selection name in the catalog or selection.json (default: newest)")
    rep.add_argument("--run", type=int, default=None, help="shadow run id (default: the selection's, else the latest)")
    rep.add_argument("--camera", default=None, help="show only this camera on the contact sheet (default: every camera)")
    rep.add_argument("--max-frames", type=int, default=48, help="frames on the contact sheet (best ranks first)")
    rep.add_argument("--config", type=Path, default="engine", help="engine config: YAML file or shipped name (engine)")
    add_override_option(rep)
    rep.add_argument("--overwrite", action="store_true", help="replace an existing report folder")
    rep.set_defaults(func=cmd_engine_report)
    _add_engine_catalog(eng)
    _add_engine_uncertainty(eng)
    _add_engine_fiftyone(eng)
    add_engine_labels(eng)
    _add_engine_retrain(eng)
    _add_engine_gate(eng)
    _add_engine_loop(eng)
    add_engine_autolabel(eng)


def cmd_engine_run(args) -> None:
    import shlex

    from data_engine.config import EngineConfig
    from data_engine.loop import WAITING_STATUS, Loop, LoopWaiting, check_rounds

    check_rounds(args.rounds)  # before anything is written
    cfg = load_config(EngineConfig, args.config, list(args.set))
    try:
        Loop(args.out, cfg, args.production, progress=not args.quiet, suites=args.suites, fleets=args.fleets).run(args.rounds)
    except LoopWaiting as e:  # not an error: a round waits for a labelling team; its own exit status
        again = ["hydranet", "engine", "run", "--out", args.out, "--rounds", args.rounds]
        for flag in ("production", "suites", "fleets", "config"):
            if getattr(args, flag) is not None and not (flag == "config" and str(args.config) == "engine"):
                again += [f"--{flag}", getattr(args, flag)]
        again += [a for s in args.set for a in ("--set", s)] + (["--quiet"] if args.quiet else [])
        print(f"waiting: {e}: {shlex.join(str(a) for a in again)}")
        raise SystemExit(WAITING_STATUS) from None
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
    add_override_option(r)
    r.add_argument("--quiet", action="store_true", help="no progress bars")
    r.set_defaults(func=cmd_engine_run)


def cmd_engine_retrain(args) -> None:
    import json

    from data_engine.retrain import RECORD, label_sources_line, retrain

    out = retrain(args.production, args.catalog, args.out, args.steps, args.mix, args.base, args.resume, args.overwrite,
                  progress=not args.quiet, cfg=engine_config(args), drop_labels=tuple(args.drop_labels))
    rec = json.loads((out / RECORD).read_text())
    print(f"retrained {rec['production']} for {rec['steps']} steps on the base set + accepted labels, mix {rec['mix']} -> "
          f"{out / 'checkpoint.pt'}; export it with `hydranet export --checkpoint {out} --out MODEL.onnx`")
    print(label_sources_line(rec))


def _add_engine_retrain(eng) -> None:
    """`hydranet engine retrain`: fine-tune production on base + accepted labels (docs/data_engine.md)."""
    r = eng.add_parser("retrain", help="fine-tune the production model on its training set plus the accepted labels")
    r.add_argument("--production", type=Path, required=True, help="the production checkpoint.pt or its run folder")
    r.add_argument("--catalog", type=Path, required=True, help="the catalog whose accepted labels are added")
    r.add_argument("--out", type=Path, required=True, help="run folder (checkpoint.pt, config.json, retrain.json, accepted/)")
    r.add_argument("--steps", type=int, default=None, help="fine-tuning steps (default: retrain.steps of --config)")
    r.add_argument("--mix", type=float, default=None, help="fraction of batches from the accepted labels (default: retrain.mix)")
    r.add_argument("--base", type=Path, default=None, help="base training set (default: the production's data.root/sources)")
    r.add_argument("--drop-labels", type=Path, action="append", default=[], metavar="SET_OR_CATALOG",
                   help="leave out accepted labels the production trained on (their set's folder or catalog; recorded "
                        "in retrain.json); by default every earlier label set is carried into the retrain")
    r.add_argument("--resume", action="store_true", help="continue the run in --out exactly")
    r.add_argument("--overwrite", action="store_true", help="replace a run already in --out (refused without it)")
    r.add_argument("--config", type=Path, default="engine", help="engine config: YAML file or shipped name (engine)")
    add_override_option(r)
    r.add_argument("--quiet", action="store_true", help="no progress bars")
    r.set_defaults(func=cmd_engine_retrain)


def cmd_engine_suites(args) -> None:
    from data_engine.fleet import FleetConfig
    from data_engine.suites import SuiteError, generate_suites

    if args.from_fleet is not None:  # slices of a fleet's own frames (data_engine/fleet_suites.py)
        from data_engine.fleet_suites import freeze_fleet_slices

        sim_only = [f"--{k.replace('_', '-')}" for k in ("clips", "seed") if getattr(args, k) is not None]
        if sim_only:
            raise SuiteError(f"{sim_only[0]} renders sim slices and does not go with --from-fleet; drop it")
        r = freeze_fleet_slices(args.out, args.from_fleet, args.slice, args.catalog, args.overwrite, not args.quiet)
        for name, e in r["slices"].items():
            print(f"slice {name}: {e['frames']} frames of {e['clips']} clip(s) ({e['source']['query']}), labels "
                  f"{', '.join(f'{k} {v}' for k, v in e['labels'].items())}; {e['unlabelled']} unlabelled frame(s) left out")
        print(f"{'wrote' if r['created'] else 'added to'} {r['out']} ({Path(r['out']) / 'suites.json'}: sources, digests)")
        return
    if args.slice or args.catalog is not None:
        raise SuiteError(f"--{'slice' if args.slice else 'catalog'} chooses frames of a fleet: give --from-fleet FLEET")

    fleet = load_config(FleetConfig, args.fleet_config, list(args.fleet_set))
    out = generate_suites(args.out, engine_config(args).suites, fleet, args.clips, args.seed, args.overwrite,
                          progress=not args.quiet)
    print(f"wrote {out} ({out / 'suites.json'}: slices, seeds, digests)")


def cmd_engine_gate(args) -> None:
    from data_engine.gate import format_gate, gate, write_gate
    from data_engine.registry import checkpoint_file, production, promote

    rule = engine_config(args).gate
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
        from hydranet.io import file_sha256

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

    e = promote(args.catalog, args.checkpoint, args.onnx, args.note, force=args.force)
    forced = " (forced past the gate's rejection)" if e["action"] == "force-promote" else ""
    print(f"production{forced}: {e['checkpoint']} (sha256 {e['sha256'][:12]}, registry entry {e['id']}, since {e['when']}) "
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
    add_override_option(s, "override an engine config key (suites.clips=1)")
    s.add_argument("--fleet-config", type=Path, default="fleet", help="fleet config whose rig, image size and frame rate to use")
    s.add_argument("--fleet-set", action="append", default=[], metavar="KEY=VALUE", help="override a fleet config key")
    s.add_argument("--clips", type=int, default=None, help="clips per slice (default: suites.clips)")
    s.add_argument("--seed", type=int, default=None, help="suite seed (default: suites.seed)")
    s.add_argument("--overwrite", action="store_true", help="replace an existing suites folder (its unit tests are kept); "
                   "with --from-fleet: replace the named slices only")
    s.add_argument("--from-fleet", type=Path, default=None, metavar="FLEET",
                   help="freeze slices of this fleet's frames (sim or recorded) into --out, new or existing")
    s.add_argument("--slice", action="append", default=[], metavar="NAME=QUERY",
                   help="with --from-fleet: a slice, e.g. night=tag:night or hard=description~rain&signal:det2d_entropy>0.3")
    s.add_argument("--catalog", type=Path, default=None, help="with --from-fleet: accepted labels and signal:... queries")
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
    add_override_option(g, "override a key (gate.tolerance=0.05)")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.set_defaults(func=cmd_engine_gate)
    p = eng.add_parser("promote", help="make a checkpoint the production model of a catalog (previous one kept)")
    p.add_argument("--catalog", type=Path, required=True, help="catalog file (created if missing)")
    p.add_argument("--checkpoint", type=Path, required=True, help="checkpoint.pt or its run folder")
    p.add_argument("--onnx", type=Path, default=None, help="its exported model.onnx (what shadow mode runs)")
    p.add_argument("--note", default="", help="why (kept in the registry)")
    p.add_argument("--force", action="store_true", help="promote a candidate the gate rejected in this catalog "
                   "(recorded as force-promote)")
    p.set_defaults(func=cmd_engine_promote)
    rb = eng.add_parser("rollback", help="return to the production model before the current one")
    rb.add_argument("--catalog", type=Path, required=True)
    rb.set_defaults(func=cmd_engine_rollback)
    rg = eng.add_parser("registry", help="the registry's history: every production model, the current one marked")
    rg.add_argument("--catalog", type=Path, required=True)
    rg.set_defaults(func=cmd_engine_registry)
