"""Fixture writers for the Cityscapes and TuSimple readers: small hand-made frames written in each dataset's
official layout (never dataset files: their licences forbid copying), with the truth they encode.

- `city_frame(seed)`: a 48x96 street (road below, sky above) with hand-placed instances, and the boxes and
  ignore regions they must give: `{"image", "label_ids", "instance_ids", "boxes", "dontcare", "road"}`.
- `write_cityscapes(root, frames, split)`: leftImg8bit/, gtFine/ (labelIds, instanceIds) and camera/ files.
- `TUSIMPLE_RECORDS`, `write_tusimple(root)`: clips/<date>/<clip>/20.jpg and label_data_0313.json /
  label_data_0531.json lines, with the polylines each lane must give (`TUSIMPLE_POLYLINES`).
- `CULANE_LANES`, `write_culane(root)`: driver_*/<clip>.MP4/<frame>.jpg with its .lines.txt, list/test.txt and
  list/test_split/test8_night.txt.
"""
from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

CITY_HW = (48, 96)
K_CITY = {"fx": 2262.52, "fy": 2265.30, "u0": 1096.98, "v0": 513.14}  # Cityscapes' published order of magnitude


def city_frame(seed: int = 0) -> dict:
    """One hand-made Cityscapes frame (module docstring); ids as cityscapesScripts' labels.py defines them."""
    H, W = CITY_HW
    rng = np.random.default_rng(seed)
    label = np.full((H, W), 23, np.uint8)  # sky
    label[24:] = 7  # road
    label[24:, :6] = 8  # sidewalk at the left edge
    inst = label.astype(np.uint16).copy()  # stuff classes: the label id itself

    def put(lid, iid, rows, cols):
        label[rows, cols] = lid
        inst[rows, cols] = iid

    put(26, 26000, slice(20, 30), slice(10, 30))  # a car
    put(26, 26001, slice(22, 28), slice(50, 55))  # a car seen in two parts around a pole
    put(26, 26001, slice(22, 28), slice(60, 65))
    put(17, 17, slice(10, 40), slice(55, 60))  # the pole (no instances)
    put(24, 24000, slice(15, 35), slice(70, 74))  # a person
    put(25, 25000, slice(14, 26), slice(80, 84))  # a rider on ...
    put(33, 33000, slice(26, 34), slice(78, 88))  # ... a bicycle
    put(26, 26, slice(30, 33), slice(36, 40))  # a car group: two separate regions
    put(26, 26, slice(36, 40), slice(40, 46))
    put(31, 31000, slice(2, 10), slice(0, 20))  # a train (the sim has none)
    image = rng.integers(0, 255, (H, W, 3), np.uint8)
    boxes = [([10, 20, 30, 30], "car", "car"), ([50, 22, 65, 28], "car", "car"), ([70, 15, 74, 35], "pedestrian", "person"),
             ([80, 14, 84, 26], "rider", "rider"), ([78, 26, 88, 34], "bicycle", "bicycle")]
    dontcare = [("train", [0, 2, 20, 10]), ("cargroup", [36, 30, 40, 33]), ("cargroup", [40, 36, 46, 40])]
    return {"image": image, "label_ids": label, "instance_ids": inst, "road": label == 7,
            "boxes": [(list(map(float, b)), c, n) for b, c, n in boxes],
            "dontcare": [(n, list(map(float, b))) for n, b in dontcare]}


def city_stem(city: str, k: int) -> str:
    return f"{city}_{k:06d}_000019"


def write_cityscapes(root, frames: list[dict], split: str = "val", camera: bool = True) -> Path:
    """`frames` (city_frame dicts) as <city>_<k>_000019 of city 'aachen' (even k) and 'bremen' (odd k)."""
    root = Path(root)
    for k, f in enumerate(frames):
        city = ("aachen", "bremen")[k % 2]
        stem = city_stem(city, k)
        for sub in ("leftImg8bit", "gtFine") + (("camera",) if camera else ()):
            (root / sub / split / city).mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(root / "leftImg8bit" / split / city / f"{stem}_leftImg8bit.png"),
                    cv2.cvtColor(f["image"], cv2.COLOR_RGB2BGR))
        cv2.imwrite(str(root / "gtFine" / split / city / f"{stem}_gtFine_labelIds.png"), f["label_ids"])
        cv2.imwrite(str(root / "gtFine" / split / city / f"{stem}_gtFine_instanceIds.png"), f["instance_ids"])
        if camera:
            cam = {"extrinsic": {"baseline": 0.21, "pitch": 0.04, "roll": 0.0, "x": 1.7, "y": 0.1, "yaw": -0.02,
                                 "z": 1.22}, "intrinsic": K_CITY}
            (root / "camera" / split / city / f"{stem}_camera.json").write_text(json.dumps(cam))
    return root


