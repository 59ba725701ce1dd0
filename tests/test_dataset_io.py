"""Dataset writer (sim/writer.py) and reader (hydranet/data/sim_reader.py) round trip and bad input."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from hydranet.data import DatasetError, SimDataset
from hydranet.rig import Rig, load_rig
from sim.writer import DatasetWriteError, DatasetWriter

H, W = 16, 24
SEMANTIC = ["sky", "road", "lane_marking", "crosswalk", "sidewalk", "vehicle"]
BEV = {"x_range": [-4, 4], "y_range": [-3, 3], "resolution": 0.5}  # (3, 16, 12) grid


def tiny_rig() -> Rig:
    rig = load_rig("nuscenes6").resized(W, H)
    return Rig(rig.name, rig.cameras[:2])


def make_meta(rig: Rig) -> dict:
    return {"format": "hydranet-sim", "version": 1, "rig": rig.to_dict(), "classes": ["car", "pedestrian"],
            "semantic_classes": SEMANTIC, "sign_classes": ["stop"], "light_states": ["red", "green"],
            "lane_types": ["solid_white", "dashed_white"], "bev": BEV, "frame_rate_hz": 10, "seed": 0,
            "sim_config": {"num_scenes": 1}}


def make_frame(rig: Rig, k: int, rng: np.random.Generator) -> dict:
    cams = {}
    for c in rig.cameras:
        n = rng.normal(size=(H, W, 3)).astype(np.float32)
        n /= np.linalg.norm(n, axis=-1, keepdims=True)
        n[:2] = 0  # sky rows
        depth = rng.uniform(0.5, 200, (H, W)).astype(np.float32)
        depth[:2] = 0
        y, x = np.mgrid[:H, :W]
        rgb = np.stack([x * 10, y * 15, np.full_like(x, 40 * k)], -1).astype(np.uint8)  # smooth: JPEG-friendly
        cams[c.name] = {"rgb": rgb, "depth": depth, "normal": n,
                        "semantic": rng.integers(0, len(SEMANTIC), (H, W)).astype(np.uint8),
                        "instance": rng.integers(0, 70000, (H, W)).clip(0, 65535).astype(np.int32)}
    bev = rng.integers(0, 256, (3, 16, 12)).astype(np.uint8)
    labels = {"cameras": {}, "boxes3d": [{"center": [1.0, 2.0 / 3.0, 0.5], "size": [4.0, 2.0, 1.5], "yaw": 0.0,
                                                     "class": "car", "track_id": 7}],
              "lanes3d": [], "ego_velocity": [float(k), 0.0, 0.0]}
    return {"dir": f"{k:06d}", "cameras": cams, "bev": bev, "labels": labels}


def scene_meta(n: int) -> dict:
    frames = [{"index": k, "dir": f"{k:06d}", "timestamp_us": k * 100000,
               "ego2world": [[1, 0, 0, k * 1.5], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]} for k in range(n)]
    return {"name": "scene_0000", "seed": 1, "conditions": {"time_of_day": "day", "weather": "clear", "rare": []},
            "frames": frames}


def write_dataset(root: Path, n_frames: int = 3) -> list[dict]:
    rig, rng = tiny_rig(), np.random.default_rng(0)
    frames = [make_frame(rig, k, rng) for k in range(n_frames)]
    with DatasetWriter(root, make_meta(rig)) as w:
        w.write_scene(scene_meta(n_frames))
        for f in frames:
            w.write_frame("scene_0000", f)
    return frames


@pytest.fixture
def dataset(tmp_path):
    root = tmp_path / "ds"
    return root, write_dataset(root)


def test_round_trip(dataset):
    root, frames = dataset
    ds = SimDataset(root)
    rig = tiny_rig()
    assert len(ds) == 3 and ds.rig.names == rig.names and ds.classes == ["car", "pedestrian"]
    assert ds.frame_ids == [("scene_0000", f"{k:06d}") for k in range(3)]
    assert [s["name"] for s in ds.scenes] == ["scene_0000"]
    for k, frame in enumerate(frames):
        s = ds[k]
        assert s["scene"] == "scene_0000" and s["frame_index"] == k and s["timestamp_us"] == k * 100000
        assert s["camera_names"] == rig.names
        assert s["images"].shape == (2, H, W, 3) and s["images"].dtype == np.uint8
        assert s["intrinsics"].dtype == np.float32 and s["cam2ego"].shape == (2, 4, 4)
        np.testing.assert_allclose(s["intrinsics"][1], rig.cameras[1].K, rtol=1e-5)
        assert s["ego2world"].dtype == np.float64 and s["ego2world"][0, 3] == k * 1.5
        for n, c in enumerate(rig.names):
            src = frame["cameras"][c]
            assert np.abs(s["images"][n].astype(int) - src["rgb"]).mean() < 3  # JPEG q95, RGB order
            assert np.abs(s["depth"][n] - src["depth"]).max() <= 1 / 512 + 1e-6
            assert s["depth"].dtype == np.float32 and (s["depth"][n][:2] == 0).all()
            assert s["normals"].dtype == np.float32 and (s["normals"][n][:2] == 0).all()
            assert np.abs(s["normals"][n] - src["normal"]).max() <= 1 / 127
            np.testing.assert_array_equal(s["semantic"][n], src["semantic"])
            np.testing.assert_array_equal(s["instance"][n], src["instance"])
            assert s["instance"].dtype == np.int32
        np.testing.assert_array_equal(s["bev"], frame["bev"])
        assert s["labels"]["ego_velocity"] == [float(k), 0.0, 0.0]
        assert s["labels"]["boxes3d"][0]["center"][1] == round(2 / 3, 6)


def test_writer_is_deterministic(tmp_path):
    write_dataset(tmp_path / "a")
    write_dataset(tmp_path / "b")
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert len(files) == 1 + 1 + 3 * (2 * 5 + 2)
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_dataset_json_written_last_and_renamed(tmp_path):
    root, rig = tmp_path / "ds", tiny_rig()
    tmp = tmp_path / f"ds.tmp-{os.getpid()}"
    with DatasetWriter(root, make_meta(rig)) as w:
        w.write_scene(scene_meta(1))
        w.write_frame("scene_0000", make_frame(rig, 0, np.random.default_rng(0)))
        assert tmp.is_dir() and not root.exists()
        assert not (tmp / "dataset.json").exists()
    assert not tmp.exists() and (root / "dataset.json").is_file()
    meta = json.loads((root / "dataset.json").read_text())
    assert meta["scenes"] == [{"name": "scene_0000", "num_frames": 1}]
    assert list(tmp_path.iterdir()) == [root]


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_exception_leaves_nothing(tmp_path, exc):
    rig = tiny_rig()
    with pytest.raises(exc):
        with DatasetWriter(tmp_path / "ds", make_meta(rig)) as w:
            w.write_scene(scene_meta(2))
            w.write_frame("scene_0000", make_frame(rig, 0, np.random.default_rng(0)))
            raise exc("stop")
    assert list(tmp_path.iterdir()) == []


def test_missing_frame_fails_at_close(tmp_path):
    rig = tiny_rig()
    with pytest.raises(ValueError, match="scene_0000"):
        with DatasetWriter(tmp_path / "ds", make_meta(rig)) as w:
            w.write_scene(scene_meta(2))
            w.write_frame("scene_0000", make_frame(rig, 0, np.random.default_rng(0)))
    assert list(tmp_path.iterdir()) == []


def test_existing_root_is_refused(tmp_path):
    (tmp_path / "ds").mkdir()
    with pytest.raises(DatasetWriteError, match="exists; pass another --out or delete it"):
        with DatasetWriter(tmp_path / "ds", make_meta(tiny_rig())):
            pass


def test_unwritable_parent(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(DatasetWriteError) as e:
        with DatasetWriter(tmp_path / "afile" / "ds", make_meta(tiny_rig())):
            pass
    msg = str(e.value)
    assert "cannot write to" in msg and "choose a writable --out" in msg and "\n" not in msg


def test_instance_id_too_large(tmp_path):
    rig = tiny_rig()
    frame = make_frame(rig, 0, np.random.default_rng(0))
    frame["cameras"][rig.names[0]]["instance"][0, 0] = 70000
    with pytest.raises(ValueError, match="65535"):
        with DatasetWriter(tmp_path / "ds", make_meta(rig)) as w:
            w.write_scene(scene_meta(1))
            w.write_frame("scene_0000", frame)
    assert not (tmp_path / "ds").exists()


def test_not_a_dataset(tmp_path):
    with pytest.raises(DatasetError, match="not a hydranet-sim dataset .*hydranet sim generate"):
        SimDataset(tmp_path)


def test_wrong_version(dataset):
    root, _ = dataset
    meta = json.loads((root / "dataset.json").read_text())
    meta["version"] = 2
    (root / "dataset.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="version"):
        SimDataset(root)


def test_missing_camera_image(dataset):
    root, _ = dataset
    path = root / "scenes" / "scene_0000" / "000001" / "CAM_FRONT.jpg"
    path.unlink()
    ds = SimDataset(root)
    ds[0]
    with pytest.raises(DatasetError) as e:
        ds[1]
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_truncated_jpeg_raises_and_skips(dataset):
    root, _ = dataset
    path = root / "scenes" / "scene_0000" / "000001" / "CAM_FRONT_RIGHT.jpg"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError, match=str(path)):
        SimDataset(root)[1]
    ds = SimDataset(root, on_bad_frame="skip")
    s = ds[1]  # the bad frame gives the next good one
    assert s["frame_index"] == 2 and ds.skipped == [str(path)]
    assert ds[1]["frame_index"] == 2 and len(ds.skipped) == 1  # counted once
    assert [s["frame_index"] for s in (ds[k] for k in range(len(ds)))] == [0, 2, 2]


def test_camera_selection(dataset):
    root, _ = dataset
    ds = SimDataset(root, cameras=["CAM_FRONT_RIGHT"], channels=("images",))
    s = ds[0]
    assert s["images"].shape == (1, H, W, 3) and s["camera_names"] == ["CAM_FRONT_RIGHT"]
    assert "depth" not in s and "drivable" not in s and ds.rig.names == ["CAM_FRONT_RIGHT"]
    with pytest.raises(DatasetError, match="CAM_NOPE.*CAM_FRONT.*CAM_FRONT_RIGHT"):
        SimDataset(root, cameras=["CAM_NOPE"])


def test_drivable(dataset):
    root, frames = dataset
    s = SimDataset(root, channels=("semantic",))[0]
    for n, c in enumerate(tiny_rig().names):
        sem = frames[0]["cameras"][c]["semantic"]
        want = (sem == SEMANTIC.index("road")) | (sem == SEMANTIC.index("lane_marking")) | (sem == SEMANTIC.index("crosswalk"))
        assert s["drivable"].dtype == bool
        np.testing.assert_array_equal(s["drivable"][n], want)


def test_clip(dataset):
    root, _ = dataset
    ds = SimDataset(root, channels=())
    clip = ds.clip(2, 2)
    assert [s["frame_index"] for s in clip] == [1, 2] and {s["scene"] for s in clip} == {"scene_0000"}
    assert ds.clip_ends(3) == [2]
    with pytest.raises(ValueError, match="clip_ends"):
        ds.clip(1, 3)
    # padded: a stream start repeats the scene's first frame
    assert [s["frame_index"] for s in ds.clip(1, 3, pad=True)] == [0, 0, 1]
    assert [s["frame_index"] for s in ds.clip(0, 3, pad=True)] == [0, 0, 0]
    assert [s["frame_index"] for s in ds.clip(2, 3, pad=True)] == [0, 1, 2]
    assert ds.clip_ends(3, pad=True) == list(range(len(ds)))


def test_layering():
    """sim.writer runs without torch; the reader imports neither torch nor sim."""
    import subprocess
    import sys
    for code in ("import sys, sim.writer; assert 'torch' not in sys.modules",
                 "import sys, hydranet.data; assert 'torch' not in sys.modules and 'sim' not in sys.modules"):
        subprocess.run([sys.executable, "-c", code], check=True)
