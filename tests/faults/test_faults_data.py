"""Fault rows: rigs, sim configs, config files and overrides, datasets on disk (through `hydranet sim
generate` and `hydranet sim preview --data`). One row per case; see faultlib.py for the contract."""
from __future__ import annotations

import errno
import json
import pathlib

import numpy as np
import pytest
import yaml
from faultlib import Case, copy_dataset, edit_json, frame_dir, no_file_named, no_temp_left, params, run_case

# -- rigs: `hydranet sim generate --rig FILE` ------------------------------------------------------
CAM = {"name": "CAM_FRONT", "width": 64, "height": 48, "hfov_deg": 64.0, "translation": [1.7, 0.0, 1.5],
       "ypr_deg": [0.0, 0.0, 0.0]}


def rig_case(id, words, status=2, text=None, patch=None, check=None, **cam):
    def build(tmp, env):
        path = tmp / "rig.yaml"
        path.write_text(text if text is not None else yaml.safe_dump({"name": "r", "cameras": [{**CAM, **cam}]}))
        return ["sim", "generate", "--rig", path, "--out", tmp / "out" / "ds", "--scenes", "1", "--quiet",
                "--set", "frames_per_scene=1"]
    return Case(id, build, status, words, patch=patch, check=check)


def deny_read(name: str):
    """Simulate an unreadable file (tests run as root, which chmod cannot stop): reading `name` raises EACCES."""
    def patch(mp, tmp):
        real_read_text, real_fromfile = pathlib.Path.read_text, np.fromfile

        def read_text(self, *a, **k):
            if self.name == name:
                raise PermissionError(errno.EACCES, "Permission denied", str(self))
            return real_read_text(self, *a, **k)

        def fromfile(file, *a, **k):
            if pathlib.Path(file).name == name:
                raise PermissionError(errno.EACCES, "Permission denied", str(file))
            return real_fromfile(file, *a, **k)
        mp.setattr(pathlib.Path, "read_text", read_text)
        mp.setattr(np, "fromfile", fromfile)
    return patch


def own_cam2ego() -> dict:
    """A frame's own cam2ego for every camera of the fault suite's dataset (the nuscenes6 rig)."""
    from hydranet.rig import load_rig

    return {c.name: c.cam2ego.tolist() for c in load_rig("nuscenes6").cameras}


def _written(path: pathlib.Path) -> None:
    assert path.is_file(), f"{path} was not written"


