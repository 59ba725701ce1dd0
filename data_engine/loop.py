"""The data-engine loop: fleet -> shadow -> triggers -> mine -> report -> label -> unit tests -> retrain ->
export -> gate -> promote, K rounds, every stage resumable.

    hydranet engine run --config configs/engine.yaml --production RUN --rounds K --out DIR

DIR holds the run: catalog.sqlite (signals, selections, label jobs and versions, the model
registry, gate results), suites/ (frozen scenario suites, generated once), rounds/rNNN/ (that
round's fleet, selection.json, report/, retrain run, model.onnx, gate/) and loop.json, the journal of
completed stages. A stage is marked done only after it finished, and every stage is idempotent
on its own (the fleet is renamed into place, shadow skips finished clips, label jobs, sends and
imports are keyed by frame and digest, retrain resumes exactly, gate is a pure function): kill
the process anywhere, rerun the same command, and it continues from the last completed stage
without repeating a label or losing one.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hydranet.config import with_defaults
from hydranet.io import atomic_write_text, exclusive_lock, read_json

STAGES = ("fleet", "shadow", "triggers", "mine", "report", "label", "unit_tests", "retrain", "export", "gate", "promote")
JOURNAL = "loop.json"
LOCK = ".lock"


class LoopError(ValueError):
    """The loop cannot run as asked; one line saying what to do."""


WAITING_STATUS = 3  # `hydranet engine run`'s exit status when a round stopped to wait for a labelling team


class LoopWaiting(Exception):
    """Not an error: a round sent its frames to a labelling team and stops until their export is in place. The
    message says where the export goes and which command resumes; `hydranet engine run` prints it as a plain
    line and exits with WAITING_STATUS (docs/engine_loop.md)."""


def _atomic_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2) + "\n")


def _read_journal(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LoopError(f"{path} is not valid JSON ({e}); it is the loop's journal: restore it or start a new --out") from None


class Journal:
    """DIR/loop.json: the run's identity (production, config, the fleet config) and each round's completed stages
    and outputs. Rewritten atomically after every stage."""

    def __init__(self, out: Path, identity: Mapping[str, Any]):
        self.path = out / JOURNAL
        if self.path.exists():
            try:
                self.data = json.loads(self.path.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise LoopError(f"{self.path} is not valid JSON ({e}); it is the loop's journal: restore it or start a "
                                "new --out folder") from None
            want = json.loads(json.dumps(identity))
            have = self.data.get("identity") or {}
            if isinstance(have.get("config"), dict):  # a journal written before a config key existed holds its default
                from data_engine.config import BEFORE_KEY, EngineConfig  # (or, where that is new behaviour, the old one)
                from data_engine.triggers import overrides_only

                have["config"] = with_defaults(with_defaults(have["config"], BEFORE_KEY),
                                               json.loads(json.dumps(asdict(EngineConfig()))))
                for config in (have["config"], want.get("config")):  # triggers: overrides of the table, defaults dropped
                    if isinstance(config, dict) and isinstance(config.get("triggers"), dict):
                        config["triggers"] = overrides_only(config["triggers"])
            if "fleet" in want and "fleet" not in have:  # a journal from before the fleet config was recorded: this one
                have["fleet"] = want["fleet"]
            elif isinstance(have.get("fleet"), dict):  # keys added since: at their old behaviour, else their default
                from data_engine.fleet import FleetConfig
                from sim.config import BEFORE_KEY as SIM_BEFORE

                have["fleet"] = with_defaults(with_defaults(have["fleet"], {"sim": SIM_BEFORE}),
                                              json.loads(json.dumps(asdict(FleetConfig()))))
            if have != want:
                diff = differing_keys(have, want)
                raise LoopError(f"{out} holds a loop run with another production model or config ({self.path}; differing: "
                                f"{', '.join(diff[:5])}{' ...' if len(diff) > 5 else ''}); rerun with the same arguments, "
                                "or choose a new --out")
        else:
            self.data = {"identity": dict(identity), "rounds": []}
            _atomic_json(self.path, self.data)

    def round(self, r: int) -> dict[str, Any]:
        while len(self.data["rounds"]) <= r:
            self.data["rounds"].append({"round": len(self.data["rounds"]), "done": {}})
        return self.data["rounds"][r]

    def finish(self, r: int, stage: str, result: Mapping[str, Any]) -> None:
        self.round(r)["done"][stage] = dict(result)
        _atomic_json(self.path, self.data)


def differing_paths(a: Any, b: Any, path: tuple = ()) -> list[tuple]:
    """The key paths whose values differ between two JSON-like dicts (e.g. ("config", "loop", "budget"))."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [p for key in sorted(set(a) | set(b), key=str) for p in differing_paths(a.get(key), b.get(key), (*path, key))]
    return [] if a == b else [path]


