"""nuScenes detection metrics: mAP over centre distances, TP errors (mATE, mASE, mAOE, mAVE, mAAE) and NDS.

A numpy re-implementation of the official nuscenes-devkit `DetectionEval` with the
'detection_cvpr_2019' configuration (Caesar et al., "nuScenes: A multimodal dataset for autonomous
driving", CVPR 2020, section 4.1), checked figure by figure against the devkit in
tests/test_nuscenes_metrics.py. Loading and filtering live in `nuscenes_data.py`.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hydranet.metrics.nuscenes_data import (DETECTION_NAMES, OFFICIAL_SPLITS, Boxes, EvalBox, NuScenesEvalError,
                                            NuScenesTables, add_center_dist, filter_boxes, load_predictions,
                                            quaternion_matrix)

TP_METRICS = ("trans_err", "scale_err", "orient_err", "vel_err", "attr_err")
TP_SHORT = {"trans_err": "mATE", "scale_err": "mASE", "orient_err": "mAOE", "vel_err": "mAVE", "attr_err": "mAAE"}
NELEM = 101  # recall points 0, 0.01, ..., 1
RECALLS = np.linspace(0, 1, NELEM)
RECALLS.flags.writeable = False  # shared by every MetricData


@dataclass(frozen=True)
class DetectionConfig:
    """The devkit's DetectionConfig; the defaults are 'detection_cvpr_2019'."""
    class_range: dict = field(default_factory=lambda: {
        "car": 50, "truck": 50, "bus": 50, "trailer": 50, "construction_vehicle": 50, "pedestrian": 40,
        "motorcycle": 40, "bicycle": 40, "traffic_cone": 30, "barrier": 30})
    dist_fcn: str = "center_distance"
    dist_ths: tuple = (0.5, 1.0, 2.0, 4.0)
    dist_th_tp: float = 2.0
    min_recall: float = 0.1
    min_precision: float = 0.1
    max_boxes_per_sample: int = 500
    mean_ap_weight: int = 5

    def __post_init__(self):
        if set(self.class_range) != set(DETECTION_NAMES):
            raise ValueError(f"class_range must name exactly {', '.join(DETECTION_NAMES)}")
        if self.dist_th_tp not in self.dist_ths:
            raise ValueError(f"dist_th_tp {self.dist_th_tp} must be one of dist_ths {self.dist_ths}")
        if self.dist_fcn != "center_distance":
            raise ValueError(f"dist_fcn {self.dist_fcn!r}: only 'center_distance' is implemented")

    @classmethod
    def from_json(cls, path) -> "DetectionConfig":
        """A devkit config JSON (nuscenes/eval/detection/configs/*.json)."""
        with open(path) as f:
            d = json.load(f)
        return cls(**{**d, "dist_ths": tuple(d["dist_ths"])})

    def serialize(self) -> dict:
        return {**asdict(self), "dist_ths": list(self.dist_ths)}


@dataclass
class MetricData:
    """Precision, confidence and TP errors at the 101 recall points (the devkit's DetectionMetricData)."""
    recall: np.ndarray
    precision: np.ndarray
    confidence: np.ndarray
    errors: dict  # TP metric name -> (101,)

    @classmethod
    def no_predictions(cls) -> "MetricData":
        return cls(RECALLS, np.zeros(NELEM), np.zeros(NELEM), {m: np.ones(NELEM) for m in TP_METRICS})

    @property
    def empty(self) -> bool:
        """Precision 0 at every recall point (no prediction, or none matched): AP 0."""
        return not self.precision.any()

    @property
    def max_recall_ind(self) -> int:
        nz = np.nonzero(self.confidence)[0]
        return 0 if len(nz) == 0 else int(nz[-1])


def yaw_of(q) -> float:
    v = quaternion_matrix(q)[:, 0]
    return float(np.arctan2(v[1], v[0]))


