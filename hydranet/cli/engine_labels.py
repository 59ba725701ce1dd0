"""`hydranet engine label | import-labels | jobs | label-studio | autolabel`: the labelling half of the data engine's
CLI (docs/labeling.md, docs/autolabel.md). Parses arguments and calls into `data_engine`; `hydranet.cli.engine`
adds these subcommands to its parser.
"""
from __future__ import annotations

from pathlib import Path

from hydranet.cli.flags import engine_config, renamed
from hydranet.config import add_override_option


def _label_backend(args):
    from data_engine.labeling import build_backend
    from data_engine.labeling.oracle import OracleNoise

    noise = OracleNoise(getattr(args, "jitter_px", 0.0), getattr(args, "miss_small", 0.0), getattr(args, "small_area", 256.0),
                        getattr(args, "confusion", 0.0), getattr(args, "noise_seed", 0))
    return build_backend(args.backend, noise=noise, out=getattr(args, "out", None), files=getattr(args, "file", None) or (),
                         labeller=getattr(args, "labeller", None), url=args.ls_url, token=args.ls_token, project=args.ls_project,
                         accept_predictions=getattr(args, "accept_predictions", False), ls_task=getattr(args, "ls_task", "frame"))


def _selection_name(sel):
    from data_engine.label_queue import read_selection

    return None if sel is None else read_selection(sel)[0] if str(sel).endswith(".json") else str(sel)


def cmd_engine_label(args) -> None:
    from data_engine.label_exchange import send
    from data_engine.label_queue import create_jobs
    from data_engine.labels import open_catalog

    backend = _label_backend(args)
    with open_catalog(args.catalog) as cat:
        made = create_jobs(cat, args.selection, backend.name)
        st = send(cat, backend, made["selection"], progress=not args.quiet)
    print(f"selection {made['selection']}: {made['created']} label jobs queued ({made['existing']} existed), "
          f"{st['sent']} sent to {backend.name}" + (f" -> {args.out}" if getattr(args, "out", None) else ""))


def cmd_engine_import_labels(args) -> None:
    from data_engine.label_exchange import import_labels
    from data_engine.labeling.base import describe_changes, describe_edits, edit_totals
    from data_engine.labels import open_catalog

    with open_catalog(args.catalog) as cat:
        got = import_labels(cat, _label_backend(args), _selection_name(args.selection), progress=not args.quiet)
    old_q = [q for q in got["quarantined"] if not q["new"]]
    print(f"{got['new']} new label versions ({got['duplicate']} already recorded), {got['waiting']} sent jobs still waiting, "
          f"{len(got['conflicts'])} conflicts, {len(got['quarantined'])} tasks quarantined"
          + (f" ({len(old_q)} as before: `hydranet engine jobs` lists why)" if old_q else ""))
    for q in got["quarantined"]:
        if q["new"]:  # printed once: when it first appears (or its reason changes); `engine jobs` keeps listing it
            print(f"  quarantined: job {q['job']} frame {q['frame']}: {q['reason']}")
    for w in got["partial"]:
        print(f"  waiting: job {w['job']} frame {w['frame']}: {w['reason']}")
    for c in got["conflicts"]:
        print(f"  conflict: frame {c['frame']} (id {c['frame_id']}) versions {c['versions']} ({' vs '.join(c['sources'])}): {c['detail']}")
    for e in got["edits"]:  # what the person changed in the auto-labels the frame was pre-filled with (docs/autolabel.md)
        auto, mine = f"auto v{e['prefill']}", f"v{e['version']}"
        print(f"  edits: job {e['job']} frame {e['frame']} {mine} against {auto}: {describe_edits(e)}"
              + (f" ({describe_changes(e, auto, mine)})" if e["changes"] else ""))
    if got["edits"]:
        tot = edit_totals(got["edits"])
        print(f"edits to auto pre-fills: {tot['frames']} frames ({tot['unchanged']} unchanged), {describe_edits(tot)}")


def _job_ids(cat, sel, flag: str, ids: str, source: tuple[str, ...]) -> list[int]:
    from data_engine.label_queue import job_table

    if ids == "all":
        return [r["job"] for r in job_table(cat, sel) if r["state"] in source]
    try:
        return [int(i) for i in ids.split(",") if i.strip()]
    except ValueError:
        raise ValueError(f"--{flag} takes job ids like 3,4,7 or 'all', got {ids!r}") from None