RIG_CASES = [
    rig_case("rig-name-dotdot-slash", ("rig.yaml", "camera name", "'../escape'"), name="../escape",
             check=no_file_named("escape*", where_up=1)),
    rig_case("rig-name-slash", ("rig.yaml", "camera name", "'a/b'"), name="a/b"),
    rig_case("rig-name-empty", ("rig.yaml", "camera name", "''"), name=""),
    rig_case("rig-name-nul", ("rig.yaml", "camera name"), name="a\x00b"),
    rig_case("rig-name-dot", ("rig.yaml", "camera name", "'.'"), name="."),
    rig_case("rig-name-dotdot", ("rig.yaml", "camera name", "'..'"), name=".."),
    rig_case("rig-name-absolute", ("rig.yaml", "camera name"), name="/tmp/hydranet-fault-abs"),
    rig_case("rig-fov-180", ("rig.yaml", "CAM_FRONT", "180 degrees"), hfov_deg=180.0),
    rig_case("rig-fov-200", ("rig.yaml", "hfov_deg", "180 degrees"), hfov_deg=200.0),
    rig_case("rig-fov-from-K", ("rig.yaml", "field of view", "180 degrees"), hfov_deg=None,
             text=yaml.safe_dump({"name": "r", "cameras": [{**{k: v for k, v in CAM.items() if k != "hfov_deg"},
                                                            "K": [[1e-6, 0, 32], [0, 1e-6, 24], [0, 0, 1]]}]})),
    rig_case("rig-lens-unknown-model", ("rig.yaml", "CAM_FRONT", "unknown distortion model 'kb'"),
             distortion={"model": "kb", "coeffs": [0, 0, 0, 0]}),
    rig_case("rig-lens-coeff-count", ("rig.yaml", "CAM_FRONT", "radtan", "5 finite coefficients"),
             distortion={"model": "radtan", "coeffs": [0.1]}),
    rig_case("rig-lens-coeff-nan", ("rig.yaml", "CAM_FRONT", "4 finite coefficients"),
             distortion={"model": "fisheye", "coeffs": [0.1, float("nan"), 0, 0]}),
    rig_case("rig-lens-folds", ("rig.yaml", "CAM_FRONT", "folds over"), hfov_deg=100.0,
             distortion={"model": "radtan", "coeffs": [-0.3, 0.0, 0.0, 0.0, 0.0]}),
    rig_case("rig-lens-too-wide", ("rig.yaml", "CAM_FRONT", "at most 170 degrees"), hfov_deg=178.0,
             distortion={"model": "fisheye", "coeffs": [0.0, 0.0, 0.0, 0.0]}),
    rig_case("rig-lens-not-mapping", ("rig.yaml", "CAM_FRONT", "distortion must be"), distortion=[0.1, 0.0]),
    rig_case("rig-lens-control", (), status=0, hfov_deg=120.0, distortion={"model": "fisheye", "coeffs": [0.02, 0, 0, 0]},
             check=lambda tmp: _written(tmp / "out" / "ds" / "dataset.json")),
    rig_case("rig-yaml-syntax", ("rig.yaml", "not valid yaml"), text="cameras: [{name: A, width: 64\n"),
    rig_case("rig-unreadable", ("rig.yaml", "permission denied"), patch=deny_read("rig.yaml")),
]


# -- sim config: `hydranet sim generate --set KEY=VALUE` / --config FILE --------------------------------
def sim_case(id, sets, words, status=2, config=None, absent=(), patch=None, check=None):
    def build(tmp, env):
        argv = ["sim", "generate", "--out", tmp / "out", "--scenes", "1", "--quiet", "--set", "image_width=64",
                "--set", "image_height=48", "--set", "frames_per_scene=1"]
        if config is not None:
            (tmp / "sim.yaml").write_text(config)
            argv += ["--config", tmp / "sim.yaml"]
        for s in sets:
            argv += ["--set", s]
        return argv
    return Case(id, build, status, words, absent=absent, patch=patch, check=check)


def disk_full_after(n: int):
    """Simulate a full disk: the n-th file write of the dataset fails with ENOSPC."""
    def patch(mp, tmp):
        real, calls = pathlib.Path.write_bytes, [0]

        def write_bytes(self, data):
            calls[0] += 1
            if calls[0] >= n:
                real(self, bytes(data)[:10])  # a partial file, as a full disk leaves one
                raise OSError(errno.ENOSPC, "No space left on device", str(self))
            return real(self, data)
        mp.setattr(pathlib.Path, "write_bytes", write_bytes)
    return patch


def nothing_written(tmp):
    no_temp_left(tmp)
    assert not (tmp / "out").exists(), "a dataset folder was left behind"