def angle_diff(x: float, y: float, period: float) -> float:
    diff = (x - y + period / 2) % period - period / 2
    if diff > np.pi:
        diff = diff - 2 * np.pi
    return diff


def scale_iou(gt: EvalBox, pred: EvalBox) -> float:
    if not (np.all(gt.size > 0) and np.all(pred.size > 0)):
        raise NuScenesEvalError(f"sample {pred.sample_token}: box sizes must be > 0 (got {pred.size.tolist()} "
                                f"matched to GT {gt.size.tolist()})")
    inter = np.prod(np.minimum(gt.size, pred.size))
    return float(inter / (np.prod(gt.size) + np.prod(pred.size) - inter))


def cummean(x: np.ndarray) -> np.ndarray:
    """Cumulative mean ignoring NaN along the first axis (a (N,) array, or (N, K): each column alone); a column
    all NaN -> ones."""
    x = np.asarray(x, float)
    sums = np.nancumsum(x, axis=0)
    nan = np.isnan(x)
    counts = np.cumsum(~nan, axis=0)
    out = np.divide(sums, counts, out=np.zeros_like(sums), where=counts != 0)
    out[..., nan.all(axis=0)] = 1.0
    return out


def match_class(gt: Boxes, pred: Boxes, class_name: str, dist_th: float) -> tuple[int, np.ndarray, np.ndarray, dict]:
    """Greedy matching by descending score on xy centre distance < dist_th (nuscenes.eval.detection.algo):
    (number of GT boxes of the class, confidences (P,), match flags (P,) bool, {TP metric: (P,) error,
    NaN where unmatched}) of the class's predictions in list order (samples in dict order). Matching
    never crosses samples, so the flags of one sample's boxes are the same alone as among all samples."""
    npos = sum(1 for bs in gt.values() for b in bs if b.detection_name == class_name)
    preds = [b for bs in pred.values() for b in bs if b.detection_name == class_name]
    confs = np.array([b.detection_score for b in preds], dtype=float)
    flags = np.zeros(len(preds), bool)
    errors = {m: np.full(len(preds), np.nan) for m in TP_METRICS}
    if npos == 0:
        return 0, confs, flags, errors
    order = np.lexsort((np.arange(len(preds)), confs))[::-1]  # score desc, ties: later box first (as the devkit)
    gt_of = {}  # sample -> (indices of this class's GT, their xy)
    for tok, bs in gt.items():
        idx = [i for i, b in enumerate(bs) if b.detection_name == class_name]
        gt_of[tok] = (idx, np.array([bs[i].translation[:2] for i in idx]).reshape(-1, 2), np.zeros(len(idx), bool))
    period = np.pi if class_name == "barrier" else 2 * np.pi
    for k in order:
        p = preds[k]
        idx, xy, taken = gt_of.get(p.sample_token, ([], np.zeros((0, 2)), np.zeros(0, bool)))
        if not len(idx):
            continue
        d = np.sqrt(np.sum((xy - p.translation[:2]) ** 2, axis=1))
        d[taken] = np.inf
        j = int(np.argmin(d))  # first of equal minima, as the devkit's strict '<'
        if not d[j] < dist_th:
            continue
        taken[j] = flags[k] = True
        g = gt[p.sample_token][idx[j]]
        errors["trans_err"][k] = float(np.linalg.norm(p.translation[:2] - g.translation[:2]))
        errors["vel_err"][k] = float(np.linalg.norm(p.velocity - g.velocity))
        errors["scale_err"][k] = 1 - scale_iou(g, p)
        errors["orient_err"][k] = abs(angle_diff(yaw_of(g.rotation), yaw_of(p.rotation), period))
        errors["attr_err"][k] = np.nan if g.attribute_name == "" else 1 - float(g.attribute_name == p.attribute_name)
    return npos, confs, flags, errors


