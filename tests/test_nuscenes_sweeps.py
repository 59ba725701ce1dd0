"""nuScenes camera sweeps (issue 13): the exporter writes N non-keyframe camera images between two
keyframes (sim/nuscenes_export.py, `--sweeps N`), the official devkit loads them, and the reader
(`NuScenesDataset(sweeps=N)`, `data.sweeps`) gives them back as unlabelled frames in time order:
the sim's timestamps, poses and images, supervising no head (zero loss)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from dataset_fixtures import SIM_CFG, make_sweeps_sim, write_nuscenes
from devkit import HAVE_DEVKIT, needs_devkit
from hydranet.data.reader import DatasetError
from hydranet.data.sim_reader import SimDataset
from hydranet.data.nuscenes import NuScenesDataset
from sim.nuscenes_export import BASE_TIME_US, SCENE_GAP_US

if HAVE_DEVKIT:
    from nuscenes.nuscenes import NuScenes

SWEEPS = 2
CAMS = ["CAM_FRONT", "CAM_BACK"]


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    root = tmp_path_factory.mktemp("nusc_sweeps")
    sim = make_sweeps_sim(root / "sim", SWEEPS)
    return SimDataset(sim, channels=("images",)), write_nuscenes(sim, root / "nusc", sweeps=SWEEPS)


def _sim_stamps(sim: SimDataset) -> list[int]:
    """The export's timestamp of every sim frame (each scene from its base, scenes an hour apart)."""
    out, base = [], BASE_TIME_US
    for sc in sim.scenes:
        t0 = sc["frames"][0]["timestamp_us"]
        out += [base + f["timestamp_us"] - t0 for f in sc["frames"]]
        base = out[-1] + SCENE_GAP_US
    return out


def test_sweeps_come_back_as_the_sims_frames_in_time_order(fixture):
    sim, root = fixture
    ds = NuScenesDataset(root, sweeps=SWEEPS, cameras=CAMS)
    keys = NuScenesDataset(root, cameras=CAMS)
    assert len(ds) == len(sim) == len(keys) + SWEEPS * (len(keys) - len(keys.scenes))
    stamps = _sim_stamps(sim)
    by_name = {c.name: c for c in sim.rig.cameras}
    keyframes = 0
    for i in range(len(ds)):
        s, truth = ds[i], sim[i]
        key = truth["frame_index"] % (SWEEPS + 1) == 0  # SIM_CFG's keyframes, SWEEPS sim frames between each two
        assert s["frame_index"] == truth["frame_index"]
        assert s["keyframe"] == key and ds.is_sweep(i) == (not key)
        assert s["timestamp_us"] == stamps[i]
        assert np.abs(s["ego2world"] - truth["ego2world"]).max() < 1e-6
        assert np.abs(s["cam2ego"] - np.stack([by_name[c].cam2ego for c in CAMS])).max() < 1e-5
        assert np.abs(s["intrinsics"] - np.stack([by_name[c].K for c in CAMS])).max() < 1e-4
        assert np.array_equal(s["images"], truth["images"][[sim.rig.names.index(c) for c in CAMS]])  # same JPEGs
        if key:
            assert s["sample_token"] == keys[keyframes]["sample_token"] and s["supervises"] >= {"det2d", "det3d"}
            keyframes += 1
        else:
            assert s["supervises"] == set() and s["labels"]["boxes3d"] == []
            assert all(c == {"boxes2d": [], "lanes2d": []} for c in s["labels"]["cameras"].values())
    for sc in ds.scenes:  # time order within every scene
        first = ds.frame_ids.index((sc["name"], sc["frames"][0]))
        ts = [ds[first + k]["timestamp_us"] for k in range(len(sc["frames"]))]
        assert all(b > a for a, b in zip(ts, ts[1:]))
    clip = ds.clip(SWEEPS + 1, SWEEPS + 2)  # keyframe, its sweeps, next keyframe: the video queue's order
    assert [c["keyframe"] for c in clip] == [True] + [False] * SWEEPS + [True]
    assert [c["timestamp_us"] for c in clip] == stamps[:SWEEPS + 2]


