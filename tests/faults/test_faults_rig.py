"""Fault rows of rig calibration files and YAML (issue 21, item 7): a key written twice in a config file, a
rig file or a `--set` value; a K that is not normalised or has a skew; every rig key's shape, type and
finiteness checked before numpy sees it (no "could not broadcast", "Singular matrix", "could not convert
string to float" or "cannot write a non-finite float (nan) to JSON"); non-finite config numbers. Rows run
`hydranet sim generate --rig FILE` (as test_faults_data.py's rig rows: the same camera and command),
`sim generate --config/--set`, `sim preview --data` (a dataset.json rig) and `train --set`. See faultlib.py
for the contract. (The builders are this file's own: tests/test_layering.py keeps test modules from
importing each other.)"""
from __future__ import annotations

import pytest
import yaml
from faultlib import Case, copy_dataset, edit_json, params, run_case

# the fault suite's camera (test_faults_data.CAM): 64x48 like the session dataset
CAM = {"name": "CAM_FRONT", "width": 64, "height": 48, "hfov_deg": 64.0, "translation": [1.7, 0.0, 1.5],
       "ypr_deg": [0.0, 0.0, 0.0]}


def rig_case(id, words, status=2, text=None, patch=None, check=None, **cam):
    """`hydranet sim generate --rig rig.yaml` on `text` (or CAM with `cam` set)."""
    def build(tmp, env):
        path = tmp / "rig.yaml"
        path.write_text(text if text is not None else yaml.safe_dump({"name": "r", "cameras": [{**CAM, **cam}]}))
        return ["sim", "generate", "--rig", path, "--out", tmp / "out" / "ds", "--scenes", "1", "--quiet",
                "--set", "frames_per_scene=1"]
    return Case(id, build, status, words, patch=patch, check=check)


def sim_case(id, sets, words, config=None):
    """`hydranet sim generate` with `--set`s and an optional config file sim.yaml holding `config`."""
    def build(tmp, env):
        argv = ["sim", "generate", "--out", tmp / "out", "--scenes", "1", "--quiet", "--set", "image_width=64",
                "--set", "image_height=48", "--set", "frames_per_scene=1"]
        if config is not None:
            (tmp / "sim.yaml").write_text(config)
            argv += ["--config", tmp / "sim.yaml"]
        for s in sets:
            argv += ["--set", s]
        return argv
    return Case(id, build, 2, words, check=nothing_written)


def meta_case(id, edit, words):
    """`hydranet sim preview --data DS` on the session dataset with its dataset.json edited by `edit`."""
    def build(tmp, env):
        root = copy_dataset(tmp, env)
        edit_json(root / "dataset.json", edit)
        return ["sim", "preview", "--data", root, "--out", tmp / "preview.png"]
    return Case(id, build, 2, words)


FRONT = ("rig.yaml", "CAM_FRONT")  # every rig error names the file and the camera
K_OK = [[50.0, 0.0, 31.5], [0.0, 50.0, 23.5], [0.0, 0.0, 1.0]]
C2E_OK = [[0.0, 0.0, 1.0, 1.7], [-1.0, 0.0, 0.0, 0.0], [0.0, -1.0, 0.0, 1.5], [0.0, 0.0, 0.0, 1.0]]


def rig_text(drop=(), top=None, **cam) -> str:
    """A one-camera rig file: the fault suite's CAM without the keys in `drop`, with `cam` set, and `top`
    top-level keys added."""
    c = {k: v for k, v in {**CAM, **cam}.items() if k not in drop}
    return yaml.safe_dump({"name": "r", "cameras": [c], **(top or {})})


def with_K(K) -> str:
    return rig_text(drop=("hfov_deg",), K=K)


def with_cam2ego(T) -> str:
    return rig_text(drop=("translation", "ypr_deg"), cam2ego=T)


def nothing_written(tmp):
    assert not (tmp / "out").exists(), "a dataset was written for a refused rig"


def binary_rig(mp, tmp):
    """rig.yaml replaced by bytes that are not UTF-8 text (after rig_case wrote it)."""
    (tmp / "rig.yaml").write_bytes(b"\xff\xfe\x00\x81 not text")


def _written(tmp):
    assert (tmp / "out" / "ds" / "dataset.json").is_file(), "the control rig wrote no dataset"


