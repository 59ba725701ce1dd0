"""Traffic-sign class and traffic-light state, as a detection head of their own.

A CenterNet-style head (see `det2d.py`; Zhou et al., "Objects as Points", 2019) whose classes are
the sign classes and light states of the dataset meta (`sign_classes`, `light_states`): a stop
sign is detected as class "sign:stop", a red light as "light:red". Ground truth comes from the
`traffic_sign` / `traffic_light` boxes and their `sign_class` / `light_state` attributes.

Back views: a sign or signal head seen from behind shows neither its class nor a lamp; the sim
labels it `attributes.view == "back"` without `sign_class` / `light_state` (docs/dataset_format.md).
Such boxes get a class of their own, "sign:back" / "light:back" (the last two classes), so the
head learns that a grey plate or a dark housing is a sign or a light and is never trained to call
it a front class; the metric reports them apart (`back_accuracy`), and `sign_accuracy` /
`light_accuracy` count front views only.

Metric (attribute accuracy at known locations): every ground-truth sign/light is matched to the
highest-scoring detection of its kind overlapping it at IoU >= 0.5; `accuracy` is the share of
matched ones whose predicted class is right (also per kind), `recall` the share matched at all.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from hydranet import heads
from hydranet.decoding import box_iou
from hydranet.tasks.base import Metric, PrimaryMetric, score_constant
from hydranet.tasks.det2d import Det2dTask, meta_list

SIGN_BOX_CLASS, LIGHT_BOX_CLASS = "traffic_sign", "traffic_light"
BACK = "back"  # the class of a sign / light seen from behind (attributes.view == "back")


class SignsLightsTask(Det2dTask):
    """Detect signs by class and lights by state; classes "sign:<c>" then "light:<s>"."""

    name = "signs_lights"
    spec = heads.SignsLights  # the numpy side: decoder, label keys, blank labels, engine signals
    primary_metric = PrimaryMetric("accuracy")
    baseline_name = "GT boxes, majority class"
    dontcare_ignores = False  # the readers' dontcare regions are vehicles and people, not signs or lights

    def __init__(self, sign_classes: Sequence[str], light_states: Sequence[str], in_channels: int, **det_options: Any):
        self.sign_classes, self.light_states = list(sign_classes), list(light_states)
        if BACK in self.sign_classes or BACK in self.light_states:
            raise ValueError(f"task '{self.name}': '{BACK}' is reserved for back views; rename that sign class / light state")
        classes = [f"sign:{c}" for c in self.sign_classes] + [f"light:{s}" for s in self.light_states]
        super().__init__(classes + [f"sign:{BACK}", f"light:{BACK}"], in_channels, **det_options)

    @classmethod
    def from_meta(cls, meta: Mapping, in_channels: int, **options: Any) -> SignsLightsTask:
        options.setdefault("min_size", 4.0)  # signs are small: 4 px, where det2d's boxes are 6 px
        return cls(meta_list(meta, "sign_classes", cls.name), meta_list(meta, "light_states", cls.name), in_channels,
                   **options)

    def box_label(self, box: Mapping, where: str) -> int | None:
        if box["class"] == SIGN_BOX_CLASS:
            key, values, prefix = "sign_class", self.sign_classes, "sign"
        elif box["class"] == LIGHT_BOX_CLASS:
            key, values, prefix = "light_state", self.light_states, "light"
        else:
            return None
        if box.get("attributes", {}).get("view") == BACK:
            return self.classes.index(f"{prefix}:{BACK}")
        value = box.get("attributes", {}).get(key)
        if value not in values:
            raise ValueError(f"task '{self.name}': {where} has a {box['class']} box (track {box.get('track_id')}) "
                             f"with {key}={value!r}, expected one of {values}")
        return self.classes.index(f"{prefix}:{value}")

    def metric(self) -> AttributeAccuracy:
        return AttributeAccuracy(self.classes)

    def baseline(self, targets: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """The ground-truth boxes, each given the most frequent class of its kind (sign / light)."""
        counts = np.zeros(len(self.classes), np.int64)
        for t in targets:
            for gl in t["gt_labels"]:
                counts += np.bincount(np.asarray(gl, np.int64).reshape(-1), minlength=len(self.classes))
        kind = [c.split(":", 1)[0] for c in self.classes]
        best = {k: max((i for i in range(len(kind)) if kind[i] == k), key=lambda i: counts[i]) for k in set(kind)}

        def predict(t):
            out = []
            for gb, gl in zip(t["gt_boxes"], t["gt_labels"]):
                labels = torch.tensor([best[kind[int(lab)]] for lab in gl.reshape(-1)], dtype=torch.long)
                out.append({"boxes": gb.reshape(-1, 4).float(), "scores": torch.ones(len(labels)), "labels": labels})
            return out

        return score_constant(self, targets, predict)


class AttributeAccuracy(Metric):
    """Sign-class / light-state accuracy of detections matched to ground truth at IoU >= 0.5."""

    def __init__(self, classes: Sequence[str], iou_threshold: float = 0.5):
        self.kind = [c.split(":", 1)[0] for c in classes]  # "sign" or "light" per class id
        self.bucket = [BACK if c.endswith(f":{BACK}") else k for c, k in zip(classes, self.kind)]  # back views apart
        self.iou_threshold = iou_threshold
        self.counts = {k: {"total": 0, "matched": 0, "correct": 0} for k in ("sign", "light", BACK)}
        self._states: list[dict[str, list[int]]] = []  # per image: {bucket: [total, matched, correct]}

    def update(self, decoded: list, targets: Mapping[str, Any]) -> None:
        for det, gb, gl in zip(decoded, targets["gt_boxes"], targets["gt_labels"], strict=True):
            boxes, scores, labels = det["boxes"].cpu(), det["scores"].cpu(), det["labels"].cpu()
            gb, gl = gb.cpu().reshape(-1, 4), gl.cpu().reshape(-1)
            iou = torch.from_numpy(box_iou(gb.numpy(), boxes.numpy()))  # (G, D)
            mine = {k: {"total": 0, "matched": 0, "correct": 0} for k in self.counts}
            for g in range(len(gb)):
                kind = self.kind[int(gl[g])]
                c = mine[self.bucket[int(gl[g])]]
                c["total"] += 1
                same_kind = torch.tensor([self.kind[int(l)] == kind for l in labels], dtype=torch.bool)
                ok = (iou[g] >= self.iou_threshold) & same_kind
                if ok.any():
                    best = torch.where(ok, scores, torch.full_like(scores, -1.0)).argmax()
                    c["matched"] += 1
                    c["correct"] += int(labels[best] == gl[g])
            for k, c in mine.items():
                for key, v in c.items():
                    self.counts[k][key] += v
            self._states.append({k: [c["total"], c["matched"], c["correct"]] for k, c in mine.items()})

    def compute(self) -> dict[str, float]:
        return self._values(self.counts)

    @staticmethod
    def _values(counts: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
        def ratio(a: int, b: int) -> float:
            return a / b if b else float("nan")

        tot = {k: sum(c[k] for c in counts.values()) for k in ("total", "matched", "correct")}
        return {"accuracy": ratio(tot["correct"], tot["matched"]), "recall": ratio(tot["matched"], tot["total"]),
                "sign_accuracy": ratio(counts["sign"]["correct"], counts["sign"]["matched"]),
                "light_accuracy": ratio(counts["light"]["correct"], counts["light"]["matched"]),
                "back_accuracy": ratio(counts[BACK]["correct"], counts[BACK]["matched"])}

    def states(self) -> list[dict[str, list[int]]]:
        return self._states

    def compute_states(self, states: Sequence) -> dict[str, float]:
        counts = {k: {"total": 0, "matched": 0, "correct": 0} for k in self.counts}
        for s in states:
            for k, (total, matched, correct) in ({} if s is None else s).items():
                c = counts[k]
                c["total"], c["matched"], c["correct"] = c["total"] + total, c["matched"] + matched, c["correct"] + correct
        return self._values(counts)
