"""The gate: a candidate model is promoted only if it regresses on no scenario suite.

    hydranet engine gate --candidate C --production P --suites DIR [--catalog CAT] [--out DIR] [--promote]

Both models are evaluated on every suite (data_engine/suites.py: the frozen slices and the unit tests)
with `hydranet.evaluate`, and every head is judged by its task's primary metric (`higher_is_better`
respected: a gain is the signed change in the good direction). The rule (configs/engine.yaml `gate:`):

- no (slice, head) may lose more than `tolerance` (absolute, in the head's primary metric; per-head
  overrides in `head_tolerance`);
- each `targeted` slice must gain at least `min_gain` (on `targeted_heads`, default every head);
- per head, the aggregate (mean over slices weighted by their frames) must not lose more than
  `aggregate_tolerance` (default 0: must not get worse).

Each of these is decided with its confidence (issue 25): both models' per-frame metric states
(`hydranet.evaluate(keep_states=True)`) are resampled over the suite's clips, the same resample for
both models and every head of a suite (a paired bootstrap, `resamples` of them, seeded by `seed`), which
gives each delta (and each head's aggregate) its `confidence` interval. A row fails only when the whole
interval lies beyond the rule (its upper bound below -tolerance: the drop is larger than the tolerance
with that confidence; a targeted slice's below min_gain), not when the point estimate alone crosses it.
A head whose metric keeps no states, or a suite of one clip, has no interval worth the name: the point
estimate decides, and the row says so.

A metric that is NaN for one model only is a GateError, never a pass; NaN for both means the suite holds
nothing that head scores (no sign in a two-clip slice): that row is "n/a" and left out of the aggregate; a
head with nothing to score on any suite is listed as "ungated" in the report and the table, never as a pass.
A model's suite metrics are cached by (checkpoint sha256, suite content digest): in the catalog's
`gate_results` table when a catalog is given, else in `<checkpoint>.suite_metrics.json` next to the
checkpoint, so the production model is not evaluated again every round. The report has one row per
(slice, head) and per head for the aggregate, with the verdict and its reason, the failing slices and
the overall verdict; `write_gate` writes gate.json and gate.md atomically.
"""
from __future__ import annotations

import json
import math
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from data_engine.catalog import Catalog
from hydranet.io import atomic_write_text, file_sha256
from data_engine.registry import checkpoint_file, model_id, open_registry
from data_engine.config import GateRule
from data_engine.retrain import RECORD as RETRAIN_RECORD, label_sources_line
from data_engine.suites import load_suites

AGGREGATE = "aggregate"
_EPS = 1e-9  # float slack on the comparisons (a gain of exactly -tolerance passes)


class GateError(ValueError):
    """A gate that cannot decide (a NaN metric, models of different heads, a bad rule); one line."""


# -- evaluation with its cache ------------------------------------------------------------------------------
# bumped when what a suite evaluation measures changes: v2 evaluates a model on the cameras it is built on
# (a retrained model's are its first source's; v1 read every camera of the suite for it), so v1 entries are stale;
# v3 keeps every frame's metric states and clip (the bootstrap needs them), so v2 entries lack them; v4 keeps the
# recorded clip (not the suite's scene: a pose-less recording writes one scene per frame) and each frame's time
EVAL_VERSION = 4


def _evaluate(checkpoint: Path, data: Path, loaded: tuple | None = None) -> dict[str, Any]:
    """{"frames", "cameras", "clips" (the clip of every frame), "heads": {head: {"metric", "value" (None for
    NaN), "higher_is_better", "states" (per frame its metric states, `hydranet.evaluate`; None: the head's
    metric keeps none)}}} of one suite. `loaded`: the checkpoint's `load_model`, when the caller holds it."""
    from hydranet.evaluate import evaluate_checkpoint, plain_json

    r = evaluate_checkpoint(checkpoint, data, None, progress=False, keep_states=True, loaded=loaded)
    heads = {}
    for head, metric in r["primary"].items():
        v = r["model"][head].get(metric, math.nan)
        heads[head] = {"metric": metric, "value": float(v) if v is not None and math.isfinite(v) else None,
                       "higher_is_better": bool(r["higher_is_better"][head]),
                       "states": plain_json(r["states"].get(head))}
    clips, times = _frame_clocks(data, r["frame_ids"])
    return {"frames": int(r["frames"]), "cameras": list(r["cameras"]), "clips": clips, "times": times, "heads": heads}