DUPLICATE_FOV = """name: r
cameras:
  - name: CAM_FRONT
    width: 64
    height: 48
    hfov_deg: 64.0
    translation: [1.7, 0.0, 1.5]
    ypr_deg: [0.0, 0.0, 0.0]
    hfov_deg: 20.0
"""
DUPLICATE_CAMERAS = """name: r
cameras:
  - {name: CAM_FRONT, width: 64, height: 48, hfov_deg: 64.0, translation: [1.7, 0.0, 1.5], ypr_deg: [0, 0, 0]}
cameras:
  - {name: CAM_BACK, width: 64, height: 48, hfov_deg: 64.0, translation: [-1.0, 0.0, 1.5], ypr_deg: [180, 0, 0]}
"""
MERGE_CONTROL = """name: r
cameras:
  - &front {name: CAM_FRONT, width: 64, height: 48, hfov_deg: 64.0, translation: [1.7, 0.0, 1.5], ypr_deg: [0, 0, 0]}
  - {<<: *front, name: CAM_BACK, translation: [-1.0, 0.0, 1.5], ypr_deg: [180, 0, 0]}
"""

# -- (a) a key written twice: config files, rig files, --set values ----------------------------------
DUPLICATE_CASES = [
    rig_case("rig-yaml-duplicate-key", ("rig.yaml", "'hfov_deg'", "twice", "line 6", "line 9"), text=DUPLICATE_FOV,
             check=nothing_written),
    rig_case("rig-yaml-duplicate-cameras", ("rig.yaml", "'cameras'", "twice", "line 2", "line 4"), text=DUPLICATE_CAMERAS),
    rig_case("rig-yaml-merge-control", (), status=0, text=MERGE_CONTROL, check=_written),  # a merge may be overridden
    sim_case("config-duplicate-key", [], ("sim.yaml", "'vehicles'", "twice", "line 3", "line 4"),
             config="rig: nuscenes6\ntraffic:\n  vehicles: 3\n  vehicles: 30\n"),
    sim_case("config-duplicate-top-key", [], ("sim.yaml", "'frame_rate_hz'", "twice", "line 1", "line 3"),
             config="frame_rate_hz: 2\nrig: nuscenes6\nframe_rate_hz: 10\n"),
    sim_case("set-duplicate-key", ["traffic={vehicles: 3, vehicles: 30}"], ("override", "'vehicles'", "twice")),
]

# -- (b) K normalised, skew bounded -------------------------------------------------------------------
K_CASES = [
    rig_case("rig-K-last-entry-2", FRONT + ("'K'", "last row must be [0, 0, 1]", "[0.0, 0.0, 2.0]"),
             text=with_K([[50, 0, 31.5], [0, 50, 23.5], [0, 0, 2]]), check=nothing_written),
    rig_case("rig-K-last-row-tilted", FRONT + ("'K'", "last row must be [0, 0, 1]"),
             text=with_K([[50, 0, 31.5], [0, 50, 23.5], [0.1, 0, 1]])),
    rig_case("rig-K-last-row-zero", FRONT + ("'K'", "last row must be [0, 0, 1]"),  # was "Singular matrix"
             text=with_K([[50, 0, 31.5], [0, 50, 23.5], [0, 0, 0]])),
    rig_case("rig-K-skew-5000", FRONT + ("'K'", "skew", "5000", "0.01 * fx"),
             text=with_K([[50, 5000, 31.5], [0, 50, 23.5], [0, 0, 1]])),
    rig_case("rig-K-skew-cx-misplaced", FRONT + ("'K'", "skew"),  # cx written in the skew's place
             text=with_K([[50, 31.5, 0], [0, 50, 23.5], [0, 0, 1]])),
    rig_case("rig-K-lower-left", FRONT + ("'K'", "[1][0]", "transposed"),
             text=with_K([[50, 0, 31.5], [3, 50, 23.5], [0, 0, 1]])),
    rig_case("rig-K-transposed", FRONT + ("'K'", "last row must be [0, 0, 1]"),
             text=with_K([[50, 0, 0], [0, 50, 0], [31.5, 23.5, 1]])),
    rig_case("rig-K-control", (), status=0, text=with_K([[50, 0.01, 31.5], [0, 50, 23.5], [0, 0, 1]]), check=_written),
]