def metric_data(npos: int, confs: np.ndarray, flags: np.ndarray, errors: dict) -> MetricData:
    """Precision, confidence and TP errors at the 101 recall points from `match_class`'s pieces (of one
    sample or many concatenated in sample order: a per-frame state, docs/data_engine.md). `errors` may be
    empty: AP needs only the precision (`state_metrics` passes the errors at dist_th_tp alone)."""
    if npos == 0 or not np.any(flags):
        return MetricData.no_predictions()
    confs, flags = np.asarray(confs, float), np.asarray(flags, bool)
    order = np.lexsort((np.arange(len(confs)), confs))[::-1]
    conf, hit = confs[order], flags[order]
    tp = np.cumsum(hit).astype(float)
    fp = np.arange(1, len(tp) + 1) - tp
    prec, rec = tp / (fp + tp), tp / float(npos)
    prec = np.interp(RECALLS, rec, prec, right=0)
    match_conf = conf[hit]
    conf = np.interp(RECALLS, rec, conf, right=0)
    errs = {}
    if errors:  # the running mean of each TP error over the matches, read at the recall points' confidences
        means = cummean(np.stack([np.asarray(v, float) for v in errors.values()], axis=1)[order][hit])[::-1]  # (M, K)
        errs = {m: np.interp(conf[::-1], match_conf[::-1], means[:, i])[::-1] for i, m in enumerate(errors)}
    return MetricData(RECALLS, prec, conf, errs)


def accumulate(gt: Boxes, pred: Boxes, class_name: str, dist_th: float) -> MetricData:
    """Greedy matching by descending score on xy centre distance < dist_th (nuscenes.eval.detection.algo)."""
    return metric_data(*match_class(gt, pred, class_name, dist_th))


def calc_ap(md: MetricData, min_recall: float, min_precision: float) -> float:
    if md.empty:  # precision 0 at every recall point (a shortcut: the bootstrap computes this thousands of times)
        return 0.0
    prec = np.copy(md.precision)[round(100 * min_recall) + 1:] - min_precision
    prec[prec < 0] = 0
    return float(np.mean(prec)) / (1.0 - min_precision)


def calc_tp(md: MetricData, min_recall: float, metric: str) -> float:
    first, last = round(100 * min_recall) + 1, md.max_recall_ind
    if last < first:
        return 1.0
    return float(np.mean(md.errors[metric][first:last + 1]))


@dataclass
class DetectionMetrics:
    """Per class AP at each distance threshold and TP errors; summaries as properties (devkit names)."""
    cfg: DetectionConfig
    label_aps: dict      # class -> {dist_th: AP}
    label_tp_errors: dict  # class -> {metric: error or NaN}
    eval_time: float = 0.0
    meta: dict | None = None

    @property
    def mean_dist_aps(self) -> dict:
        return {c: float(np.mean(list(d.values()))) for c, d in self.label_aps.items()}

    @property
    def mean_ap(self) -> float:
        return float(np.mean(list(self.mean_dist_aps.values())))

    @property
    def tp_errors(self) -> dict:
        return {m: float(np.nanmean([self.label_tp_errors[c][m] for c in self.cfg.class_range])) for m in TP_METRICS}

    @property
    def tp_scores(self) -> dict:
        return {m: max(0.0, 1.0 - e) for m, e in self.tp_errors.items()}

    @property
    def nd_score(self) -> float:
        total = self.cfg.mean_ap_weight * self.mean_ap + float(np.sum(list(self.tp_scores.values())))
        return total / float(self.cfg.mean_ap_weight + len(TP_METRICS))

    def serialize(self) -> dict:
        """The structure of the devkit's metrics_summary.json (distance keys as strings, as json.dump writes them)."""
        out = {"label_aps": {c: {str(float(t)): ap for t, ap in d.items()} for c, d in self.label_aps.items()},
               "mean_dist_aps": self.mean_dist_aps, "mean_ap": self.mean_ap,
               "label_tp_errors": self.label_tp_errors, "tp_errors": self.tp_errors, "tp_scores": self.tp_scores,
               "nd_score": self.nd_score, "eval_time": self.eval_time, "cfg": self.cfg.serialize()}
        if self.meta is not None:
            out["meta"] = dict(self.meta)
        return out


