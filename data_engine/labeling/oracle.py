"""The oracle labeller (default, offline): the sim's exact labels (labels.json) of the selected frames, or, on a
recorded fleet of a labelled dataset (`engine ingest --source dataset`), the dataset's own annotations as a
stand-in oracle for benchmarks (`RecordedFleet.truth`: the heads those annotations supervise ride along as the
payload's "supervises"). A frame the source has no labels for (a nuScenes sweep) is held, never invented; videos
and image sequences have no truth and are refused at send.

It hands a job's labels over only when the job has been sent, and `data_engine.labels` records them
as the job's "labelled" version; training reads accepted versions only, so before that the sim's
truth of a mined frame is invisible to training.

Optional labeller noise models imperfect humans (seeded per frame, so a rerun gives the same label
and the store sees no new version): `jitter_px` (Gaussian sigma of each box edge, pixels),
`miss_small` (rate at which a box smaller than `small_area` px^2 is missed), `confusion` (rate at
which a box gets another label of its kind: object classes among themselves, sign classes among
signs, light states among lights). Noise touches the 2D boxes only; 3D boxes and lanes stay exact.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pathlib import Path

import numpy as np

from data_engine.labeling.base import FetchedLabel, Held, Job, LabelingError, Vocabulary

NO_TRUTH = "no truth: the source has no labels for this frame (an unlabelled sweep)"


@dataclass(frozen=True)
class OracleNoise:
    jitter_px: float = 0.0
    miss_small: float = 0.0
    small_area: float = 256.0
    confusion: float = 0.0
    seed: int = 0

    def __post_init__(self):
        for k in ("jitter_px", "small_area"):
            if not getattr(self, k) >= 0:
                raise LabelingError(f"oracle noise {k} must be >= 0, got {getattr(self, k)}")
        for k in ("miss_small", "confusion"):
            if not 0 <= getattr(self, k) <= 1:
                raise LabelingError(f"oracle noise {k} is a rate in [0, 1], got {getattr(self, k)}")

    @property
    def active(self) -> bool:
        return bool(self.jitter_px or self.miss_small or self.confusion)


class OracleBackend:
    name = "oracle"
    batch = 200
    wants_predictions = False

    def __init__(self, noise: OracleNoise | None = None):
        self.noise = noise or OracleNoise()
        self.labeller = "oracle" if not self.noise.active else (
            f"oracle+noise(jitter={self.noise.jitter_px},miss={self.noise.miss_small},conf={self.noise.confusion},"
            f"seed={self.noise.seed})")

    def send(self, jobs: Sequence[Job]) -> dict[int, str]:
        for j in jobs:
            fleet = _recorded(j.root)
            if fleet is not None and fleet.kind != "dataset":  # videos and image sequences carry no truth to answer with
                raise LabelingError(f"the oracle answers from a source's own labels; fleet {j.root} is {fleet.kind} "
                                    "recordings without any: label it with --backend files or --backend label_studio")
        return {j.id: "oracle" for j in jobs}

    def fetch(self, jobs: Sequence[Job]) -> Iterator[FetchedLabel | Held]:
        for j in jobs:
            if j.state != "sent":
                continue
            fleet = _recorded(j.root)
            if fleet is not None:
                try:
                    truth = fleet.truth(j.clip, j.dir)
                except ValueError as e:
                    raise LabelingError(f"oracle: fleet {j.root} frame {j.clip}/{j.dir}: {e}") from None
                if truth is None:  # an unlabelled sweep: a person would have to label it
                    yield Held(j.id, f"{NO_TRUTH} (frame {j.clip}/{j.dir} of {fleet.source_root})")
                    continue
            else:
                truth = self._sim_truth(j)
            if self.noise.active:
                truth = self.perturb(truth, j)
            yield FetchedLabel(j.id, truth, "oracle", self.labeller)

    @staticmethod
    def _sim_truth(j: Job) -> dict:
        from hydranet.io import read_json

        path = j.folder / "labels.json"
        truth = read_json(path, "the oracle's labels.json", LabelingError, "the fleet moved or lost frames: regenerate it")
        if not isinstance(truth, dict) or not isinstance(truth.get("cameras"), dict):
            raise LabelingError(f"oracle: {path} has no 'cameras'; regenerate the fleet")
        return truth

    def perturb(self, truth: dict, job: Job) -> dict:
        nz = self.noise
        rng = np.random.default_rng([nz.seed, job.frame_id])
        vocab = Vocabulary.from_dataset(job.root)
        names = vocab.names
        groups = {"sign": [n for n in names if n.startswith("sign:")], "light": [n for n in names if n.startswith("light:")],
                  "object": [n for n in names if ":" not in n]}
        for cam in sorted(truth["cameras"]):
            H, W = job.sizes[job.cameras.index(cam)] if cam in job.cameras else (10 ** 6, 10 ** 6)
            kept = []
            for b in truth["cameras"][cam].get("boxes2d") or []:
                x0, y0, x1, y1 = b["bbox"]
                u = rng.random(3)
                if nz.miss_small and (x1 - x0) * (y1 - y0) < nz.small_area and u[0] < nz.miss_small:
                    continue
                if nz.jitter_px:
                    d = rng.normal(0, nz.jitter_px, 4)
                    x0, x1 = sorted((float(np.clip(x0 + d[0], 0, W)), float(np.clip(x1 + d[2], 0, W))))
                    y0, y1 = sorted((float(np.clip(y0 + d[1], 0, H)), float(np.clip(y1 + d[3], 0, H))))
                    if x1 - x0 < 1 or y1 - y0 < 1:
                        x0, y0, x1, y1 = b["bbox"]
                    b = {**b, "bbox": [x0, y0, x1, y1]}
                if nz.confusion and u[1] < nz.confusion:
                    name = vocab.name_of(b)
                    kind = name.split(":")[0] if ":" in name else "object"
                    others = [n for n in groups[kind] if n != name]
                    if others:
                        new = vocab.box_of(others[int(u[2] * len(others))], b["bbox"], "oracle noise")
                        b = {**b, "class": new["class"], "attributes": {**(b.get("attributes") or {}), **new["attributes"]}}
                        if new["attributes"].get("view") == "back":
                            b["attributes"].pop("sign_class", None)
                            b["attributes"].pop("light_state", None)
                kept.append(b)
            truth["cameras"][cam]["boxes2d"] = kept
        return truth


def _recorded(root: str):
    """The recorded fleet at `root` (engine ingest), or None for a sim fleet."""
    from data_engine.fleet import RECORDED_FILE, FleetError, recorded_fleet

    if not (Path(root) / RECORDED_FILE).is_file():
        return None
    try:
        return recorded_fleet(root)
    except FleetError as e:
        raise LabelingError(f"oracle: {e}") from None