SIM_CASES = [
    sim_case("sim-probability-above-1", ["rare.cones_on_road=1.5"], ("rare.cones_on_road", "[0, 1]"),
             check=nothing_written),
    sim_case("sim-probability-negative", ["rare.debris_on_road=-0.1"], ("rare.debris_on_road",)),
    sim_case("sim-frames-per-scene-0", ["frames_per_scene=0"], ("frames_per_scene",), check=nothing_written),
    sim_case("sim-frames-per-scene-negative", ["frames_per_scene=-3"], ("frames_per_scene",)),
    sim_case("sim-negative-vehicles", ["traffic.vehicles=-1"], ("traffic.vehicles",)),
    sim_case("sim-negative-pedestrians", ["traffic.pedestrians=-5"], ("traffic.pedestrians",)),
    sim_case("sim-bev-resolution-0", ["bev_resolution=0"], ("bev_resolution",)),
    sim_case("sim-weights-all-zero", ["conditions.weather_weights=[0, 0, 0]"], ("conditions.weather_weights",)),
    sim_case("sim-weights-length", ["conditions.time_of_day_weights=[1]"], ("conditions.time_of_day_weights",)),
    sim_case("sim-body-motion-negative", ["conditions.body_motion_deg=-1"], ("conditions.body_motion_deg", "[0, 3]")),
    sim_case("sim-mount-jitter-huge", ["conditions.mount_jitter_deg=45"], ("conditions.mount_jitter_deg", "[0, 3]")),
    sim_case("set-yaml-syntax", ["traffic=[1"], ("override", "not valid yaml")),
    sim_case("set-empty-key-part", ["traffic..vehicles=2"], ("override", "empty key")),
    sim_case("set-scientific-float", ["frame_rate_hz=1e1", "bev_resolution=0"], ("bev_resolution",),
             absent=("frame_rate_hz",)),  # 1e1 is a number: the error is the zero resolution, not the rate
    sim_case("config-yaml-syntax", [], ("sim.yaml", "not valid yaml", "line 3"), config="rig: nuscenes6\ntraffic: {vehicles: 3\n"),
    sim_case("config-scientific-float", ["bev_resolution=0"], ("bev_resolution",), config="frame_rate_hz: 2e1\n",
             absent=("frame_rate_hz",)),
    sim_case("config-unknown-key", [], ("unknown config key", "trafic"), config="trafic: {vehicles: 3}\n"),
    sim_case("config-unreadable", [], ("sim.yaml", "permission denied"), config="rig: nuscenes6\n",
             patch=deny_read("sim.yaml")),
    Case("config-missing", lambda tmp, env: ["sim", "generate", "--out", tmp / "out", "--config", tmp / "nope.yaml"],
         2, ("nope.yaml", "does not exist")),
    sim_case("disk-full-while-writing", [], ("no space left", "free space"), patch=disk_full_after(5),
             check=nothing_written),
]


# -- datasets on disk: `hydranet sim preview --data DS` reads dataset.json, scene.json, frame 0 -----------
def ds_case(id, edit, words, status=2, patch=None, check=None):
    def build(tmp, env):
        root = copy_dataset(tmp, env)
        edit(root, tmp)
        return ["sim", "preview", "--data", root, "--out", tmp / "preview.png"]
    return Case(id, build, status, words, patch=patch, check=check)


def meta(fn):
    return lambda root, tmp: edit_json(root / "dataset.json", fn)


def scene(fn):
    return lambda root, tmp: edit_json(root / "scenes" / "scene_0000" / "scene.json", fn)


def labels(fn):
    return lambda root, tmp: edit_json(frame_dir(root) / "labels.json", fn)


def first_box2d(lab):
    return next(b for c in lab["cameras"].values() for b in c["boxes2d"])


def scene_outside(root, tmp):
    """dataset.json names scene '../../x', and tmp/x holds a readable scene: reading it is reading outside."""
    import shutil
    shutil.copytree(root / "scenes" / "scene_0000", tmp / "x")
    edit_json(tmp / "x" / "scene.json", lambda s: s.update(name="../../x"))
    edit_json(root / "dataset.json", lambda m: m["scenes"][0].update(name="../../x"))


def frame_dir_outside(root, tmp):
    import shutil
    shutil.copytree(frame_dir(root), tmp / "f")
    edit_json(root / "scenes" / "scene_0000" / "scene.json", lambda s: s["frames"][0].update(dir="../../../f"))


def corrupt_jpeg_middle(root, tmp):
    p = frame_dir(root) / "CAM_FRONT.jpg"
    d = bytearray(p.read_bytes())
    m = len(d) // 2
    d[m:m + 20] = bytes(20)  # decodes, with "Corrupt JPEG data" warnings and wrong pixels
    p.write_bytes(bytes(d))


def truncate_jpeg(root, tmp):
    p = frame_dir(root) / "CAM_FRONT.jpg"
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def set_box3d(**kv):
    return labels(lambda lab: lab["boxes3d"][0].update(kv))


LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 123456\n"

DATASET_CASES = [
    ds_case("meta-missing-classes", meta(lambda m: m.pop("classes")), ("dataset.json", "'classes'", "missing")),
    ds_case("meta-classes-wrong-type", meta(lambda m: m.update(classes="car")), ("dataset.json", "'classes'")),
    ds_case("meta-not-object", lambda root, tmp: edit_json(root / "dataset.json", lambda m: [m], replace=True),
            ("dataset.json", "json object")),
    ds_case("meta-missing-scenes", meta(lambda m: m.pop("scenes")), ("dataset.json", "'scenes'", "missing")),
    ds_case("meta-scenes-not-list", meta(lambda m: m.update(scenes={"a": 1})), ("dataset.json", "'scenes'")),
    ds_case("meta-scene-missing-name", meta(lambda m: m["scenes"][0].pop("name")), ("dataset.json", "scenes[0].name")),
    ds_case("meta-scene-name-outside", scene_outside, ("dataset.json", "scenes[0].name", "'../../x'")),
    ds_case("meta-scene-name-absolute", meta(lambda m: m["scenes"][0].update(name="/etc")), ("scenes[0].name",)),
    ds_case("meta-bev-resolution-0", meta(lambda m: m["bev"].update(resolution=0)), ("dataset.json", "bev.resolution")),
    ds_case("meta-rig-camera-name", meta(lambda m: m["rig"]["cameras"][0].update(name="../x")),
            ("dataset.json", "camera name", "'../x'")),
    ds_case("meta-bad-json", lambda root, tmp: (root / "dataset.json").write_text("{"), ("dataset.json", "corrupt json")),
    ds_case("scene-missing-frames", scene(lambda s: s.pop("frames")), ("scene.json", "'frames'", "missing")),
    ds_case("scene-cam2ego-not-rigid",
            scene(lambda s: s["frames"][0].update(cam2ego={**own_cam2ego(), "CAM_FRONT": np.diag([2.0, 1, 1, 1]).tolist()})),
            ("scene.json", "frames[0].cam2ego.CAM_FRONT", "rigid")),
    ds_case("scene-cam2ego-missing-camera",
            scene(lambda s: s["frames"][0].update(cam2ego={k: v for k, v in own_cam2ego().items() if k != "CAM_BACK"})),
            ("scene.json", "frames[0].cam2ego", "every camera", "'cam_back' is missing")),
    ds_case("scene-cam2ego-unknown-camera",
            scene(lambda s: s["frames"][0].update(cam2ego={**own_cam2ego(), "CAM_OTHER": np.eye(4).tolist()})),
            ("scene.json", "frames[0].cam2ego", "'cam_other' is not in the rig")),
    ds_case("scene-pose-2x2", scene(lambda s: s["frames"][0].update(ego2world=[[1, 0], [0, 1]])),
            ("scene.json", "frames[0].ego2world", "4x4")),
    ds_case("scene-pose-not-rigid", scene(lambda s: s["frames"][0]["ego2world"][0].__setitem__(0, 5.0)),
            ("scene.json", "frames[0].ego2world", "rigid")),
    ds_case("scene-frame-dir-outside", frame_dir_outside, ("scene.json", "frames[0].dir", "'../../../f'")),
    ds_case("scene-frame-index-string", scene(lambda s: s["frames"][0].update(index="0")), ("scene.json", "frames[0].index")),
    ds_case("scene-name-mismatch", scene(lambda s: s.update(name="scene_9999")), ("scene.json", "'name'", "scene_9999")),
    ds_case("labels-bbox-nan", labels(lambda lab: first_box2d(lab).update(bbox=[float("nan"), 0, 4, 4])),
            ("labels.json", "bbox", "finite")),
    ds_case("labels-bbox-inverted", labels(lambda lab: first_box2d(lab).update(bbox=[10, 10, 2, 2])),
            ("labels.json", "bbox", "inverted")),
    ds_case("labels-bbox-huge", labels(lambda lab: first_box2d(lab).update(bbox=[0, 0, 1e9, 1e9])),
            ("labels.json", "bbox", "outside")),
    ds_case("labels-bbox-missing", labels(lambda lab: first_box2d(lab).pop("bbox")), ("labels.json", "bbox")),
    ds_case("labels-box3d-size-nan", set_box3d(size=[float("nan"), 1, 1]), ("labels.json", "boxes3d[0].size", "finite")),
    ds_case("labels-box3d-size-negative", set_box3d(size=[-4, 2, 1.5]), ("labels.json", "boxes3d[0].size")),
    ds_case("labels-box3d-size-huge", set_box3d(size=[1e6, 2, 1.5]), ("labels.json", "boxes3d[0].size")),
    ds_case("labels-box3d-center-far", set_box3d(center=[1e7, 0, 0]), ("labels.json", "boxes3d[0].center")),
    ds_case("labels-box3d-center-inf", set_box3d(center=[float("inf"), 0, 0]), ("labels.json", "boxes3d[0].center")),
    ds_case("labels-box3d-yaw-string", set_box3d(yaw="north"), ("labels.json", "boxes3d[0].yaw")),
    ds_case("labels-missing-boxes3d", labels(lambda lab: lab.pop("boxes3d")), ("labels.json", "'boxes3d'", "missing")),
    ds_case("labels-unknown-camera", labels(lambda lab: lab["cameras"].update(CAM_X={"boxes2d": []})),
            ("labels.json", "cameras.CAM_X")),
    ds_case("labels-unknown-class", set_box3d(**{"class": "spaceship"}), ("labels.json", "spaceship")),
    ds_case("labels-not-object", lambda root, tmp: edit_json(frame_dir(root) / "labels.json", lambda x: [x], replace=True),
            ("labels.json", "json object")),
    ds_case("jpeg-corrupt-middle", corrupt_jpeg_middle, ("CAM_FRONT.jpg", "corrupt")),
    ds_case("jpeg-truncated", truncate_jpeg, ("CAM_FRONT.jpg", "corrupt or truncated")),
    ds_case("jpeg-missing", lambda root, tmp: (frame_dir(root) / "CAM_FRONT.jpg").unlink(), ("CAM_FRONT.jpg", "missing")),
    # files copied from a repository whose Git LFS objects were never fetched: ~130-byte pointers
    ds_case("jpeg-git-lfs-pointer", lambda root, tmp: (frame_dir(root) / "CAM_FRONT.jpg").write_text(LFS_POINTER),
            ("CAM_FRONT.jpg", "git lfs pointer", "git lfs pull")),
    ds_case("meta-git-lfs-pointer", lambda root, tmp: (root / "dataset.json").write_text(LFS_POINTER),
            ("dataset.json", "git lfs pointer", "git lfs pull")),
    ds_case("jpeg-unreadable", lambda root, tmp: None, ("CAM_FRONT.jpg", "permission denied"),
            patch=deny_read("CAM_FRONT.jpg")),
    ds_case("labels-unreadable", lambda root, tmp: None, ("labels.json", "permission denied"), patch=deny_read("labels.json")),
    ds_case("meta-unreadable", lambda root, tmp: None, ("dataset.json", "permission denied"), patch=deny_read("dataset.json")),
    ds_case("dataset-intact", lambda root, tmp: None, (), status=0),  # the control row: the fixture itself is fine
]


@pytest.mark.parametrize("case", params(RIG_CASES + SIM_CASES + DATASET_CASES))
def test_fault(case, fault_env, tmp_path, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)


def test_scene_outside_would_be_readable(fault_env, tmp_path):
    """The scene-outside row is a real escape: the folder it names exists and holds a valid scene."""
    root = copy_dataset(tmp_path, fault_env)
    scene_outside(root, tmp_path)
    assert (root / "scenes" / "../../x" / "scene.json").is_file()
    assert json.loads((tmp_path / "x" / "scene.json").read_text())["name"] == "../../x"
