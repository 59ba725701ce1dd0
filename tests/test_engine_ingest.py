"""`hydranet engine ingest`: camera videos, image sequences and dataset readers become fleets read in place;
frames are time-ordered, frame-accurate and deterministic; shadow mode runs on them as on the sim."""
from __future__ import annotations

import json
import sqlite3

import cv2
import numpy as np
import pytest
from engine_fixtures import make_fleet, make_model
from recording_fixtures import sim_clips, sim_rig_file, write_image_sequences, write_videos

from hydranet.cli import main


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A 2-clip x 4-frame sim fleet (nuscenes6, 96x64), its recordings and a 2-step engine_tiny export."""
    root = tmp_path_factory.mktemp("ingest")
    fleet = make_fleet(root / "simfleet", clips=2, frames=4)
    return {"root": root, "sim": fleet, "model": make_model(root, fleet), "rig": sim_rig_file(fleet, root / "rig.yaml"),
            "videos": write_videos(fleet, root / "videos"), "images": write_image_sequences(fleet, root / "images")}


def ingest(*argv) -> int:
    return main(["engine", "ingest", "--quiet", *[str(a) for a in argv]])


def test_video_fleet_is_time_ordered_frame_accurate_and_deterministic(world, tmp_path):
    from data_engine.fleet import Fleet, RecordedFleet

    assert ingest("--out", tmp_path / "f", "--source", "video", "--videos", world["videos"], "--rig", world["rig"]) == 0
    fl = Fleet(tmp_path / "f")
    assert isinstance(fl, RecordedFleet) and fl.clip_names == ["clip_00000", "clip_00001"]
    sim = sim_clips(world["sim"])
    for name in fl.clip_names:
        clip = fl.clip(name)
        assert [f["timestamp_us"] for f in clip.frames] == [0, 500_000, 1_000_000, 1_500_000]  # the container's clock
        for k, f in enumerate(clip.frames):
            got = fl.read(name, f["dir"], ["CAM_FRONT", "CAM_BACK"])
            # frame-accurate: decoded frame k is nearest to sim frame k among all the clip's frames
            for cam, img in zip(["CAM_FRONT", "CAM_BACK"], got):
                originals = [cv2.cvtColor(cv2.imread(str(world["sim"] / "scenes" / name / s["dir"] / f"{cam}.jpg")),
                                          cv2.COLOR_BGR2RGB).astype(np.float32) for s in sim[name]]
                errors = [np.abs(img.astype(np.float32) - o).mean() for o in originals]
                assert int(np.argmin(errors)) == k and errors[k] < 6.0, errors
    # deterministic and order-independent: backwards and random access give the same pixels as a forward pass
    forward = [fl.read("clip_00000", f"{k:06d}", ["CAM_FRONT"])[0] for k in range(4)]
    again = [fl.read("clip_00000", f"{k:06d}", ["CAM_FRONT"])[0] for k in (3, 1, 0, 2)]
    for k, img in zip((3, 1, 0, 2), again):
        assert np.array_equal(img, forward[k])


def test_video_pixels_match_an_independent_decoder(world, tmp_path):
    """PyAV's frames against OpenCV's FFmpeg backend reading the same file sequentially."""
    from data_engine.fleet import Fleet

    assert ingest("--out", tmp_path / "f", "--source", "video", "--videos", world["videos"], "--rig", world["rig"]) == 0
    fl = Fleet(tmp_path / "f")
    cap = cv2.VideoCapture(str(world["videos"] / "clip_00001" / "CAM_FRONT_LEFT.mp4"))
    for k in range(4):
        ok, bgr = cap.read()
        assert ok
        ours = fl.read("clip_00001", f"{k:06d}", ["CAM_FRONT_LEFT"])[0].astype(np.int16)
        assert np.abs(ours - cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB).astype(np.int16)).mean() < 1.5
    cap.release()


def test_hz_samples_and_poses_and_timestamps_files(world, tmp_path):
    from data_engine.fleet import Fleet

    stamps = tmp_path / "t.csv"
    cams = [c["name"] for c in json.loads((world["sim"] / "dataset.json").read_text())["rig"]["cameras"]]
    rows = ["clip,camera,frame,timestamp_us"] + [f"{c},{cam},{k},{1_000_000 + 100_000 * k}"
                                                 for c in ("clip_00000", "clip_00001") for cam in cams for k in range(4)]
    stamps.write_text("\n".join(rows) + "\n")
    poses = {c: [{"timestamp_us": 1_000_000 + 100_000 * k, "ego2world": np.eye(4).tolist()} for k in range(4)]
             for c in ("clip_00000", "clip_00001")}
    for c in poses:
        for k, p in enumerate(poses[c]):
            p["ego2world"][0][3] = float(k)  # x = k metres
    (tmp_path / "p.json").write_text(json.dumps(poses))
    assert ingest("--out", tmp_path / "f", "--source", "video", "--videos", world["videos"], "--rig", world["rig"],
                  "--hz", "5", "--timestamps", stamps, "--poses", tmp_path / "p.json") == 0
    clip = Fleet(tmp_path / "f").clip("clip_00000")
    assert [f["timestamp_us"] for f in clip.frames] == [1_000_000, 1_200_000]  # 10 Hz of frames sampled at 5 Hz
    assert [f["ego2world"][0, 3] for f in clip.frames] == [0.0, 2.0]


def test_image_sequences_are_read_in_place_exactly(world, tmp_path):
    from data_engine.fleet import Fleet
    from hydranet.data.sim_reader import read_image

    assert ingest("--out", tmp_path / "f", "--source", "images", "--root", world["images"], "--rig", world["rig"]) == 0
    fl = Fleet(tmp_path / "f")
    assert not list((tmp_path / "f").rglob("*.jpg"))  # nothing copied
    sim = sim_clips(world["sim"])
    for k, f in enumerate(fl.clip("clip_00001").frames):
        assert f["timestamp_us"] == sim["clip_00001"][k]["timestamp_us"]
        img = fl.read("clip_00001", f["dir"], ["CAM_BACK_RIGHT"])[0]
        ref = read_image(world["sim"] / "scenes" / "clip_00001" / sim["clip_00001"][k]["dir"] / "CAM_BACK_RIGHT.jpg",
                         img.shape, np.uint8, color=True)
        assert np.array_equal(img, ref)


def test_dataset_source_reads_through_the_reader(world, tmp_path):
    """A nuScenes export of the sim fleet: scenes become clips with the log location as a tag; images through the reader."""
    from data_engine.fleet import Fleet
    from hydranet.data.formats import open_dataset
    from sim.nuscenes_export import export_nuscenes

    nus = export_nuscenes(world["sim"], tmp_path / "nus", progress=False)
    assert ingest("--out", tmp_path / "f", "--source", "dataset", "--root", nus) == 0
    fl = Fleet(tmp_path / "f")
    assert len(fl.clip_names) == 2 and any(t.startswith("location:") for t in fl.tags(fl.clip_names[0]))
    ds = open_dataset(nus)
    frames = fl.clip(fl.clip_names[1]).frames
    ts = [f["timestamp_us"] for f in frames]
    assert ts == sorted(ts) and len(frames) == 4
    got = fl.read(fl.clip_names[1], frames[2]["dir"], ds.rig.names[:2])
    want = ds.load(4 + 2)["images"][:2]
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


def test_shadow_runs_on_a_video_fleet_and_reingest_adds_no_frames(world, tmp_path):
    from data_engine.catalog import Catalog
    from data_engine.fleet import Fleet

    assert ingest("--out", tmp_path / "f", "--source", "video", "--videos", world["videos"], "--rig", world["rig"]) == 0
    cat = tmp_path / "c.db"
    argv = ["engine", "shadow", "--onnx", str(world["model"]), "--data", str(tmp_path / "f"), "--catalog", str(cat),
            "--quiet", "--workers", "1"]
    assert main(argv) == 0
    db = sqlite3.connect(str(cat))
    assert db.execute("SELECT count(*), sum(status = 'ok') FROM signals").fetchone() == (8, 8)
    db.close()
    assert ingest("--out", tmp_path / "f", "--source", "video", "--videos", world["videos"], "--rig", world["rig"],
                  "--overwrite") == 0
    with Catalog(cat) as c:
        c.add_fleet(Fleet(tmp_path / "f"))
        assert c.db.execute("SELECT count(*) FROM frames").fetchone()[0] == 8  # the same fleet: nothing duplicated


def test_recorded_frames_go_to_labelling_files_as_png_bit_identical_on_resend(world, tmp_path):
    """mine -> label (files backend) on a video fleet: every camera image exported as the decoded frame (PNG, the same
    bytes on a resend), the team's COCO file imported as label versions; the oracle refuses recorded data."""
    from data_engine.fleet import Fleet

    assert ingest("--out", tmp_path / "f", "--source", "video", "--videos", world["videos"], "--rig", world["rig"]) == 0
    cat = tmp_path / "c.db"
    assert main(["engine", "shadow", "--onnx", str(world["model"]), "--data", str(tmp_path / "f"), "--catalog",
                 str(cat), "--quiet", "--workers", "1"]) == 0
    assert main(["engine", "mine", "--catalog", str(cat), "--budget", "2", "--strategy", "random", "--out",
                 str(tmp_path / "sel.json")]) == 0
    assert main(["engine", "label", "--catalog", str(cat), "--selection", str(tmp_path / "sel.json"), "--backend",
                 "oracle"]) == 2
    assert main(["engine", "label", "--catalog", str(cat), "--selection", str(tmp_path / "sel.json"), "--backend",
                 "files", "--out", str(tmp_path / "export")]) == 0
    coco = json.loads(next((tmp_path / "export").glob("*.coco.json")).read_text())
    assert len(coco["images"]) == 2 * 6 and all(im["file_name"].endswith(".png") for im in coco["images"])
    fl = Fleet(tmp_path / "f")
    first = {}
    for im in coco["images"]:
        clip, fdir, name = im["file_name"].split("/")
        png = tmp_path / "export" / "images" / im["file_name"]
        first[im["file_name"]] = png.read_bytes()
        decoded = cv2.cvtColor(cv2.imread(str(png)), cv2.COLOR_BGR2RGB)
        assert np.array_equal(decoded, fl.read(clip, fdir, [name[:-4]])[0])  # lossless: the frame shadow mode saw
    import shutil

    shutil.rmtree(tmp_path / "export" / "images")
    from data_engine.label_queue import load_jobs
    from data_engine.labeling.files import FilesBackend
    from data_engine.labels import open_catalog

    with open_catalog(cat) as c:
        FilesBackend(out=tmp_path / "export").send(load_jobs(c))
    for name, data in first.items():
        assert (tmp_path / "export" / "images" / name).read_bytes() == data  # a resend is bit-identical
    coco["annotations"] = [{"id": k + 1, "image_id": im["id"], "category_id": coco["categories"][0]["id"],
                            "bbox": [10, 10, 20, 15], "area": 300, "iscrowd": 0} for k, im in enumerate(coco["images"])]
    (tmp_path / "team.json").write_text(json.dumps(coco))
    assert main(["engine", "import-labels", "--catalog", str(cat), "--backend", "files", "--file",
                 str(tmp_path / "team.json"), "--quiet"]) == 0
    db = sqlite3.connect(str(cat))
    assert db.execute("SELECT count(*) FROM labels").fetchone()[0] == 2
    db.close()
    # accepted labels of the recorded fleet train: the accepted set holds the labelled frames' pixels (one-frame
    # scenes: the fleet has no poses) and a 1-step fine-tune from production runs on them mixed with its base set
    assert main(["engine", "jobs", "--catalog", str(cat), "--accept", "all", "--by", "tester"]) == 0
    run = world["root"] / "run_model"
    assert main(["engine", "retrain", "--production", str(run), "--catalog", str(cat), "--out", str(tmp_path / "re"),
                 "--steps", "1", "--quiet"]) == 0
    from hydranet.data import SimDataset

    acc = SimDataset(tmp_path / "re" / "accepted")
    assert len(acc) == 2 and all(len(s["frames"]) == 1 for s in acc.scenes)
    sample = acc[0]
    clip, fdir = acc.scenes[0]["clip"]["name"], acc.scenes[0]["frames"][0]["dir"]
    frame = fl.read(clip, fdir, [acc.rig.names[0]])[0]
    assert np.array_equal(sample["images"][0], frame)  # the labelled pixels exactly: read in place, never re-encoded
    assert not list((tmp_path / "re" / "accepted").rglob("*.jpg")) and not list((tmp_path / "re" / "accepted").rglob("*.png"))
    boxes = [b for c in sample["labels"]["cameras"].values() for b in c.get("boxes2d", [])]
    assert [b["bbox"] for b in boxes][:1] == [[10.0, 10.0, 30.0, 25.0]] and (tmp_path / "re" / "checkpoint.pt").is_file()


def test_a_bev_model_runs_on_its_rig_at_another_resolution_and_refuses_another_calibration(world, tmp_path):
    """The same nuscenes6 rig rendered at 192x128 (intrinsics scaled with the image) is the model's calibration;
    a fleet whose CAM_FRONT is mounted 0.5 m further forward is refused, naming the camera and the difference."""
    fleet = make_fleet(tmp_path / "big", clips=1, frames=2,
                       extra=("--set", "sim.image_width=192", "--set", "sim.image_height=128"))
    argv = ["engine", "shadow", "--onnx", str(world["model"]), "--catalog", str(tmp_path / "c.db"), "--quiet",
            "--workers", "1", "--fleet"]
    assert main(argv + [str(fleet)]) == 0
    moved = tmp_path / "moved"
    import shutil

    shutil.copytree(world["sim"], moved)
    meta = json.loads((moved / "dataset.json").read_text())
    cam = next(c for c in meta["rig"]["cameras"] if c["name"] == "CAM_FRONT")
    cam["cam2ego"][0][3] += 0.5
    (moved / "dataset.json").write_text(json.dumps(meta))
    assert main(argv[:5] + [str(tmp_path / "d.db")] + argv[6:] + [str(moved)]) == 2