def evaluate_boxes(gt: Boxes, pred: Boxes, cfg: DetectionConfig | None = None) -> tuple[DetectionMetrics, dict]:
    """Metrics from already loaded and filtered boxes -> (metrics, {(class, dist_th): MetricData})."""
    cfg = cfg or DetectionConfig()
    start = time.time()
    data = {(c, th): accumulate(gt, pred, c, th) for c in cfg.class_range for th in cfg.dist_ths}
    metrics = detection_metrics(data, cfg)
    metrics.eval_time = time.time() - start
    return metrics, data


def detection_metrics(data: dict, cfg: DetectionConfig) -> DetectionMetrics:
    """AP per class and distance and TP errors from {(class, dist_th): MetricData} (`accumulate`)."""
    aps, tps = {}, {}
    for c in cfg.class_range:
        aps[c] = {th: calc_ap(data[(c, th)], cfg.min_recall, cfg.min_precision) for th in cfg.dist_ths}
        md = data[(c, cfg.dist_th_tp)]
        tps[c] = {}
        for m in TP_METRICS:
            if (c == "traffic_cone" and m in ("attr_err", "vel_err", "orient_err")) or \
                    (c == "barrier" and m in ("attr_err", "vel_err")):
                tps[c][m] = float("nan")
            else:
                tps[c][m] = calc_tp(md, cfg.min_recall, m)
    return DetectionMetrics(cfg, aps, tps)


def sample_state(token: str, gt: list, pred: list, cfg: DetectionConfig) -> dict[str, Any]:
    """The nuScenes detection pieces of sample `token` (its filtered GT and predicted EvalBoxes): per class
    with GT or predictions, "npos", the predictions' "conf", "hit" (bit i: matched at cfg.dist_ths[i])
    and "err" (TP errors at dist_th_tp, None where unmatched); `state_metrics` gives the metrics of
    any list of them."""
    out: dict[str, Any] = {}
    one_gt, one_pred = {token: gt}, {token: pred}
    for c in cfg.class_range:
        if not any(b.detection_name == c for b in gt) and not any(b.detection_name == c for b in pred):
            continue
        entry: dict[str, Any] = {}
        hits = None
        for i, th in enumerate(cfg.dist_ths):
            npos, conf, flags, errors = match_class(one_gt, one_pred, c, th)
            hits = flags.astype(np.int64) << i if hits is None else hits | (flags.astype(np.int64) << i)
            if th == cfg.dist_th_tp:
                entry["err"] = [[None if np.isnan(errors[m][k]) else float(errors[m][k]) for m in TP_METRICS]
                                for k in range(len(conf))]
        entry.update({"npos": int(npos), "conf": conf.tolist(), "hit": hits.tolist()})
        out[c] = entry
    return out


def _entry_arrays(e: dict) -> dict:
    """One class's entry of a `sample_state` (JSON lists) as numpy arrays (merged entries already are)."""
    if isinstance(e["conf"], np.ndarray):
        return e
    err = np.asarray([[np.nan if v is None else v for v in row] for row in e["err"]], float)
    return {"npos": e["npos"], "conf": np.asarray(e["conf"], float), "hit": np.asarray(e["hit"], np.int64),
            "err": err.reshape(-1, len(TP_METRICS))}


def merge_sample_states(states: list) -> dict[str, Any]:
    """Samples' `sample_state`s as one (numpy arrays, concatenated in sample order): `state_metrics` of it is
    that of the list."""
    out: dict[str, Any] = {}
    for s in states:
        for c, e in s.items():
            e = _entry_arrays(e)
            if c not in out:
                out[c] = e
            else:
                o = out[c]
                out[c] = {"npos": o["npos"] + e["npos"], "conf": np.concatenate([o["conf"], e["conf"]]),
                          "hit": np.concatenate([o["hit"], e["hit"]]), "err": np.concatenate([o["err"], e["err"]])}
    return out