def test_fewer_sweeps_are_evenly_spaced_between_keyframes(fixture):
    sim, root = fixture
    ds = NuScenesDataset(root, sweeps=1, cameras=CAMS, channels=())
    keys = NuScenesDataset(root, cameras=CAMS, channels=())
    assert len(ds) == 2 * len(keys) - len(keys.scenes)
    stamps = _sim_stamps(sim)
    got = [ds[i]["timestamp_us"] for i in range(len(ds))]
    # of the 2 sweeps between keyframes k and k+1 (sim frames 3k+1, 3k+2), the one picked is 3k+2 (round half even)
    per_scene = SIM_CFG.frames_per_scene
    want = []
    for sc in range(len(sim.scenes)):
        base = sc * len(sim.scenes[0]["frames"])
        for k in range(per_scene):
            want.append(stamps[base + 3 * k])
            if k + 1 < per_scene:
                want.append(stamps[base + 3 * k + 2])
    assert got == want


@needs_devkit
def test_devkit_loads_the_export_with_sweeps(fixture):
    sim, root = fixture
    nusc = NuScenes(version="v1.0-mini", dataroot=str(root), verbose=False)
    assert len(nusc.sample) == len(sim.scenes) * SIM_CFG.frames_per_scene
    stamps = _sim_stamps(sim)
    poses = [f["ego2world"] for sc in sim.scenes for f in sc["frames"]]
    for ch in [c.name for c in sim.rig.cameras]:
        flat = 0
        for scene in nusc.scene:  # walk each camera's chain: keyframes and sweeps in time order
            sample = nusc.get("sample", scene["first_sample_token"])
            sd = nusc.get("sample_data", sample["data"][ch])
            assert sd["prev"] == ""
            n = 0
            while True:
                assert sd["timestamp"] == stamps[flat]
                assert sd["is_key_frame"] == (n % (SWEEPS + 1) == 0)
                assert sd["filename"].startswith(("samples/" if sd["is_key_frame"] else "sweeps/") + ch + "/")
                path = nusc.get_sample_data_path(sd["token"])
                assert open(path, "rb").read() == (sim.root / "scenes" / scene["name"] /
                                                   sim.frame_ids[flat][1] / f"{ch}.jpg").read_bytes()
                pose = nusc.get("ego_pose", sd["ego_pose_token"])
                assert pose["timestamp"] == sd["timestamp"]
                assert np.allclose(pose["translation"], np.asarray(poses[flat])[:3, 3], atol=1e-6)
                near = nusc.get("sample", sd["sample_token"])  # a sweep names its nearest keyframe's sample
                assert abs(near["timestamp"] - sd["timestamp"]) <= 0.25e6 + 1
                if sd["is_key_frame"]:
                    assert near["data"][ch] == sd["token"]
                n, flat = n + 1, flat + 1
                if not sd["next"]:
                    break
                nxt = nusc.get("sample_data", sd["next"])
                assert nxt["prev"] == sd["token"]
                sd = nxt
            assert n == (SIM_CFG.frames_per_scene - 1) * (SWEEPS + 1) + 1
        assert flat == len(sim)
    lidar = [sd for sd in nusc.sample_data if sd["channel"] == "LIDAR_TOP"]
    assert len(lidar) == len(nusc.sample) and all(sd["is_key_frame"] for sd in lidar)


def test_a_sweep_frame_supervises_no_head_and_gives_zero_loss(fixture):
    from hydranet.loader import Collate, LabelledFrames
    from hydranet.models import build_model
    from hydranet.models.config import ModelConfig, TaskConfig

    _, root = fixture
    ds = NuScenesDataset(root, sweeps=SWEEPS, cameras=["CAM_FRONT"])
    torch.manual_seed(0)
    model = build_model(ModelConfig(backbone="tiny", neck_width=16, neck_repeats=1,
                                    tasks=(TaskConfig("det2d"), TaskConfig("det3d"))), ds.meta)
    frames = LabelledFrames(ds, model.target_builders(), (64, 96))
    sweeps = [i for i in range(len(ds)) if ds.is_sweep(i)][:2]
    batch = Collate(model.target_builders())([frames[i] for i in sweeps])
    assert all(not bool(t["supervised"].any()) for t in batch["targets"].values())
    model.train()
    model.zero_grad(set_to_none=True)
    losses = model(batch, "loss")
    for head in ("det2d", "det3d"):
        assert losses[head].item() == 0.0 and losses[f"{head}.samples"].item() == 0.0
    model.backward(losses)
    assert all(p.grad is None or bool((p.grad == 0).all()) for p in model.parameters())
    keyed = Collate(model.target_builders())([frames[0], frames[SWEEPS + 1]])  # two keyframes: labelled
    assert model(keyed, "loss")["det2d.samples"].item() == 2.0