def differing_keys(a: Any, b: Any) -> list[str]:
    """`differing_paths` as dotted keys (e.g. "config.loop.budget"; "value" where a and b themselves differ)."""
    return [".".join(map(str, p)) or "value" for p in differing_paths(a, b)]


def check_rounds(rounds: int) -> None:
    if rounds < 1:
        raise LoopError(f"--rounds must be at least 1, got {rounds}")


def _round_dir(out: Path, r: int) -> Path:
    return out / "rounds" / f"r{r:03d}"


def fleet_config(loop_cfg):
    """The FleetConfig a loop drives: its `fleet_config` YAML with its `fleet_set` overrides."""
    from data_engine.fleet import FleetConfig
    from hydranet.config import load_config

    return load_config(FleetConfig, loop_cfg.fleet_config, list(loop_cfg.fleet_set))


def fleet_training_meta(root: str | Path) -> dict[str, Any]:
    """What retrain's accepted set takes from a fleet and requires to be one across fleets (the keys
    `data_engine.retrain.materialize_accepted` compares): a sim fleet's dataset.json less its scenes, seed and
    render config; a recorded fleet's rig and label vocabulary on the sim's BEV grid and semantic classes."""
    from data_engine.fleet import RECORDED_FILE, Fleet, FleetError

    try:
        if (Path(root) / RECORDED_FILE).is_file():
            from sim.config import SimConfig
            from sim.generate import dataset_meta

            fl = Fleet(root)
            base = dataset_meta(SimConfig(), fl.rig, 0)
            vocab = {k: fl.meta[k] for k in ("classes", "sign_classes", "light_states", "lane_types") if k in fl.meta}
            return {k: v for k, v in {**base, **vocab}.items() if k not in ("scenes", "seed", "sim_config")}
        meta = Fleet(root).meta
    except FleetError as e:
        raise LoopError(str(e)) from None
    return {k: v for k, v in meta.items() if k not in ("scenes", "seed", "sim_config")}


def labelled_fleets(catalog: Path) -> list[str]:
    """The fleets (roots) whose frames hold accepted labels in `catalog`, oldest first: what retrain trains on."""
    from data_engine.catalog import Catalog

    if not catalog.exists():
        return []
    with Catalog(catalog) as cat:
        rows = cat.db.execute("SELECT DISTINCT fl.id, fl.root FROM label_jobs j JOIN frames f ON j.frame_id = f.id "
                              "JOIN clips c ON f.clip_id = c.id JOIN fleets fl ON c.fleet_id = fl.id "
                              "WHERE j.state = 'accepted' ORDER BY fl.id").fetchall()
    return [str(root) for _, root in rows]


