"""A shadow run measured against its fleet's hidden truth: per-frame model error, trigger precision and
recall of each rare scenario, and how a selection compares with random.

Only reports (`hydranet engine report`, `hydranet engine triggers`) and benchmarks import this module:
the miner never does, so it stays blind to the scenario tags. The truth is what a sim fleet keeps
apart: FLEET/truth/scenarios.json (each clip's rare scenarios) and the per-frame labels.json. A fleet
without them (a real one) has no truth: `load_run_truth` says why and returns None.

- per-frame error = 1 - F1 of the stored det2d predictions (score >= 0.3) against the labels' 2D boxes
  (greedy IoU >= 0.5, class-agnostic), over the model's cameras, boxes scaled to the camera images;
  0 when neither has a box;
- trigger precision, two ways, each with its base rate (the same share over the run's frames: what
  firing at random gives), lift = precision / base rate, and the count n of fired frames it is
  computed on:
  - rare: share of the fired frames whose clip has a rare scenario tag;
  - hard: among the frames the model detects on (a det2d box with score >= 0.3; frames without one
    have an error that only counts missed objects), the share of the fired ones in the top quarter by
    error. Ties at the quarter's edge share it: each tied frame counts (places left) / (tied frames),
    the expected value of breaking the ties at random, so the base rate is exactly 0.25 and a
    saturated error (most frames at 1.0) gives lifts near 1, not a false 1.00 precision.
  (The former precision, share of fired frames with error >= the run's 75th percentile, was 1.00 for
  any trigger when more than a quarter of the frames had error 1.0, as with a weak model.)
- recall of a rare scenario = share of that scenario's frames (frames of the clips tagged with it)
  the trigger fired on;
- a selection's rare-frame rate and mean error (benchmarks compare them with a random selection).
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from data_engine.catalog import Catalog
from data_engine.fleet import TRUTH_FILE
from hydranet.decoding import box_iou
from hydranet.io import frame_path
from hydranet.rig import camera_sizes

CONFIDENT = 0.3  # a prediction counts at this score
MATCH_IOU = 0.5
HARD_SHARE = 0.25  # "hard" frames: the top quarter by error among the frames the model detects on


class EvaluationError(ValueError):
    """A fleet's truth that exists but cannot be read; one line naming the file."""


@dataclass(frozen=True)
class Precision:
    """A trigger's precision on one measure: over its n fired frames, against the base rate (the same
    measure over all the frames it could fire on); lift = precision / base rate (1: no better than random).
    NaN, shown "-": precision when n is 0 (nothing fired, or no fired frame to measure on), base rate
    when there is no frame to measure, lift when either is NaN or the base rate is 0 (no positives at all)."""
    precision: float
    base: float
    n: int

    @property
    def lift(self) -> float:
        return self.precision / self.base if math.isfinite(self.precision) and self.base > 0 else math.nan

    @classmethod
    def of(cls, fired: Sequence[float], every: Sequence[float]) -> Precision:
        return cls(float(np.mean(fired)) if len(fired) else math.nan, float(np.mean(every)) if len(every) else math.nan,
                   len(fired))


@dataclass
class RunTruth:
    """The truth of one shadow run's ok frames."""
    run_id: int
    fleet: Path
    errors: dict[int, float]  # frame id -> 1 - F1 of det2d
    clip_of: dict[int, str]  # frame id -> clip name
    rare: dict[str, set[int]]  # rare scenario present in the fleet -> its frame ids
    detected: dict[int, bool]  # frame id -> the model has a confident det2d box on it

    @property
    def scenarios(self) -> list[str]:
        return sorted(self.rare)

    @property
    def any_rare(self) -> set[int]:
        return set().union(*self.rare.values()) if self.rare else set()

    def hardness(self) -> dict[int, float]:
        """Per frame the model detects on: 1 in the top HARD_SHARE by error, 0 below, and for the frames tied
        at the edge (places left) / (tied frames); the weights sum to HARD_SHARE x those frames."""
        ids = [f for f in self.errors if self.detected.get(f)]
        if not ids:
            return {}
        e = np.round(np.asarray([self.errors[f] for f in ids], np.float64), 12)  # equal rationals, equal floats
        k = HARD_SHARE * len(ids)
        edge = np.sort(e)[::-1][math.ceil(k) - 1]  # the error at the last place of the top quarter
        above, tied = int((e > edge).sum()), int((e == edge).sum())
        w = np.where(e > edge, 1.0, np.where(e == edge, (k - above) / tied, 0.0))
        return dict(zip(ids, w.tolist()))

    def rare_precision(self, fired: Iterable[int]) -> Precision:
        """Share of `fired` frames in rare-scenario clips, against that share over all the run's frames."""
        rare = self.any_rare
        fired = [int(f) for f in fired]
        return Precision.of([float(f in rare) for f in fired], [float(f in rare) for f in self.errors])

    def hard_precision(self, fired: Iterable[int]) -> Precision:
        """Share of the fired frames the model detects on that are hard (`hardness`), against HARD_SHARE."""
        w = self.hardness()
        return Precision.of([w[int(f)] for f in fired if int(f) in w], list(w.values()))

    def recall(self, fired: Iterable[int]) -> dict[str, float]:
        """Per rare scenario: share of its frames in `fired` (NaN for a scenario without frames)."""
        fired = {int(f) for f in fired}
        return {r: len(fired & self.rare[r]) / len(self.rare[r]) if self.rare[r] else math.nan for r in self.scenarios}

    def rare_rate(self, ids: Sequence[int]) -> float:
        rare = self.any_rare
        return float(np.mean([int(f) in rare for f in ids])) if len(ids) else math.nan

    def mean_error(self, ids: Sequence[int]) -> float:
        return float(np.mean([self.errors[int(f)] for f in ids])) if len(ids) else math.nan


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise EvaluationError(f"{path} is missing: the fleet's {what} cannot be read; regenerate the fleet") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise EvaluationError(f"{path} is unreadable ({type(e).__name__}: {e}); regenerate the fleet") from None