# -- TuSimple ---------------------------------------------------------------------------------------
TUSIMPLE_HW = (72, 128)
H_SAMPLES = [30, 40, 50, 60, 70]
TUSIMPLE_RECORDS = {
    "label_data_0313.json": [
        {"raw_file": "clips/0313-1/60/20.jpg", "h_samples": H_SAMPLES,
         "lanes": [[-2, 20, 30, 40, -2], [60, 62, -2, 66, 68], [-2, -2, -2, -2, -2]]},
        {"raw_file": "clips/0313-1/120/20.jpg", "h_samples": H_SAMPLES, "lanes": [[100, 98, 96, 94, 92]]},
    ],
    "label_data_0531.json": [
        {"raw_file": "clips/0531/1492626047222176976_0/20.jpg", "h_samples": H_SAMPLES, "lanes": [[5, 15, 25, 35, 45]]},
    ],
}
# per raw_file: the lanes2d each record must give (lane_id, points)
TUSIMPLE_POLYLINES = {
    "clips/0313-1/60/20.jpg": [(1, [[20, 40], [30, 50], [40, 60]]), (2, [[60, 30], [62, 40]]), (2, [[66, 60], [68, 70]])],
    "clips/0313-1/120/20.jpg": [(1, [[100, 30], [98, 40], [96, 50], [94, 60], [92, 70]])],
    "clips/0531/1492626047222176976_0/20.jpg": [(1, [[5, 30], [15, 40], [25, 50], [35, 60], [45, 70]])],
}


def write_tusimple(root, records: dict | None = None) -> Path:
    """TuSimple's train_set layout: each record's 20.jpg (a dark road with its lanes painted white) and the
    label files, one JSON object a line."""
    root = Path(root)
    for name, recs in (records or TUSIMPLE_RECORDS).items():
        for rec in recs:
            img = np.full(TUSIMPLE_HW + (3,), 60, np.uint8)
            for lane in rec["lanes"]:
                for x, y in zip(lane, rec["h_samples"]):
                    if x >= 0:
                        cv2.circle(img, (int(x), int(y)), 2, (255, 255, 255), -1)
            path = root / rec["raw_file"]
            path.parent.mkdir(parents=True, exist_ok=True)
            cv2.imwrite(str(path), img)
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in recs))
    return root


# -- CULane -----------------------------------------------------------------------------------------
CULANE_HW = (59, 164)  # CULane's 590x1640, a tenth
# per image path: its lanes, "x y x y ..." rows of its .lines.txt (bottom up, as CULane writes them); the second
# lane of the first frame runs on past the right edge (x 170 > 163), as CULane's splines do; the last frame has none
CULANE_LANES = {
    "driver_23_30frame/05151649_0422.MP4/00000.jpg": [[20.5, 58, 40, 48, 60.25, 38], [120, 58, 150, 48, 170, 38]],
    # CULane's splines start at row = height (59 here) and may start left of the image (x -6): cut at both edges
    "driver_23_30frame/05151649_0422.MP4/00030.jpg": [[80, 58, 82, 48, 84, 38, 86, 28], [-6, 59, 4, 49, 14, 39]],
    "driver_161_90frame/06030819_0755.MP4/00090.jpg": [],
}
CULANE_LISTS = {"list/test.txt": list(CULANE_LANES)[1:], "list/test_split/test8_night.txt": list(CULANE_LANES)[2:]}


def write_culane(root) -> Path:
    """CULane's layout: each frame a dark road with its lanes painted white, its .lines.txt (an empty file for
    the frame without lanes), and two list files (image paths with a leading slash, as CULane's)."""
    root = Path(root)
    for rel, lanes in CULANE_LANES.items():
        img = np.full(CULANE_HW + (3,), 60, np.uint8)
        for lane in lanes:
            pts = np.round(np.asarray(lane).reshape(-1, 2)).astype(np.int32)
            cv2.polylines(img, [pts], False, (255, 255, 255), 2)
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(path), img)
        path.with_name(path.stem + ".lines.txt").write_text("".join(" ".join(f"{v:g}" for v in lane) + " \n"
                                                                     for lane in lanes))
    for name, rels in CULANE_LISTS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("".join(f"/{r}\n" for r in rels))
    return root