def _copy(fixture, tmp_path):
    return shutil.copytree(fixture[1], tmp_path / "nusc")


def _edit_sample_data(root, edit):
    path = root / "v1.0-mini" / "sample_data.json"
    rows = json.loads(path.read_text())
    edit(rows)
    path.write_text(json.dumps(rows))


def _first_sweep(rows, ch="CAM_FRONT"):
    return next(r for r in rows if not r["is_key_frame"] and f"/{ch}/" in r["filename"])


def test_a_missing_sweep_image_raises_naming_it_or_is_skipped(fixture, tmp_path):
    root = _copy(fixture, tmp_path)
    ds = NuScenesDataset(root, sweeps=SWEEPS, cameras=["CAM_FRONT"])
    victim = root / ds._sweep[ds.frame_ids[1][1]]["sds"]["CAM_FRONT"]["filename"]
    assert victim.parent.name == "CAM_FRONT" and victim.parent.parent.name == "sweeps"
    victim.unlink()
    with pytest.raises(DatasetError, match=f"{victim.name}: image is missing") as e:
        ds[1]
    assert "\n" not in str(e.value)
    assert NuScenesDataset(root, cameras=["CAM_FRONT"])[0]["keyframe"]  # keyframes only: the sweep is not read
    skip = NuScenesDataset(root, sweeps=SWEEPS, cameras=["CAM_FRONT"], on_bad_frame="skip")
    assert skip[1]["timestamp_us"] == skip[2]["timestamp_us"] and skip.skipped == [str(victim)]


def test_a_broken_chain_is_one_line_naming_the_token(fixture, tmp_path):
    root = _copy(fixture, tmp_path)

    def dangling(rows):
        _first_sweep(rows)["next"] = "f" * 32
    _edit_sample_data(root, dangling)
    with pytest.raises(DatasetError, match=r"sample_data.json: sample_data [0-9a-f]{32} \(CAM_FRONT\) links to next "
                                           r"f{32}, which sample_data.json lacks") as e:
        NuScenesDataset(root, sweeps=SWEEPS)
    assert "\n" not in str(e.value)
    assert len(NuScenesDataset(root)) > 0  # keyframes only: the chain is not followed

    root2 = shutil.copytree(fixture[1], tmp_path / "nusc2")
    seen = {}

    def wrong_prev(rows):
        sw = _first_sweep(rows)
        nxt = next(r for r in rows if r["token"] == sw["next"])
        nxt["prev"] = "0" * 32
        seen["tok"] = nxt["token"]
    _edit_sample_data(root2, wrong_prev)
    with pytest.raises(DatasetError, match=f"sample_data {seen['tok']} follows .* its prev is '0{{32}}'"):
        NuScenesDataset(root2, sweeps=1)


def test_sweeps_in_the_config(fixture, tmp_path):
    from hydranet.config import ConfigError
    from hydranet.data.sources import open_data, open_sources
    from hydranet.experiment import load_experiment

    _, root = fixture
    cfg = load_experiment(None, [f"data.root={root}", f"data.sweeps={SWEEPS}", "data.cameras=[CAM_FRONT]"])
    (src,) = open_sources(cfg.data)
    assert src.dataset.sweeps == SWEEPS and any(src.dataset.is_sweep(i) for i in range(len(src.dataset)))
    assert open_data(cfg.data, root).sweeps == SWEEPS
    mixed = load_experiment(None, [f"data.sources=[{{root: {root}, sweeps: 1, cameras: [CAM_FRONT]}}]"])
    assert open_sources(mixed.data)[0].dataset.sweeps == 1
    with pytest.raises(ConfigError, match=r"config key 'data.sweeps' must be >= 0"):
        load_experiment(None, [f"data.root={root}", "data.sweeps=-1"])
    with pytest.raises(ConfigError, match=r"config key 'data.sweeps': only nuScenes has camera sweeps"):
        load_experiment(None, ["data.format=kitti", "data.sweeps=2"])
    with pytest.raises(ConfigError, match=r"'data.sweeps': with data.sources"):
        load_experiment(None, [f"data.sources=[{{root: {root}}}]", "data.sweeps=1"])
    with pytest.raises(DatasetError, match="only nuScenes has camera sweeps and this folder is sim"):
        open_sources(load_experiment(None, [f"data.root={fixture[0].root}", "data.sweeps=1"]).data)