def frame_errors(fleet: Path, frames: Mapping[int, tuple[str, str]], predictions: Mapping[int, Mapping],
                 cams: Sequence[str], model_size: tuple[int, int]) -> dict[int, float]:
    """Per frame id: 1 - F1 of its det2d predictions (model pixels, scaled to each camera image) against
    fleet/scenes/<clip>/<dir>/labels.json. frames: {frame id: (clip, frame dir)}."""
    meta = _read_json(fleet / "dataset.json", "cameras")
    sizes = camera_sizes(meta["rig"], f"{fleet / 'dataset.json'} rig")  # {name: (width, height)}
    out = {}
    for fid, (clip, fdir) in frames.items():
        path = frame_path(fleet, clip, fdir, "labels.json", where=f"catalog frame {fid} of fleet {fleet}",
                          error=EvaluationError)
        labels = _read_json(path, "labels")
        tp = n_p = n_g = 0
        for n, cam in enumerate(cams):
            w, h = sizes[cam]
            try:
                gt = np.asarray([b["bbox"] for b in labels["cameras"][cam]["boxes2d"]], np.float64).reshape(-1, 4)
            except (KeyError, TypeError, ValueError) as e:
                raise EvaluationError(f"{path}: no 2D boxes of camera {cam} ({type(e).__name__}: {e}); regenerate the fleet") from None
            p = predictions[fid]["det2d"][n]
            keep = np.asarray(p["scores"]) >= CONFIDENT
            scale = np.array([w / model_size[1], h / model_size[0]] * 2)  # model pixels -> camera pixels
            pb = np.asarray(p["boxes"], np.float64).reshape(-1, 4)[keep] * scale
            n_p, n_g = n_p + len(pb), n_g + len(gt)
            if len(pb) and len(gt):
                iou = box_iou(pb, gt)
                while iou.size and iou.max() >= MATCH_IOU:  # greedy one-to-one, best IoU first
                    i, j = np.unravel_index(iou.argmax(), iou.shape)
                    tp += 1
                    iou[i, :], iou[:, j] = 0, 0
        out[int(fid)] = 0.0 if n_p + n_g == 0 else 1 - 2 * tp / (n_p + n_g)
    return out


def load_run_truth(cat: Catalog, run_id: int) -> tuple[RunTruth | None, str]:
    """(the run's truth, "") or (None, why there is none). Raises EvaluationError for truth files that
    exist but cannot be read."""
    from deploy.metadata import MetadataError, ModelRig, read_metadata

    info = cat.run_info(run_id)
    fleet = Path(info["fleet"])
    truth_path = fleet / TRUTH_FILE
    if not truth_path.is_file():
        return None, f"fleet {fleet} has no {TRUTH_FILE} (not a sim fleet, or moved): precision and recall need it"
    try:
        md = read_metadata(info["model"])
        rig = ModelRig.from_metadata(md, str(info["model"]))
    except (OSError, MetadataError, ValueError) as e:
        return None, f"model {info['model']} of shadow run {run_id} cannot be read ({str(e)[:120]}): its image size is needed"
    if "det2d" not in md["heads"]:
        return None, f"model {info['model']} has no det2d head: the per-frame error (1 - F1 of det2d) is undefined"
    truth = _read_json(truth_path, "scenario tags")
    clips = truth.get("clips") if isinstance(truth, dict) else None
    if not isinstance(clips, dict):
        raise EvaluationError(f"{truth_path} has no 'clips' object; regenerate the fleet")
    table = cat.table(run_id)
    dirs = dict(cat.db.execute("SELECT f.id, f.dir FROM frames f JOIN clips c ON f.clip_id = c.id JOIN shadow_runs r "
                               "ON c.fleet_id = r.fleet_id WHERE r.id = ?", (run_id,)).fetchall())
    fids = [int(f) for f in table["frame_id"]]
    clip_of = {f: str(c) for f, c in zip(fids, table["clip"])}
    missing = sorted({c for c in clip_of.values() if c not in clips})
    if missing:
        raise EvaluationError(f"{truth_path} has no tags for clip {missing[0]}; regenerate the fleet")
    preds = cat.predictions(run_id, fids)
    cams = cat.run_model(run_id)[1] or list(rig.names)  # the cameras the run ran (a subset on a fleet with fewer)
    errors = frame_errors(fleet, {f: (clip_of[f], dirs[f]) for f in fids}, preds, cams, rig.image_size)
    names = sorted({r for c in clips.values() for r in c.get("rare", [])})
    rare = {r: {f for f in fids if r in clips[clip_of[f]].get("rare", [])} for r in names}
    n_cams = len(cams)
    detected = {f: any((np.asarray(p["scores"]) >= CONFIDENT).any() for p in preds[f]["det2d"][:n_cams]) for f in fids}
    return RunTruth(run_id, fleet, errors, clip_of, rare, detected), ""