# -- (c) every rig key checked before numpy sees it -------------------------------------------------
KEY_CASES = [
    # translation / ypr_deg
    rig_case("rig-translation-2-numbers", FRONT + ("'translation'", "3 numbers", "got 2"), translation=[1.7, 0.0],
             check=nothing_written),  # was "could not broadcast input array from shape (2,) into shape (3,)"
    rig_case("rig-translation-string", FRONT + ("'translation[1]'", "'abc'"), translation=[1.7, "abc", 1.5]),
    rig_case("rig-translation-nan", FRONT + ("'translation[1]'", "finite"), translation=[1.7, float("nan"), 1.5],
             check=nothing_written),  # was "cannot write a non-finite float (nan) to JSON"
    rig_case("rig-translation-inf", FRONT + ("'translation[2]'", "finite"), translation=[1.7, 0.0, float("inf")]),
    rig_case("rig-translation-null", FRONT + ("'translation'", "3 numbers"), translation=None),
    rig_case("rig-translation-bool", FRONT + ("'translation[0]'", "number"), translation=[True, 0.0, 1.5]),
    rig_case("rig-translation-millimetres", FRONT + ("'translation'", "millimetres"), translation=[1700.0, 0.0, 1500.0]),
    rig_case("rig-ypr-2-numbers", FRONT + ("'ypr_deg'", "3 numbers", "got 2"), ypr_deg=[0, 0]),  # was "not enough values"
    rig_case("rig-ypr-string", FRONT + ("'ypr_deg'", "3 numbers"), ypr_deg="abc"),
    rig_case("rig-ypr-nan", FRONT + ("'ypr_deg[1]'", "finite"), ypr_deg=[0, float("nan"), 0]),  # was "sees no road"
    # K
    rig_case("rig-K-string", FRONT + ("'K[1][1]'", "'abc'"), text=with_K([[50, 0, 31.5], [0, "abc", 23.5], [0, 0, 1]])),
    rig_case("rig-K-ragged", FRONT + ("'K'", "3x3", "3, 2, 3"), text=with_K([[50, 0, 31.5], [0, 50], [0, 0, 1]])),
    rig_case("rig-K-nan", FRONT + ("'K[1][2]'", "finite"), text=with_K([[50, 0, 31.5], [0, 50, float("nan")], [0, 0, 1]])),
    # intrinsics {fx, fy, cx, cy}
    rig_case("rig-intrinsics-string", FRONT + ("'intrinsics.fx'", "'abc'"),
             text=rig_text(drop=("hfov_deg",), intrinsics={"fx": "abc", "fy": 50, "cx": 31.5, "cy": 23.5})),
    rig_case("rig-intrinsics-nan", FRONT + ("'intrinsics.cx'", "finite"),
             text=rig_text(drop=("hfov_deg",), intrinsics={"fx": 50, "fy": 50, "cx": float("nan"), "cy": 23.5})),
    rig_case("rig-intrinsics-list", FRONT + ("'intrinsics'", "mapping"),  # was a raw TypeError
             text=rig_text(drop=("hfov_deg",), intrinsics=[50, 50, 31.5, 23.5])),
    rig_case("rig-intrinsics-unknown-key", FRONT + ("'intrinsics'", "'skew'"),  # was silently dropped
             text=rig_text(drop=("hfov_deg",), intrinsics={"fx": 50, "fy": 50, "cx": 31.5, "cy": 23.5, "skew": 5})),
    rig_case("rig-intrinsics-twice", FRONT + ("given twice", "K", "hfov_deg"),  # K silently won
             text=rig_text(K=K_OK)),
    # cam2ego
    rig_case("rig-cam2ego-string", FRONT + ("'cam2ego[0][3]'", "'abc'"),
             text=with_cam2ego([[0, 0, 1, "abc"], [-1, 0, 0, 0], [0, -1, 0, 1.5], [0, 0, 0, 1]])),
    rig_case("rig-cam2ego-nan", FRONT + ("'cam2ego[0][3]'", "finite"),
             text=with_cam2ego([[0, 0, 1, float("nan")], [-1, 0, 0, 0], [0, -1, 0, 1.5], [0, 0, 0, 1]])),
    rig_case("rig-cam2ego-ragged", FRONT + ("'cam2ego'", "4x4"),
             text=with_cam2ego([[0, 0, 1], [-1, 0, 0, 0], [0, -1, 0, 1.5], [0, 0, 0, 1]])),
    rig_case("rig-cam2ego-singular", FRONT + ("'cam2ego'", "rotation", "singular"),
             text=with_cam2ego([[0, 0, 0, 1.7], [0, 0, 0, 0], [0, 0, 0, 1.5], [0, 0, 0, 1]])),
    rig_case("rig-extrinsics-twice", FRONT + ("given twice", "cam2ego", "translation"),  # cam2ego silently won
             text=rig_text(drop=(), cam2ego=C2E_OK)),
    rig_case("rig-cam2ego-control", (), status=0, text=rig_text(drop=("hfov_deg", "translation", "ypr_deg"), K=K_OK,
                                                                 cam2ego=C2E_OK), check=_written),
    # size, camera entries, top level, file
    rig_case("rig-width-bool", FRONT + ("'width'", "true"), width=True),  # was a 1-pixel-wide camera
    rig_case("rig-width-huge", FRONT + ("'width'", "16384"), width=10 ** 12),
    rig_case("rig-camera-not-mapping", ("rig.yaml", "cameras[0]", "mapping", "'CAM_FRONT'"),  # was "unknown key 'A'"
             text=yaml.safe_dump({"name": "r", "cameras": ["CAM_FRONT"]})),
    rig_case("rig-top-unknown-key", ("rig.yaml", "unknown key 'camera_height'"), text=rig_text(top={"camera_height": 1.5})),
    rig_case("rig-name-not-string", ("rig.yaml", "'name'", "string"),
             text=yaml.safe_dump({"name": ["a", "b"], "cameras": [CAM]})),
    rig_case("rig-not-text", ("rig.yaml", "not a text file"), patch=binary_rig),
    # the rig inside a dataset.json (JSON can hold NaN): same checks, naming dataset.json
    meta_case("meta-rig-K-nan", lambda m: m["rig"]["cameras"][0]["K"][0].__setitem__(2, float("nan")),
              ("dataset.json", "CAM_FRONT", "'K[0][2]'", "finite")),
    meta_case("meta-rig-K-skew", lambda m: m["rig"]["cameras"][0]["K"][0].__setitem__(1, 5000.0),
              ("dataset.json", "CAM_FRONT", "'K'", "skew")),
    meta_case("meta-rig-cam2ego-string", lambda m: m["rig"]["cameras"][0]["cam2ego"][1].__setitem__(3, "abc"),
              ("dataset.json", "CAM_FRONT", "'cam2ego[1][3]'", "'abc'")),
]