def check_fleet_mix(fleets: list[tuple[str, str | Path]]) -> None:
    """LoopError, before a round spends anything, unless every fleet of `fleets` ([(what it is to the user, root)]:
    the fleets already labelled in the catalog, then the rounds' fleets) fits in one training set with the first:
    retrain refuses accepted labels from fleets that differ in rig, class list or grid, after the label budget
    was spent. One line naming both fleets, the first differing key and what to do."""
    metas: dict[str, dict[str, Any]] = {}
    first_name, first_root = fleets[0] if fleets else ("", "")
    for name, root in fleets:
        key = str(Path(root).resolve())
        if key not in metas:
            metas[key] = fleet_training_meta(root)
        ref = metas[str(Path(first_root).resolve())]
        diff = sorted(k for k in set(metas[key]) | set(ref) if metas[key].get(k) != ref.get(k))
        if diff:
            raise LoopError(f"{name} ({root}) differs from {first_name} ({first_root}) in {diff[0]!r} (differing keys: "
                            f"{', '.join(diff)}): retrain puts one rig and one class list in a training set and would refuse "
                            "their labels together only after this round spent its label budget; give this round a fleet of "
                            "the same rig and classes (ingest the recordings with that rig, or render it with the same fleet "
                            "config), or run it in a loop of its own (another --out)")