# -- tables ------------------------------------------------------------------------------------------
@dataclass
class TriggerRow:
    trigger: str
    version: int
    fired: int  # its hits (at most its quota)
    fires: int | None = None  # frames it fires on over the run, quota aside (None: the run's table not given)
    frames: int | None = None  # the run's frames
    degenerate: str | None = None  # why it fires on more than half the frames (None: it does not)
    rare: Precision | None = None  # None: no truth
    hard: Precision | None = None
    recall: dict[str, float] | None = None


def trigger_rows(triggers: Sequence[Any], hits: Mapping[str, Sequence[tuple[int, float]]], truth: RunTruth | None,
                 table: Mapping[str, Any] | None = None) -> list[TriggerRow]:
    """One row per trigger (`data_engine.triggers.Trigger`), measured where the truth exists; with the
    run's `table` (triggers.run_table) also the frames it fires on and whether it is degenerate."""
    from data_engine.triggers import degenerate, firing_share

    rows = []
    for t in triggers:
        fired = [f for f, _ in hits.get(t.name, [])]
        row = TriggerRow(t.name, int(t.version), len(fired))
        if table is not None:
            row.fires, row.frames = firing_share(t, table)
            row.degenerate = degenerate(t, table)
        if truth is not None:
            row.rare, row.hard, row.recall = truth.rare_precision(fired), truth.hard_precision(fired), truth.recall(fired)
        rows.append(row)
    return rows


def _num(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.2f}"


def _share(r: TriggerRow) -> str:
    return "-" if r.fires is None else f"{r.fires} ({100 * r.fires / max(r.frames, 1):.0f}%)"


def _prec(p: Precision) -> list[str]:
    return [_num(p.precision), _num(p.base), _num(p.lift), str(p.n)]


def trigger_markdown(rows: Sequence[TriggerRow], truth: RunTruth | None) -> str:
    """The trigger table as markdown: trigger, version, fired (its hits), fires on (frames over the run,
    quota aside), where the truth exists precision / base rate / lift / n of the rare and hard measures
    and recall per rare scenario, and a note: DEGENERATE and why."""
    sc = truth.scenarios if truth is not None else []
    head = ["trigger", "version", "fired", "fires on"]
    if truth is not None:
        head += ["rare: precision", "base", "lift", "n", "hard: precision", "base", "lift", "n", *[f"recall {s}" for s in sc]]
    head += ["note"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 2) + "---|"]
    for r in rows:
        cells = [r.trigger, str(r.version), str(r.fired), _share(r)]
        if truth is not None:
            cells += [*_prec(r.rare), *_prec(r.hard), *[_num(r.recall[s]) for s in sc]]
        cells += [f"DEGENERATE: {r.degenerate}" if r.degenerate else ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def truth_summary(truth: RunTruth) -> str:
    n = len(truth.errors)
    rare = truth.any_rare
    det = [f for f in truth.errors if truth.detected.get(f)]
    saturated = sum(e >= 1.0 for e in truth.errors.values())
    return (f"truth: {n} frames, {len(rare)} in rare-scenario clips ({100 * len(rare) / max(n, 1):.1f}%: "
            + (", ".join(f"{s} {len(truth.rare[s])}" for s in truth.scenarios) or "none")
            + f"); mean error {_num(truth.mean_error(list(truth.errors)))}, error 1.0 on {saturated} of {n}; the model "
            f"detects on {len(det)} frames (hard = their top {100 * HARD_SHARE:.0f}% by error; lift 1 = no better than random)")