# -- a genuine OpenCV calibration (radtan with a free k3) that folds over in the corners (issue 34 item 4) -----
# the nuScenes-like front camera's K (1266 px at 1600x900) scaled to the suite's 64x48, with the coefficients
# cv2.calibrateCamera returns when k3 is free: the polynomial turns over past the pattern, inside the corners
K_OPENCV = [[50.66, 0.0, 31.5], [0.0, 50.66, 23.5], [0.0, 0.0, 1.0]]
FREE_K3 = [-0.35, 0.12, 0.0003, -0.0002, -0.5]
LENS_CASES = [
    rig_case("rig-opencv-calibration-free-k3-folds", FRONT + ("folds over", "k3", "cv2.CALIB_FIX_K3",
                                                              "getOptimalNewCameraMatrix", "crop"),
             text=rig_text(drop=("hfov_deg",), K=K_OPENCV, distortion={"model": "radtan", "coeffs": FREE_K3}),
             check=nothing_written),
    rig_case("rig-opencv-calibration-refit-with-k3-fixed", (), status=0,  # the fix the message names works
             text=rig_text(drop=("hfov_deg",), K=K_OPENCV, distortion={"model": "radtan", "coeffs": FREE_K3[:4] + [0.0]}),
             check=_written),
    rig_case("rig-lens-folds-without-k3", FRONT + ("folds over", "fewer free coefficients", "crop"),
             text=rig_text(drop=("hfov_deg",), K=K_OPENCV, distortion={"model": "radtan", "coeffs": [-0.9, 0, 0, 0, 0]}),
             check=nothing_written),
]


# -- non-finite config numbers: refused by the config loader, naming the key (never in config.json) -----
def train_nan(key, value=".nan"):
    """`hydranet train` of a 1-step tiny run on the session dataset with `key` set to NaN (or `value`)."""
    def build(tmp, env):
        argv = ["train", "--config", "tiny", "--out", tmp / "out", "--quiet"]
        for s in (f"data.root={env.dataset}", "data.cameras=[CAM_FRONT]", "data.image_size=[32,64]", "steps=1",
                  "batch_size=1", "num_workers=0", "device=cpu", f"{key}={value}"):
            argv += ["--set", s]
        return argv
    return build


CONFIG_CASES = [
    Case("train-lr-nan", train_nan("optim.lr"), 2, ("'optim.lr'", "finite"), check=nothing_written),
    Case("train-grad-clip-nan", train_nan("optim.grad_clip"), 2, ("'optim.grad_clip'", "finite"), check=nothing_written),
    Case("train-task-option-nan", train_nan("model.tasks", "[{name: det2d, options: {score_threshold: .nan}}]"), 2,
         ("'model.tasks[0].options.score_threshold'", "finite"), check=nothing_written),  # was: never a detection
]


@pytest.mark.parametrize("case", params(DUPLICATE_CASES + K_CASES + KEY_CASES + LENS_CASES + CONFIG_CASES))
def test_fault(case, fault_env, tmp_path, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)