def _frame_clocks(data: Path, frame_ids: Sequence[Sequence[str]]) -> tuple[list[str], list[float | None]]:
    """Per evaluated frame ([scene, frame dir]): the clip it was recorded in (scene.json's "clip", "FLEET/NAME": a
    suite frozen from a fleet keeps it; else the scene) and its time in seconds (None where not recorded)."""
    from hydranet.data import SimDataset

    scenes = {sc["name"]: sc for sc in SimDataset(data, channels=("images",)).scenes}
    clips, times = [], []
    for scene, fdir in frame_ids:
        sc = scenes[scene]
        src = sc.get("clip")
        clips.append(f"{src['fleet']}/{src['name']}" if isinstance(src, Mapping) and src.get("name") else scene)
        ts = next((f.get("timestamp_us") for f in sc["frames"] if str(f.get("dir")) == fdir), None)
        times.append(None if ts is None else float(ts) / 1e6)
    return clips, times


class _Cache:
    """Suite metrics of one checkpoint, keyed by "<suite>@<digest>": catalog rows or a JSON sidecar."""

    def __init__(self, ckpt: Path, sha: str, catalog: str | Path | Catalog | None):
        self.ckpt, self.sha, self.catalog = ckpt, sha, catalog
        self.sidecar = ckpt.with_name(f"{ckpt.name}.suite_metrics.json")

    def get(self) -> dict[str, Any]:
        if self.catalog is not None:
            with open_registry(self.catalog, create=True) as cat:
                rows = cat.db.execute("SELECT g.suite, g.metrics FROM gate_results g JOIN models m ON g.candidate_id = m.id "
                                      "WHERE m.sha256 = ? AND g.verdict = 'eval'", (self.sha,)).fetchall()
            return {k: json.loads(v) for k, v in rows}
        try:
            data = json.loads(self.sidecar.read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            return {}  # no cache yet, or an unreadable one: evaluate again (the cache is only a shortcut)
        return data.get("suites", {}) if isinstance(data, dict) and data.get("sha256") == self.sha else {}

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        if self.catalog is not None:
            with open_registry(self.catalog, create=True) as cat, cat.transaction():
                mid = model_id(cat, self.ckpt, self.sha)
                if not cat.db.execute("SELECT 1 FROM gate_results WHERE candidate_id = ? AND suite = ? AND verdict = 'eval'",
                                      (mid, key)).fetchone():
                    cat.db.execute("INSERT INTO gate_results (candidate_id, production_id, suite, metrics, verdict, created) "
                                   "VALUES (?, NULL, ?, ?, 'eval', ?)", (mid, key, json.dumps(value), time.time()))
            return
        data = {"sha256": self.sha, "checkpoint": str(self.ckpt), "suites": {**self.get(), key: dict(value)}}
        try:
            atomic_write_text(self.sidecar, json.dumps(data, indent=1) + "\n")
        except OSError:  # a read-only run folder: no cache, the metrics are still right
            pass


def suite_table(checkpoint: str | Path, suites_dir: str | Path, catalog: str | Path | Catalog | None = None,
                progress: bool = False, suites: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """{suite: {"frames", "heads": {head: {"metric", "value", "higher_is_better"}}}} of a checkpoint on every
    suite, from the cache where the checkpoint and suite digests match."""
    suites = suites if suites is not None else load_suites(suites_dir)["suites"]  # a modified suite: refused first
    ckpt = checkpoint_file(checkpoint)
    sha = file_sha256(ckpt)
    cache = _Cache(ckpt, sha, catalog)
    known = cache.get()
    out = {}
    items = list(suites.items())
    if progress:
        from tqdm import tqdm

        items = tqdm(items, desc=f"gate {ckpt.parent.name}", unit="suite")
    loaded = None  # the model, loaded once for every suite not in the cache
    for name, s in items:
        key = f"{name}@{s['digest']}@v{EVAL_VERSION}"
        if key not in known:
            if loaded is None:
                from hydranet.checkpoint import load_model

                loaded = load_model(ckpt)
            known[key] = _evaluate(ckpt, s["path"], loaded)
            cache.put(key, known[key])
        out[name] = known[key]
    return out


def evaluate_suites(checkpoint: str | Path, suites_dir: str | Path, catalog: str | Path | Catalog | None = None,
                    progress: bool = False) -> dict[str, dict[str, float]]:
    """{suite: {head: primary metric value}} (NaN where a suite has nothing to score for a head)."""
    return {name: {h: math.nan if m["value"] is None else m["value"] for h, m in t["heads"].items()}
            for name, t in suite_table(checkpoint, suites_dir, catalog, progress).items()}


# -- the decision -------------------------------------------------------------------------------------------
def _missing(v: float | None) -> bool:
    return v is None or not math.isfinite(v)


def _clip_groups(clips: Sequence[str], times: Sequence[float | None] | None = None, block_s: float = 0.0) -> list[list[int]]:
    """Frame indices of each resampling unit, in order of first appearance: a clip, or with `block_s` > 0 and the
    frames' times, each block_s-second block of a clip (counted from the clip's first frame)."""
    start: dict[str, float] = {}
    if block_s > 0 and times is not None:
        for c, t in zip(clips, times):
            if t is not None:
                start[c] = min(start.get(c, t), t)
    groups: dict[tuple[str, int], list[int]] = {}
    for i, c in enumerate(clips):
        t = times[i] if times is not None else None
        block = int((t - start[c]) // block_s) if c in start and t is not None else 0
        groups.setdefault((c, block), []).append(i)
    return list(groups.values())


def _units(table: Mapping[str, Any], rule: GateRule) -> tuple[int, str] | None:
    """(independent units, their description) of a suite table, or None when it records no clips."""
    clips = table.get("clips")
    if not clips:
        return None
    n = len(_clip_groups(clips, table.get("times"), rule.block_s))
    k = len(set(clips))
    what = f"{k} clip{'s' * (k != 1)}"
    return n, what if n == k else f"{what} in {n} blocks of {rule.block_s:g} s"


def _resample(rule: GateRule, suite: str, n: int) -> np.ndarray:
    """(resamples, n) clip indices drawn with replacement: seeded by the rule's seed and the suite's name,
    the same for both models and every head (a paired bootstrap)."""
    rng = np.random.default_rng([rule.seed, zlib.crc32(suite.encode())])
    return rng.integers(0, n, (rule.resamples, n))


def _bootstrap(rule: GateRule, suite: str, cand: Mapping[str, Any], prod: Mapping[str, Any], head: str,
               metric) -> tuple[np.ndarray, np.ndarray] | str:
    """(candidate values, production values) of `head`'s primary metric over the suite's resamples of clips
    (NaN where a resample holds nothing to score), or why there are none."""
    if metric is None:
        return "no metric to recompute it from states"
    c_states, p_states = cand["heads"][head].get("states"), prod["heads"][head].get("states")
    if c_states is None or p_states is None:
        return "the head's metric keeps no per-frame states"
    clips = cand.get("clips")
    if clips is None or clips != prod.get("clips") or len(clips) != len(c_states) or len(clips) != len(p_states):
        return "the models' suite metrics hold no matching per-frame clips"
    groups = _clip_groups(clips, cand.get("times"), rule.block_s)
    if len(groups) < 2:
        return "one clip: nothing to resample"
    name = cand["heads"][head]["metric"]

    def items(states, clip):  # a clip's item states, merged once where the metric can (`Metric.merge_states`)
        merged = metric.merge_states([s for i in groups[clip] if states[i] is not None for s in states[i]])
        return merged if isinstance(merged, list) else [] if merged is None else [merged]

    per_clip = [(items(c_states, k), items(p_states, k)) for k in range(len(groups))]
    draws = _resample(rule, suite, len(groups))
    out = np.full((2, len(draws)), np.nan)
    for r, idx in enumerate(draws):
        for w in (0, 1):
            v = metric.compute_states([s for k in idx for s in per_clip[k][w]]).get(name, math.nan)
            out[w, r] = math.nan if v is None else v
    return out[0], out[1]


def _interval(rule: GateRule, gains: np.ndarray) -> tuple[float, float] | None:
    """The central `confidence` interval of the finite resampled gains (None when under half are finite)."""
    ok = gains[np.isfinite(gains)]
    if len(ok) < max(len(gains) // 2, 1):
        return None
    a = (1 - rule.confidence) / 2
    lo, hi = np.quantile(ok, [a, 1 - a])
    return float(lo), float(hi)


def decide(candidate: Mapping[str, Any], production: Mapping[str, Any], rule: GateRule | None = None,
           metrics: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The gate's verdict on two suite tables (`suite_table`'s form). Returns {"promote", "verdict", "failing",
    "rows": [{"slice", "head", "metric", "higher_is_better", "production", "candidate", "delta", "gain",
    "gain_ci", "delta_ci", "verdict", "reason"}], "slices": {slice: candidate value of the summary head},
    "summary_head", "rule"}.

    `metrics`: {head: a fresh `Metric` of the head's task} whose `compute_states` recomputes the primary
    metric from the tables' per-frame states: with them (and rule.resamples > 0) every row and aggregate
    is decided on its paired-bootstrap interval ("gain_ci": [low, high] of the gain, "delta_ci" of the
    delta); without, on the point estimates (the rows say why)."""
    rule = rule or GateRule()
    metrics = metrics or {}
    if list(candidate) != list(production):
        raise GateError(f"the candidate was evaluated on suites {list(candidate)}, the production on {list(production)}; "
                        "gate both on the same suites folder")
    if not candidate:
        raise GateError("no suites to gate on; generate them with `hydranet engine suites`")
    missing = [s for s in rule.targeted if s not in candidate]
    if missing:
        raise GateError(f"gate.targeted names slice {missing[0]!r}, not a suite here ({list(candidate)})")
    rows: list[dict[str, Any]] = []
    units = {suite: u for suite in candidate if (u := _units(candidate[suite], rule)) is not None}
    first = next(iter(candidate))
    heads = list(candidate[first]["heads"])
    for suite in candidate:
        ch, ph = candidate[suite]["heads"], production[suite]["heads"]
        cams = candidate[suite].get("cameras"), production[suite].get("cameras")
        if cams[0] != cams[1]:
            raise GateError(f"suite {suite}: the candidate was evaluated on cameras {cams[0]}, the production on {cams[1]}; "
                            "gate models built on the same cameras (data.cameras / the first source's cameras)")
        if list(ch) != list(ph) or list(ch) != heads:
            raise GateError(f"suite {suite}: candidate heads {list(ch)} differ from production heads {list(ph)}; "
                            "gate models of the same heads")
        for head in heads:
            c, p = ch[head], ph[head]
            if (c["metric"], c["higher_is_better"]) != (p["metric"], p["higher_is_better"]):
                raise GateError(f"suite {suite}: head {head} is judged by {c['metric']} for the candidate and by "
                                f"{p['metric']} for the production; gate models of the same tasks")
            if _missing(c["value"]) and _missing(p["value"]):  # the suite holds nothing this head scores (no sign in it)
                rows.append({"slice": suite, "head": head, "metric": c["metric"], "higher_is_better": c["higher_is_better"],
                             "production": None, "candidate": None, "delta": None, "gain": None, "verdict": "n/a",
                             "reason": "nothing to score in this suite"})
                continue
            if _missing(c["value"]) or _missing(p["value"]):  # one model scores nothing the other does (no sign matched)
                cand_lost = _missing(c["value"])
                rows.append({"slice": suite, "head": head, "metric": c["metric"], "higher_is_better": c["higher_is_better"],
                             "production": None if _missing(p["value"]) else float(p["value"]),
                             "candidate": None if cand_lost else float(c["value"]), "delta": None, "gain": None,
                             "verdict": "fail" if cand_lost else "pass",
                             "reason": ("undefined for the candidate (it scores nothing here), defined for the production"
                                        if cand_lost else "undefined for the production, defined for the candidate")})
                continue
            boot = (_bootstrap(rule, suite, candidate[suite], production[suite], head, metrics.get(head))
                    if rule.resamples else "gate.resamples is 0")
            row = _row(rule, suite, head, c["metric"], c["higher_is_better"], float(p["value"]), float(c["value"]),
                       boot, units.get(suite))
            rows.append(row)
    frames = {s: candidate[s]["frames"] for s in candidate}
    total = sum(frames.values())
    if total <= 0:
        raise GateError("the suites hold no scored frames; regenerate them")
    for head in heads:
        mine = [r for r in rows if r["head"] == head and r["delta"] is not None]  # both models scored
        scored = sum(frames[r["slice"]] for r in mine)
        if not mine or scored <= 0:  # said in the table and in "ungated", never counted as a pass
            rows.append({"slice": AGGREGATE, "head": head, "metric": next(r["metric"] for r in rows if r["head"] == head),
                         "higher_is_better": next(r["higher_is_better"] for r in rows if r["head"] == head),
                         "production": None, "candidate": None, "delta": None, "gain": None, "verdict": "n/a",
                         "reason": "NOT GATED: no suite holds anything this head scores (people's 2D labels score det2d "
                                   "and signs_lights only; a small rendered suite may hold none: more --clips)"})
            continue
        agg = {k: sum(frames[r["slice"]] * r[k] for r in mine) / scored for k in ("production", "candidate")}
        boot: tuple[np.ndarray, np.ndarray] | str = "a slice of it has no interval"
        if not rule.resamples:
            boot = "gate.resamples is 0"
        elif all(r.get("_boot") is not None for r in mine):  # each slice resampled on its own, weighted by frames
            boot = tuple(sum(frames[r["slice"]] * r["_boot"][w] for r in mine) / scored for w in (0, 1))
        n = sum(units[r["slice"]][0] for r in mine) if all(r["slice"] in units for r in mine) else None
        rows.append(_row(rule, AGGREGATE, head, mine[0]["metric"], mine[0]["higher_is_better"], agg["production"],
                         agg["candidate"], boot,
                         None if n is None else (n, f"{n} unit{'s' * (n != 1)} over {len(mine)} slice{'s' * (len(mine) != 1)}")))
    for r in rows:
        r.pop("_boot", None)
    failing = list(dict.fromkeys(r["slice"] for r in rows if r["verdict"] == "fail"))
    summary = rule.summary_head or heads[0]
    if summary not in heads:
        raise GateError(f"gate.summary_head {summary!r} is not a head of these models ({heads})")
    ungated = [r["head"] for r in rows if r["slice"] == AGGREGATE and r["verdict"] == "n/a"]
    if len(ungated) == len(heads):
        raise GateError("no suite holds anything any head scores; generate the suites with more --clips")
    undecided = {r["slice"]: r["units"] for r in rows if r["verdict"] == "undecided"}
    return {"promote": not failing, "verdict": "promote" if not failing else "reject", "failing": failing, "rows": rows,
            "ungated": ungated, "undecided": undecided,
            "slices": {r["slice"]: r["candidate"] for r in rows
                       if r["head"] == summary and r["slice"] != AGGREGATE and r["candidate"] is not None},
            "summary_head": summary, "frames": frames, "rule": asdict(rule)}


def _row(rule: GateRule, suite: str, head: str, metric: str, hib: bool, prod: float, cand: float,
         boot: tuple[np.ndarray, np.ndarray] | str = "no states", units: tuple[int, str] | None = None) -> dict[str, Any]:
    """One row's verdict. `boot`: (candidate, production) values over the paired resamples, or why there
    are none (the point estimate then decides). `units`: (independent units, their description) of the slice;
    under rule.min_units a row that does not fail is "undecided" (a targeted one fails: no gain can be shown)."""
    delta = cand - prod
    gain = (delta if hib else -delta) + 0.0  # > 0: better (+ 0.0: no negative zero)
    ci = None
    if not isinstance(boot, str):
        gains = (boot[0] - boot[1]) * (1 if hib else -1)
        ci = _interval(rule, gains)
        if ci is None:
            boot = "most resamples hold nothing to score"
    # the value the rule compares: the interval's upper bound of the gain (the drop is beyond the tolerance with
    # the stated confidence only if even the best plausible gain is below -tolerance), else the point estimate
    best = gain if ci is None else max(ci[1], gain)
    if suite == AGGREGATE:
        tol, why = rule.aggregate_tolerance, "aggregate"
    else:
        tol, why = rule.head_tolerance.get(head, rule.tolerance), "dropped"
    level = f"{100 * rule.confidence:g}%"
    span = "" if ci is None else f" (gain {level} interval [{ci[0]:+.4f}, {ci[1]:+.4f}])"
    verdict, reason = "pass", "no change" if abs(gain) <= _EPS else f"within tolerance {tol:g}"
    if gain > _EPS:  # "improved" only where the interval says so
        reason = "improved" if ci is None or ci[0] > _EPS else "better, but the interval includes no change"
    if gain < -tol - _EPS and best >= -tol - _EPS:
        reason = f"worse by {-gain:.4f} but not beyond tolerance {tol:g} with {level} confidence"
    if best < -tol - _EPS:
        verdict, reason = "fail", f"{why}: worse by {-gain:.4f}" + (f" > tolerance {tol:g}" if tol else "")
        if ci is not None:
            reason += f" with {level} confidence"
    elif suite in rule.targeted and (not rule.targeted_heads or head in rule.targeted_heads):
        if (gain if ci is None else max(ci[1], gain)) < rule.min_gain - _EPS:
            verdict, reason = "fail", f"targeted: gained {gain:+.4f} < min_gain {rule.min_gain:g}"
        else:
            reason = f"targeted: gained {gain:+.4f}" + (f" >= min_gain {rule.min_gain:g}" if gain >= rule.min_gain - _EPS
                                                        else f", min_gain {rule.min_gain:g} within the interval")
    if units is not None and units[0] < rule.min_units and verdict == "pass":
        if reason.startswith("targeted"):
            verdict, reason = "fail", (f"targeted: undecided, {units[1]} (a verdict needs {rule.min_units}): a gain cannot "
                                       "be shown; freeze the slice with more clips")
        else:
            verdict, reason = "undecided", f"undecided: {units[1]} (a verdict needs {rule.min_units}); gain {gain:+.4f}"
    reason += span if ci is not None else f" (point estimate: {boot})"
    sign = 1 if hib else -1
    return {"slice": suite, "head": head, "metric": metric, "higher_is_better": hib, "production": prod, "candidate": cand,
            "delta": delta, "gain": gain, "gain_ci": None if ci is None else list(ci),
            "delta_ci": None if ci is None else sorted([sign * ci[0], sign * ci[1]]), "verdict": verdict, "reason": reason,
            "units": None if units is None else units[1],
            "_boot": None if ci is None else boot}


def gate(candidate: str | Path, production: str | Path, suites_dir: str | Path, rule: GateRule | None = None,
         catalog: str | Path | Catalog | None = None, progress: bool = False) -> dict[str, Any]:
    """Evaluate both checkpoints (files or run folders) on every suite of `suites_dir` (cached) and decide
    (`decide`). With `catalog`, the result is recorded in its gate_results table."""
    rule = rule or GateRule()
    info = load_suites(suites_dir)  # digests verified once: a modified suite is refused before any evaluation
    missing = [s for s in rule.targeted if s not in info["suites"]]
    if missing:
        raise GateError(f"gate.targeted names slice {missing[0]!r}, not a suite of {suites_dir} ({list(info['suites'])})")
    cand, prod = checkpoint_file(candidate), checkpoint_file(production)
    check_held_out(info["index"], {"candidate": cand, "production": prod})
    tables = {who: suite_table(p, suites_dir, catalog, progress, info["suites"]) for who, p in (("candidate", cand),
                                                                                                 ("production", prod))}
    report = decide(tables["candidate"], tables["production"], rule, state_metrics(cand) if rule.resamples else None)
    record = cand.parent / RETRAIN_RECORD
    if record.is_file():  # a retrained candidate: the label sets it trained on
        try:
            report["labels"] = label_sources_line(json.loads(record.read_text()))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise GateError(f"{record}: unreadable ({e}); it records the candidate's label sources: restore it") from None
    report.update({"candidate": {"checkpoint": str(cand), "sha256": file_sha256(cand)},
                   "production": {"checkpoint": str(prod), "sha256": file_sha256(prod)},
                   "suites": {"dir": str(Path(suites_dir).resolve()),
                              "digests": {n: s["digest"] for n, s in info["suites"].items()}}})
    if catalog is not None:
        with open_registry(catalog, create=True) as cat, cat.transaction():
            ids = [model_id(cat, report[w]["checkpoint"], report[w]["sha256"]) for w in ("candidate", "production")]
            cat.db.execute("INSERT INTO gate_results (candidate_id, production_id, suite, metrics, verdict, created) "
                           "VALUES (?, ?, ?, ?, ?, ?)", (*ids, report["suites"]["dir"], json.dumps(report),
                                                         report["verdict"], time.time()))
    return report


def check_held_out(index: Mapping[str, Any], checkpoints: Mapping[str, Path]) -> None:
    """Refuse a slice frozen from a fleet that a checkpoint trained on (a data root of its config): its frames
    are not held out, and a gate on them would reward memorizing them. GateError naming slice, fleet and model."""
    fleets = {name: Path(s["source"]["fleet"]).resolve() for name, s in index.get("slices", {}).items()
              if isinstance(s.get("source"), Mapping) and s["source"].get("kind") == "fleet" and s["source"].get("fleet")}
    if not fleets:
        return
    from hydranet.checkpoint import config_from_checkpoint, load_checkpoint

    for who, ckpt in checkpoints.items():
        data = config_from_checkpoint(load_checkpoint(ckpt)).data
        roots = {Path(r).resolve() for r in (data.root, data.val_root, *(s.root for s in data.sources)) if r}
        for name, fleet in fleets.items():
            if fleet in roots:
                raise GateError(f"slice {name!r} is frozen from fleet {fleet}, which the {who} {ckpt} trained on (a data "
                                "root of its config): its frames are not held out; freeze the slice from another fleet "
                                "(`hydranet engine suites --from-fleet`) or gate on rendered suites")


def state_metrics(checkpoint: str | Path) -> dict[str, Any]:
    """{head: a fresh metric of the checkpoint's task}: what recomputes a head's primary metric from the
    suite tables' per-frame states (`decide`)."""
    from hydranet.checkpoint import load_model

    model = load_model(checkpoint_file(checkpoint))[0]
    return {name: task.metric() for name, task in model.heads.items()}


# -- output -------------------------------------------------------------------------------------------------
def format_gate(report: Mapping[str, Any]) -> str:
    """The report as a markdown table, the verdict last."""
    level = f"{100 * report['rule'].get('confidence', 0.95):g}%"
    lines = [f"| slice | head | metric | production | candidate | delta | delta {level} interval | verdict |",
             "|---|---|---|---:|---:|---:|---:|---|"]
    for r in report["rows"]:
        arrow = "" if r["higher_is_better"] else " (lower is better)"
        if r["verdict"] == "n/a":
            lines.append(f"| {r['slice']} | {r['head']} | {r['metric']}{arrow} | - | - | - | - | n/a: {r['reason']} |")
            continue
        verdict = {"pass": "pass", "undecided": "undecided"}.get(r["verdict"], "**FAIL**")
        num = lambda v, fmt=".4f": "n/a" if v is None else format(v, fmt)  # noqa: E731 - undefined for one model
        ci = r.get("delta_ci")
        span = "-" if ci is None else f"[{ci[0]:+.4f}, {ci[1]:+.4f}]"
        lines.append(f"| {r['slice']} | {r['head']} | {r['metric']}{arrow} | {num(r['production'])} | {num(r['candidate'])} | "
                     f"{num(r['delta'], '+.4f')} | {span} | {verdict}: {r['reason']} |")
    if report.get("ungated"):
        lines.append(f"\nnot gated (nothing to score on any suite): {', '.join(report['ungated'])}")
    rule = report["rule"]
    with_ci = sum(r.get("delta_ci") is not None for r in report["rows"])
    scored = sum(r["delta"] is not None for r in report["rows"])
    how = (f"paired bootstrap over each suite's clips, {rule['resamples']} resamples, seed {rule['seed']}: a row fails "
           f"when its whole {level} interval lies beyond the rule; " +
           (f"{with_ci} of {scored} rows have an interval, the others are decided on the point estimate"
            if with_ci < scored else f"all {scored} rows have an interval") if with_ci else
           "point estimates: no row has an interval" + ("" if rule.get("resamples") else " (gate.resamples 0)"))
    caveats = "".join(f"; {c}" for c in verdict_caveats(report))
    if report["promote"]:
        sure = f" with {level} confidence" if with_ci else ""
        lines.append(f"\n**verdict: PROMOTE** (no slice regressed beyond the rule{sure}; {how}){caveats}")
    else:
        lines.append(f"\n**verdict: REJECT** (failing: {', '.join(report['failing'])}; {how}){caveats}")
    return "\n".join(lines)


def verdict_caveats(report: Mapping[str, Any]) -> list[str]:
    """What the verdict does not cover, for every line that states it: heads not gated, slices undecided, and the
    candidate's label sources (its retrain.json)."""
    out = []
    if report.get("ungated"):
        out.append(f"not gated (nothing to score): {', '.join(report['ungated'])}")
    if report.get("undecided"):
        out.append("undecided (too few independent clips): " + ", ".join(
            f"{sl} ({why})" if why else sl for sl, why in report["undecided"].items()))
    if report.get("labels"):
        out.append(f"candidate's {report['labels']}")
    return out


def write_gate(report: Mapping[str, Any], out: str | Path) -> Path:
    """out/gate.json and out/gate.md, each written to a temp file and renamed. Returns out."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("gate.json", json.dumps(report, indent=1, allow_nan=False) + "\n"), ("gate.md", format_gate(report) + "\n")):
        atomic_write_text(out / name, text)
    return out