def cmd_engine_jobs(args) -> None:
    import datetime

    from data_engine.label_queue import history, job_table
    from data_engine.labels import conflicts, open_catalog, transition

    sel = _selection_name(args.selection)
    with open_catalog(args.catalog) as cat:
        # --accept on an accepted job with --version re-pins it; 'all' means the labelled jobs only
        for flag, to, source in (("requeue", "queued", ("rejected",)), ("reject", "rejected", ("labelled",)),
                                 ("reopen", "labelled", ("accepted",)), ("accept", "accepted", ("labelled",))):
            ids = getattr(args, flag)
            if ids is None:
                continue
            jobs = _job_ids(cat, sel, flag, ids, source)
            transition(cat, jobs, to, args.label_version, by=args.by)
            print(f"{len(jobs)} jobs -> {to}" + (" (re-opened: no longer read by training until accepted again)"
                                                 if flag == "reopen" else ""))
        rows = job_table(cat, sel)
        print("| job | selection | frame | state | backend | label versions | pinned | why waiting |\n"
              "|---:|---|---|---|---|---:|---:|---|")
        print("\n".join(f"| {r['job']} | {r['selection']} | {r['frame']} | {r['state']} | {r['backend']} | {r['versions']} | "
                        f"{'v' + str(r['pinned']) if r['pinned'] else '-'} | {r['note'] or '-'} |" for r in rows))
        for c in conflicts(cat, sel):
            print(f"conflict: frame id {c['frame_id']} versions {c['versions']} ({' vs '.join(c['sources'])}): {c['detail']}")
        if args.history:
            for e in history(cat, selection=sel):
                when = datetime.datetime.fromtimestamp(e["at"], datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
                pins = (f" v{e['old_version'] or '-'} -> v{e['new_version'] or '-'}" if e["action"] in ("accept", "repin", "reopen")
                        else "")
                print(f"history: job {e['job']} {e['action']}{pins} by {e['by']} at {when}"
                      + (f": {e['note']}" if e["note"] else ""))


def cmd_engine_label_studio(args) -> None:
    from data_engine.labeling import LabelingError
    from data_engine.labeling.ls_server import login_lines, start_server, stop

    proc, login = start_server(args.data, args.port, args.ls_bin, args.timeout, log=lambda s: print(s, flush=True))
    print("\n".join(login_lines(login)), flush=True)
    try:
        rc = proc.wait()
    finally:  # Ctrl-C (exit 130): the server goes with the command
        stop(proc)
    raise LabelingError(f"Label Studio stopped by itself (exit status {rc}); its log: {login['log']}")


def add_engine_labels(eng) -> None:
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
            c.add_argument("--accept-predictions", action="store_true",
                           help="files: import boxes that are still the model's pre-annotations (a score, CVAT source=auto) "
                                "as labels (refused by default: predictions are not labels)")
            c.add_argument("--jitter-px", type=float, default=0.0, help="oracle noise: box edge jitter sigma, pixels")
            c.add_argument("--miss-small", type=float, default=0.0, help="oracle noise: rate of missed small boxes")
            c.add_argument("--small-area", type=float, default=256.0, help="oracle noise: a small box is under this many px^2")
            c.add_argument("--confusion", type=float, default=0.0, help="oracle noise: rate of class confusions")
            c.add_argument("--noise-seed", type=int, default=0)

    lab = eng.add_parser("label", help="queue a selection's frames as label jobs and send them to a labelling backend")
    backend_args(lab, importing=False)
    lab.add_argument("--selection", type=Path, required=True, help="selection.json (`hydranet engine mine --out`)")
    lab.add_argument("--out", type=Path, default=None, help="files: folder for the COCO/CVAT exports and images")
    lab.add_argument("--ls-task", choices=("frame", "camera"), default="frame",
                     help="Label Studio: one task per frame with every camera (default) or one task per camera image "
                          "(a project keeps the kind it was made with)")
    lab.set_defaults(func=cmd_engine_label)
    imp = eng.add_parser("import-labels", help="fetch finished labels from a backend into the catalog as new label versions")
    backend_args(imp, importing=True)
    imp.set_defaults(func=cmd_engine_import_labels)
    jobs = eng.add_parser("jobs", help="list label jobs, why they wait, conflicts; accept, reject, requeue, reopen or re-pin jobs")
    jobs.add_argument("--catalog", type=Path, required=True)
    jobs.add_argument("--selection", default=None, help="selection name or file (default: all)")
    jobs.add_argument("--accept", default=None, metavar="IDS",
                      help="job ids (3,4) or 'all' labelled jobs; an accepted job with --version N is re-pinned to version N")
    jobs.add_argument("--reject", default=None, metavar="IDS", help="job ids or 'all' labelled jobs")
    jobs.add_argument("--requeue", default=None, metavar="IDS", help="job ids or 'all' rejected jobs")
    jobs.add_argument("--reopen", default=None, metavar="IDS",
                      help="job ids or 'all' accepted jobs: back to labelled, the pin kept in the history (training stops "
                           "reading it until it is accepted again)")
    renamed(jobs, "--label-version", "--version", type=int, default=None,
            help="accept (or re-pin) this label version of the frame (needed on a conflict)")
    jobs.add_argument("--by", default=None, metavar="NAME", help="who decides (recorded in the history; default: login name)")
    jobs.add_argument("--history", action="store_true", help="print the review history (who, when, old and new pin)")
    jobs.set_defaults(func=cmd_engine_jobs)
    ls = eng.add_parser("label-studio", help="start a local Label Studio (its own venv: `make labelstudio`) on 127.0.0.1 "
                        "with a fresh data folder; prints the URL, the browser login and the API token")
    ls.add_argument("--data", type=Path, default=Path("out/labelstudio"), help="a new or empty data folder "
                    "(default out/labelstudio)")
    ls.add_argument("--port", type=int, default=8089)
    ls.add_argument("--ls-bin", type=Path, default=Path(".venv-labelstudio/bin/label-studio"),
                    help="the label-studio command (default: the one `make labelstudio` installs)")
    ls.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for it to answer (default 900)")
    ls.set_defaults(func=cmd_engine_label_studio)


def cmd_engine_autolabel(args) -> None:
    from data_engine.autolabel import run_autolabel

    st = run_autolabel(args.catalog, args.selection, args.models, args.out, engine_config(args).autolabel, args.overwrite,
                       args.backend, progress=not args.quiet)
    for w in st["warnings"]:
        print(f"warning: {w}")
    print(f"autolabel {st['selection']}: {st['frames_labelled']} frames of {st['clips']} clips ({st['frames_run']} frames run "
          f"through {len(st['models'])} models), {st['boxes2d']} 2D / {st['boxes3d']} 3D boxes, {st['tracks2d']} 2D / "
          f"{st['tracks3d']} 3D tracks; {st['accepted']} accepted, {st['queued']} queued for {st['human_backend']} "
          f"(pre-filled), {st['human']} left to their human versions, {st['left']} left as they were; "
          f"{st['new_versions']} new versions -> {args.catalog}, {args.out}/summary.json")


def add_engine_autolabel(eng) -> None:
    a = eng.add_parser("autolabel", help="server-side: an ensemble over every frame of the selected clips, tracked and "
                       "smoothed with hindsight; labels of source 'auto' into the catalog (docs/autolabel.md)")
    a.add_argument("--catalog", type=Path, required=True)
    a.add_argument("--selection", type=Path, required=True, help="selection.json (`hydranet engine mine --out`)")
    a.add_argument("--models", type=Path, nargs="+", required=True, help="exported model.onnx files: the ensemble")
    a.add_argument("--out", type=Path, required=True, help="output folder: summary.json, labels/, dense/")
    a.add_argument("--backend", default=None, type=lambda v: v.replace("-", "_"), choices=["files", "label_studio", "oracle"],
                   help="the human backend the unsure frames stay queued for (default: the selection's, else files)")
    a.add_argument("--config", type=Path, default="engine", help="engine config: YAML file or shipped name (engine)")
    add_override_option(a)
    a.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    a.add_argument("--quiet", action="store_true", help="no progress bar")
    a.set_defaults(func=cmd_engine_autolabel)