def state_metrics(states: list, cfg: DetectionConfig) -> DetectionMetrics:
    """The metrics of samples' `sample_state`s, in sample order (equal to `evaluate_boxes` on them)."""
    data = {}
    for c in cfg.class_range:
        mine = [_entry_arrays(s[c]) for s in states if c in s]
        npos = sum(e["npos"] for e in mine)
        conf = np.concatenate([e["conf"] for e in mine]) if mine else np.zeros(0)
        hit = np.concatenate([e["hit"] for e in mine]) if mine else np.zeros(0, np.int64)
        err = np.concatenate([e["err"] for e in mine]) if mine else np.zeros((0, len(TP_METRICS)))
        errors = {m: err[:, i] for i, m in enumerate(TP_METRICS)}
        for i, th in enumerate(cfg.dist_ths):  # the TP errors are the matches' at dist_th_tp: only its data uses them
            data[(c, th)] = metric_data(npos, conf, (hit >> i) & 1 == 1, errors if th == cfg.dist_th_tp else {})
    return detection_metrics(data, cfg)


def evaluate_nuscenes(dataroot, version: str, split: str, results, cfg: DetectionConfig | None = None,
                      tables: NuScenesTables | None = None) -> DetectionMetrics:
    """Evaluate a submission file on a split of a nuScenes-format dataroot, as the devkit's DetectionEval."""
    cfg = cfg or DetectionConfig()
    tables = tables or NuScenesTables(dataroot, version)
    tokens = tables.sample_tokens_of_split(split)
    if not tokens:
        raise NuScenesEvalError(f"split {split!r} has no samples in {tables.table_root}")
    if split in OFFICIAL_SPLITS:  # the devkit reads the whole file and needs the same samples as the split
        pred, meta = load_predictions(results, None, cfg.max_boxes_per_sample)
        if set(pred) != set(tokens):
            raise NuScenesEvalError(f"{results}: its samples ({len(pred)}) differ from split {split!r}'s "
                                    f"({len(tokens)}); official splits need exactly the split's samples")
    else:
        pred, meta = load_predictions(results, tokens, cfg.max_boxes_per_sample)
    gt = tables.load_gt(tokens)
    add_center_dist(tables, pred)
    add_center_dist(tables, gt)
    pred = filter_boxes(tables, pred, cfg.class_range)
    gt = filter_boxes(tables, gt, cfg.class_range)
    metrics, _ = evaluate_boxes(gt, pred, cfg)
    metrics.meta = meta
    return metrics


def format_metrics(m: DetectionMetrics) -> str:
    """The devkit's printed summary: mAP, the 5 TP errors, NDS, then per class AP and TP errors."""
    lines = [f"mAP: {m.mean_ap:.4f}"] + [f"{TP_SHORT[k]}: {v:.4f}" for k, v in m.tp_errors.items()]
    lines += [f"NDS: {m.nd_score:.4f}", "", "Per-class results:",
              "%-20s\t%-6s\t%-6s\t%-6s\t%-6s\t%-6s\t%-6s" % ("Object Class", "AP", "ATE", "ASE", "AOE", "AVE", "AAE")]
    for c, ap in m.mean_dist_aps.items():
        e = m.label_tp_errors[c]
        lines.append("%-20s\t%-6.3f\t%-6.3f\t%-6.3f\t%-6.3f\t%-6.3f\t%-6.3f" % (
            c, ap, e["trans_err"], e["scale_err"], e["orient_err"], e["vel_err"], e["attr_err"]))
    return "\n".join(lines)


def write_metrics(m: DetectionMetrics, path) -> Path:
    """metrics_summary.json-style file (NaN written as NaN, as the devkit's json.dump does)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(m.serialize(), f, indent=2)
    tmp.replace(path)
    return path