class Loop:
    """One loop run folder. `run(rounds)` drives each round's stages in order, skipping those the
    journal marks done; `stages` maps a stage name to its method (round, folder) -> result dict."""

    def __init__(self, out: str | Path, cfg, production: str | Path | None = None, progress: bool = True,
                 log: Callable[[str], None] = print, suites: str | Path | None = None, fleets: str | Path | None = None):
        """`suites`: a suites folder to gate on (default: generated once into out/suites). `fleets`: a folder
        of fleets already rendered, one per round (fleets/rNNN; benchmarks share them between strategies)."""
        from data_engine.config import EngineConfig
        from data_engine.mining import OFFLINE, MiningError, strategy_fn
        from hydranet.config import ConfigError

        self.out, self.cfg, self.progress, self.log = Path(out), cfg or EngineConfig(), progress, log
        try:
            strategy_fn(self.cfg.loop.strategy)  # the config names it; only the miner knows its strategies
        except MiningError as e:
            raise ConfigError(f"config key 'loop.strategy': {e}") from None
        from data_engine.triggers import build_triggers

        try:  # an override naming no registered trigger (a head's spec row or ENGINE_ROWS) stops the run before round 1
            build_triggers(self.cfg.trigger_params() or None)
        except ValueError as e:
            raise ConfigError(f"config key 'triggers': {e}") from None
        if self.cfg.loop.strategy in OFFLINE and not self.cfg.loop.ensemble:
            raise ConfigError(f"config key 'loop.ensemble' is empty: strategy {self.cfg.loop.strategy!r} needs at least one "
                              "exported model beside the production, e.g. --set 'loop.ensemble=[other_seed.onnx]'")
        missing = [str(m) for m in self.cfg.loop.ensemble if not Path(m).is_file()]
        if missing:
            raise ConfigError(f"config key 'loop.ensemble': {missing[0]} does not exist; give ONNX files written by "
                              "`hydranet export`")
        if self.cfg.loop.labeller.endswith("label_studio"):  # refused before a round spends anything
            from data_engine.labeling.label_studio import TOKEN_ENV, URL_ENV

            if not (os.environ.get(URL_ENV) and os.environ.get(TOKEN_ENV)):
                raise LoopError(f"loop.labeller {self.cfg.loop.labeller} needs a Label Studio server: set {URL_ENV} and "
                                f"{TOKEN_ENV} (docs/labeling.md; `make labelstudio` starts a local one)")
        self.catalog = self.out / "catalog.sqlite"
        self.suites = Path(suites) if suites is not None else self.out / "suites"
        self.fleets = Path(fleets) if fleets is not None else None
        if self.fleets is not None and not self.fleets.is_dir():  # refused before anything is written
            raise LoopError(f"--fleets {self.fleets} is not a folder; give the folder that holds one fleet per round "
                            f"({self.fleets}/r000, r001, ...)")
        self.fleet = fleet_config(self.cfg.loop)  # its fleet YAML read now: an edit of that file changes the run
        renders = self.fleets is None or suites is None  # the fleet config renders the rounds' fleets or the suites
        identity = {"production": str(Path(production).resolve()) if production else None, "config": asdict(self.cfg),
                    "suites": str(self.suites.resolve()), "fleets": str(self.fleets.resolve()) if self.fleets else None,
                    "fleet": asdict(self.fleet) if renders else None}
        if production is None and not (self.out / JOURNAL).exists():
            raise LoopError(f"{self.out} holds no loop run yet: give --production RUN (the model that drives the fleet)")
        if production is not None:
            from data_engine.registry import checkpoint_file

            from hydranet.checkpoint import load_checkpoint

            load_checkpoint(checkpoint_file(production))  # a readable checkpoint with finite weights, or a one-line error
        if self.out.exists() and not (self.out / JOURNAL).exists() and any(p.name != LOCK for p in self.out.iterdir()):
            raise LoopError(f"{self.out} exists and is not a loop run (no {JOURNAL}); choose a new --out")
        if production is None:
            identity["production"] = _read_journal(self.out / JOURNAL).get("identity", {}).get("production")
        self.out.mkdir(parents=True, exist_ok=True)
        with self.locked():
            self.journal = Journal(self.out, identity)
        self.initial = identity["production"]

    # -- set-up: the frozen suites and the first production model, once per run folder ---------------
    def setup(self) -> None:
        from data_engine.registry import production, promote
        from deploy.export import export_checkpoint

        done = self.journal.data.setdefault("setup", {})
        if "suites" not in done:
            from data_engine.suites import SUITES_FILE, generate_suites, load_suites

            if (self.suites / SUITES_FILE).exists():
                load_suites(self.suites, verify=False)  # a suites folder (digests are verified by every gate)
            elif self.suites == self.out / "suites":
                generate_suites(self.suites, self.cfg.suites, self.fleet, progress=self.progress)
            else:
                raise LoopError(f"--suites {self.suites} is not a suites folder (no {SUITES_FILE}); generate it with "
                                f"`hydranet engine suites --out {self.suites}` or leave --suites out")
            done["suites"] = str(self.suites)
            _atomic_json(self.journal.path, self.journal.data)
        if "production" not in done:
            if production(self.catalog, missing_ok=True) is None:
                onnx = self.out / "models" / "initial.onnx"
                onnx.parent.mkdir(parents=True, exist_ok=True)
                export_checkpoint(self.initial, onnx, verbose=False)
                promote(self.catalog, self.initial, onnx=onnx, note="initial production (engine run)")
            done["production"] = production(self.catalog)["checkpoint"]
            _atomic_json(self.journal.path, self.journal.data)

    def locked(self):
        """Two `engine run` on one folder would interleave stages and journal writes: one holds DIR/.lock."""
        return exclusive_lock(self.out / LOCK, f"loop run {self.out}", LoopError)

    def run(self, rounds: int) -> list[dict[str, Any]]:
        check_rounds(rounds)
        with self.locked():
            return self._run(rounds)

    def _run(self, rounds: int) -> list[dict[str, Any]]:
        if self.fleets is not None:  # every round's fleet is there before the set-up exports and promotes anything
            for r in range(rounds):
                if "fleet" not in self.journal.round(r)["done"]:
                    self.round_fleet(r)
            # and fits in one training set with the fleets labelled so far (retrain would refuse it after labelling)
            labelled = labelled_fleets(self.catalog)
            pending = [(f"round {r}'s fleet", self.done(r, "fleet")["fleet"] if "fleet" in self.journal.round(r)["done"]
                        else self.round_fleet(r)) for r in range(rounds) if "label" not in self.journal.round(r)["done"]]
            check_fleet_mix([(f"the fleet already labelled in {self.catalog}", root) for root in labelled] + pending)
        self.setup()
        summaries = []
        for r in range(rounds):
            rdir = _round_dir(self.out, r)
            rdir.mkdir(parents=True, exist_ok=True)
            state = self.journal.round(r)
            for stage in STAGES:
                if stage in state["done"]:
                    continue
                t0 = time.perf_counter()
                result = getattr(self, f"stage_{stage}")(r, rdir)
                result["seconds"] = round(time.perf_counter() - t0, 1)
                self.journal.finish(r, stage, result)
            summaries.append(self.summary(r))
            self.log(summaries[-1]["line"])
        return summaries

    def done(self, r: int, stage: str) -> dict[str, Any]:
        return self.journal.round(r)["done"][stage]

    def round_fleet(self, r: int) -> Path:
        """--fleets/rNNN, the fleet of round r; LoopError when it is not a fleet."""
        from data_engine.fleet import RECORDED_FILE

        fleet = self.fleets / f"r{r:03d}"
        if not any((fleet / f).is_file() for f in ("dataset.json", RECORDED_FILE)):
            raise LoopError(f"{fleet} is not a fleet (no dataset.json or {RECORDED_FILE}); render one with `hydranet engine "
                            f"fleet --out {fleet}` or ingest recordings with `hydranet engine ingest --out {fleet}`")
        return fleet

    # -- the stages ------------------------------------------------------------------------------------
    def stage_fleet(self, r: int, rdir: Path) -> dict[str, Any]:
        from data_engine.fleet import generate_fleet

        if self.fleets is not None:  # rendered or recorded fleets, one per round
            from data_engine.fleet import RECORDED_FILE, Fleet, FleetError

            fleet = self.round_fleet(r)
            try:
                clips = len(Fleet(fleet).clip_names)
            except FleetError as e:
                raise LoopError(str(e)) from None
            return {"fleet": str(fleet), "clips": clips, "recorded": (fleet / RECORDED_FILE).is_file()}
        fleet = rdir / "fleet"
        if not (fleet / "dataset.json").exists():  # the fleet is renamed into place whole, or not at all
            generate_fleet(fleet, self.fleet, self.cfg.loop.fleet_clips, self.cfg.loop.fleet_seed + r,
                           progress=self.progress, workers=self.cfg.loop.workers or os.cpu_count() or 1)  # same bytes
        return {"fleet": str(fleet), "clips": self.cfg.loop.fleet_clips}

    def stage_shadow(self, r: int, rdir: Path) -> dict[str, Any]:
        from data_engine.registry import production
        from data_engine.shadow import run_shadow

        prod = production(self.catalog)
        st = run_shadow(prod["onnx"], self.done(r, "fleet")["fleet"], self.catalog, workers=self.cfg.loop.workers,
                        progress=self.progress)
        return {"run_id": st["run_id"], "frames": st["frames"], "corrupt": st["corrupt"], "production": prod["checkpoint"]}

    def stage_triggers(self, r: int, rdir: Path) -> dict[str, Any]:
        from data_engine.triggers import build_triggers, fire_all

        _, hits = fire_all(self.catalog, build_triggers(self.cfg.trigger_params() or None), self.done(r, "shadow")["run_id"])
        return {"fired": {name: len(h) for name, h in hits.items()}}

    def stage_mine(self, r: int, rdir: Path) -> dict[str, Any]:
        import dataclasses

        from data_engine.mining import mine, write_selection

        lc = self.cfg.loop
        run_id = self.done(r, "shadow")["run_id"]
        if lc.ensemble:  # the server-side columns over this round's pool: the shadow run's model and the other members
            from data_engine.catalog import Catalog
            from data_engine.uncertainty import run_uncertainty

            with Catalog(self.catalog) as cat:
                model = cat.run_info(run_id)["model"]
            run_uncertainty(self.catalog, [model, *lc.ensemble], run_id, tta=True, overwrite=True, progress=self.progress)
        cfg = dataclasses.replace(self.cfg, mining=dataclasses.replace(self.cfg.mining, seed=self.cfg.mining.seed + r))
        sel = mine(self.catalog, lc.budget, lc.strategy, cfg, lc.unit, run_id, f"round{r:03d}")
        write_selection(sel, rdir / "selection.json")
        return {"selection": sel["name"], "file": str(rdir / "selection.json"), "items": len(sel["items"])}

    def stage_report(self, r: int, rdir: Path) -> dict[str, Any]:
        """The mined frames' contact sheet, signal histograms and trigger table (`hydranet engine report`)."""
        from data_engine.report import write_report

        got = write_report(self.catalog, rdir / "report", self.done(r, "mine")["selection"], cfg=self.cfg, overwrite=True)
        return {"dir": str(rdir / "report"), "shown": got["shown"]}

    def stage_label(self, r: int, rdir: Path) -> dict[str, Any]:
        from data_engine.label_exchange import import_labels, send
        from data_engine.label_queue import create_jobs, job_table
        from data_engine.labeling.base import edit_totals
        from data_engine.labels import accepted_labels, conflicts, edits, open_catalog, transition

        from data_engine.labeling.oracle import NO_TRUTH

        auto = self._autolabel(r, rdir) if self.cfg.loop.labeller.startswith("auto") else None
        if auto is not None and auto["human"] is None:  # "auto" alone: what the policy did not accept is not labelled
            with open_catalog(self.catalog) as cat:
                name = auto["selection"]
                nobody = "engine run (loop.labeller auto: below the accept policy, no person)"
                unsure = [j["job"] for j in job_table(cat, name) if j["state"] == "queued"]
                if unsure:  # the job machine's one way to a rejection: queued -> sent -> rejected (nobody is sent anything)
                    transition(cat, unsure, "sent", by=nobody)
                sent = [j["job"] for j in job_table(cat, name) if j["state"] == "sent"]  # also a killed run's, once resumed
                if sent:
                    transition(cat, sent, "rejected", by=nobody)
                states = [j["state"] for j in job_table(cat, name)]
                total = len(accepted_labels(cat))
            return {"selection": name, "accepted": states.count("accepted"), "rejected": states.count("rejected"),
                    "no_truth": 0, "accepted_total": total, "auto": auto}
        backend = self._labeller(rdir, self.done(r, "mine")["selection"])
        no_truth = 0
        with open_catalog(self.catalog) as cat:
            name = create_jobs(cat, self.done(r, "mine")["file"], backend.name)["selection"]
            send(cat, backend, name, progress=self.progress)
            if backend.name == "files" and not backend.files:
                raise LoopWaiting(self._files_waiting(rdir, name))
            got = import_labels(cat, backend, name, progress=self.progress)
            unlabelled = [p["job"] for p in got["partial"] if p["reason"].startswith(NO_TRUTH)]
            if unlabelled:  # the stand-in oracle cannot label a frame its dataset left unlabelled: not a label
                transition(cat, unlabelled, "rejected", by="engine run (no truth in the source)")
                no_truth = len(unlabelled)
                got["waiting"] -= no_truth
            if got["waiting"] and backend.name == "files":
                raise LoopWaiting(self._files_waiting(rdir, name))
            if got["waiting"] and backend.name == "label_studio":
                raise LoopWaiting(f"selection {name} waits for {got['waiting']} frames in Label Studio project "
                                  f"{backend.title!r} at {backend.client.url}: submit an annotation of each task there (`hydranet "
                                  f"engine jobs --catalog {self.catalog}` says why a frame waits), then resume with the same "
                                  "`hydranet engine run` command")
            if got["waiting"]:
                raise LoopError(f"{got['waiting']} label jobs of selection {name} are still with {backend.name}; import "
                                "them (`hydranet engine import-labels`) and rerun")
            bad = conflicts(cat, name)
            if bad:
                raise LoopError(f"selection {name}: {len(bad)} frames have conflicting label versions; settle them with "
                                "`hydranet engine jobs --accept ID --label-version V` and rerun")
            labelled = [j["job"] for j in job_table(cat, name) if j["state"] == "labelled"]
            if labelled:
                transition(cat, labelled, "accepted")
            states = [j["state"] for j in job_table(cat, name)]
            total = len(accepted_labels(cat))
            fixed = edits(cat, selection=name)  # the human half's corrections of the auto pre-fills
        return {"selection": name, "accepted": states.count("accepted"), "rejected": states.count("rejected"),
                "no_truth": no_truth, "accepted_total": total, **({"auto": auto} if auto else {}),
                **({"edits": edit_totals(fixed)} if fixed else {})}

    def _autolabel(self, r: int, rdir: Path) -> dict[str, Any]:
        """`engine autolabel` of the round's selection (once: a resumed round reads rdir/autolabel/summary.json) with the
        production and `loop.ensemble` as its ensemble: the policy's sure frames accepted, the rest queued for the human
        half of `loop.labeller` (None for "auto"), pre-filled. Returns {"selection", "human", "accepted", "queued",
        "left", "dir"}."""
        from data_engine.autolabel import run_autolabel
        from data_engine.registry import production

        human = self.cfg.loop.labeller.partition("+")[2] or None
        out = rdir / "autolabel"
        if (out / "summary.json").is_file():
            st = read_json(out / "summary.json")
        else:
            models = [production(self.catalog)["onnx"], *self.cfg.loop.ensemble]
            st = run_autolabel(self.catalog, self.done(r, "mine")["file"], models, out, self.cfg.autolabel, overwrite=True,
                               backend=human or "files", progress=self.progress)
        return {"selection": st["selection"], "human": human, "accepted": st["accepted"], "queued": st["queued"],
                "left": st["left"], "dir": str(out)}

    def _labeller(self, rdir: Path, selection: str):
        """The loop's labelling backend (the human half of an "auto+X" labeller): the oracle, label files (sent to
        rdir/labels/, the team's exports read back from rdir/labels/import/), or Label Studio (the server of
        $HYDRANET_LABEL_STUDIO_URL; one project per round, titled by the run folder too: two runs never share one)."""
        from data_engine.labeling import build_backend

        kind = self.cfg.loop.labeller.rpartition("+")[2]
        if kind == "label_studio":
            run = hashlib.sha256(str(self.out.resolve()).encode()).hexdigest()[:8]
            return build_backend(kind, project=f"hydranet {self.out.name} {run} {selection}")
        if kind != "files":
            return build_backend(kind)
        inbox = rdir / "labels" / "import"
        inbox.mkdir(parents=True, exist_ok=True)
        files = sorted(p for p in inbox.iterdir() if p.is_file() and p.suffix.lower() in (".json", ".xml"))
        return build_backend("files", out=rdir / "labels", files=files)

    def _files_waiting(self, rdir: Path, selection: str) -> str:
        labels = rdir / "labels"
        return (f"selection {selection} waits for its labels: label {labels}/{selection}.coco.json (or .cvat.xml, images "
                f"under {labels}/images) in your tool, put its COCO or CVAT export into {labels}/import/, then resume with "
                "the same `hydranet engine run` command")

    def stage_unit_tests(self, r: int, rdir: Path) -> dict[str, Any]:
        """The frames a trigger fired on (the deployed model failed there) become unit tests: labelled,
        frozen, and every later candidate is gated on them. Not on an auto-label: the models that failed there made
        it (counted as "auto_skipped")."""
        from data_engine.label_queue import load_jobs, read_selection
        from data_engine.labels import AUTO, accepted_versions, open_catalog
        from data_engine.suites import add_unit_tests

        if not self.cfg.loop.unit_tests:
            return {"added": 0}
        if self.done(r, "fleet").get("recorded"):  # unit tests are sim frames with every label channel (suites.py)
            return {"added": 0, "skipped": "recorded fleet: freeze its frames with `hydranet engine suites --from-fleet`"}
        _, items, _ = read_selection(self.done(r, "mine")["file"])
        fired = {int(it["frame_id"]) for it in items if (it.get("reason") or {}).get("triggers")}
        with open_catalog(self.catalog) as cat:
            versions = accepted_versions(cat)
            jobs = [j for j in load_jobs(cat, self.done(r, "label")["selection"], ("accepted",))
                    if j.frame_id in fired and j.frame_id in versions]
        frames = [(j.folder, versions[j.frame_id]["payload"]) for j in jobs if versions[j.frame_id]["source"] != AUTO]
        skipped = {"auto_skipped": len(jobs) - len(frames)} if len(jobs) > len(frames) else {}
        if not frames:
            return {"added": 0, **skipped}
        got = add_unit_tests(self.suites, frames)
        return {"added": got["added"], "unit_tests": got["frames"], **skipped}

    def stage_retrain(self, r: int, rdir: Path) -> dict[str, Any]:
        from data_engine.retrain import retrain

        run = rdir / "retrain"
        resume = (run / "checkpoint.pt").exists()
        retrain(self.done(r, "shadow")["production"], self.catalog, run, resume=resume, overwrite=run.exists() and not resume,
                progress=self.progress, cfg=self.cfg)
        return {"run": str(run)}

    def stage_export(self, r: int, rdir: Path) -> dict[str, Any]:
        from deploy.export import export_checkpoint

        onnx = rdir / "model.onnx"
        export_checkpoint(self.done(r, "retrain")["run"], onnx, verbose=False)
        return {"onnx": str(onnx)}

    def stage_gate(self, r: int, rdir: Path) -> dict[str, Any]:
        from data_engine.gate import AGGREGATE, gate, verdict_caveats, write_gate

        report = gate(self.done(r, "retrain")["run"], self.done(r, "shadow")["production"], self.suites, self.cfg.gate,
                      catalog=self.catalog)
        write_gate(report, rdir / "gate")
        head = report["summary_head"]
        rows = [r for r in report["rows"] if r["head"] == head]
        aggregate = {f"{r['head']} {r['metric']}": round(r["candidate"] - r["production"], 4) for r in report["rows"]
                     if r["slice"] == AGGREGATE and r["candidate"] is not None and r["production"] is not None}
        return {"promote": bool(report["promote"]), "failing": report["failing"], "slices": report["slices"],
                "production_slices": {r["slice"]: r["production"] for r in rows if r["slice"] in report["slices"]},
                "metric": f"{head} {rows[0]['metric']}" if rows else head, "aggregate": aggregate,
                "caveats": verdict_caveats(report), "dir": str(rdir / "gate")}

    def stage_promote(self, r: int, rdir: Path) -> dict[str, Any]:
        """Promote on a pass (promote is idempotent: a rerun after a kill promotes once)."""
        from data_engine.registry import production, promote

        if self.done(r, "gate")["promote"]:
            promote(self.catalog, self.done(r, "retrain")["run"], onnx=self.done(r, "export")["onnx"],
                    note=f"engine run round {r}")
        return {"production": production(self.catalog)["checkpoint"]}

    def summary(self, r: int) -> dict[str, Any]:
        """One line per round: labels spent (this round, in all), the summary head's metric per slice (candidate and
        production), each head's aggregate change, the verdict and where gate.md is."""
        from data_engine.labeling.base import describe_edits

        d = self.journal.round(r)["done"]
        g = d["gate"]
        total = d["label"]["accepted_total"]
        prod = g.get("production_slices") or {}
        slices = "  ".join(f"{s}={v:.3f}" + (f" ({prod[s]:.3f})" if prod.get(s) is not None else "")
                           for s, v in g["slices"].items())
        agg = ", ".join(f"{k} {v:+.3f}" for k, v in (g.get("aggregate") or {}).items())
        verdict = "promoted" if g["promote"] else f"rejected ({', '.join(g['failing'])})"
        caveats = "".join(f"; {c}" for c in g.get("caveats") or ())
        auto = d["label"].get("auto")
        auto_text = (f", {auto['accepted']} accepted by the auto-labeller, {auto['queued']} queued for "
                     f"{auto['human'] or 'nobody (rejected)'}" if auto else "")
        fixed = d["label"].get("edits")
        if fixed:  # what the human half changed in the pre-fills (data_engine.labels.edits)
            auto_text += f" ({describe_edits(fixed)} in {fixed['frames']} pre-filled frames)"
        line = (f"round {r}: {d['label']['accepted']} labels{auto_text} ({total} in all); {g.get('metric', 'summary metric')} per slice, "
                f"candidate (production): {slices}; aggregate change: {agg or 'none'} -> {verdict}{caveats}; "
                f"{Path(g['dir']) / 'gate.md'}")
        return {"round": r, "labels": d["label"]["accepted"], "labels_total": total, "slices": g["slices"],
                "promoted": g["promote"], "line": line}
