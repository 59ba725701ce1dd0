"""Fault rows of `hydranet engine ingest`: truncated and undecodable videos, a video shorter than its timestamp
file, dropped frames (variable frame rate) that leave a camera unmatched, a camera video missing from a clip, a rig
without a camera the videos name, poses that do not cover a clip, image names that are not timestamps, a broken
nuScenes sweep chain, an existing --out, options of another source; a killed ingest rerun. Recordings are written
from the fault dataset's frames (tests/recording_fixtures.py)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from faultlib import Case, params, run_case
from recording_fixtures import sim_rig_file, write_image_sequences, write_videos


def videos(tmp: Path, env, cameras=None) -> Path:
    return write_videos(env.dataset, tmp / "v", cameras=cameras)


def rig(tmp: Path, env) -> Path:
    return sim_rig_file(env.dataset, tmp / "rig.yaml")


def ingest_video(tmp: Path, env, *extra, vdir=None) -> list:
    return ["engine", "ingest", "--out", tmp / "fleet", "--source", "video", "--videos", vdir or videos(tmp, env),
            "--rig", rig(tmp, env), "--quiet", *extra]


def first_video(tmp: Path) -> Path:
    return sorted((tmp / "v").rglob("*.mp4"))[0]


def truncated_video(tmp: Path, env) -> list:
    argv = ingest_video(tmp, env)
    v = first_video(tmp)
    v.write_bytes(v.read_bytes()[: v.stat().st_size // 2])
    return argv


def garbage_video(tmp: Path, env) -> list:
    argv = ingest_video(tmp, env)
    first_video(tmp).write_bytes(b"not a video " * 100)
    return argv


def missing_camera_video(tmp: Path, env) -> list:
    argv = ingest_video(tmp, env)
    first_video(tmp).unlink()
    return argv


def camera_not_in_rig(tmp: Path, env) -> list:
    argv = ingest_video(tmp, env)
    shutil.copy(first_video(tmp), first_video(tmp).with_name("CAM_ROOF.mp4"))
    return argv


def timestamps_longer(tmp: Path, env) -> list:
    argv = ingest_video(tmp, env)
    cams = [c["name"] for c in json.loads((env.dataset / "dataset.json").read_text())["rig"]["cameras"]]
    (tmp / "t.json").write_text(json.dumps({"scene_0000": {c: [0, 500_000, 1_000_000] for c in cams}}))
    return argv + ["--timestamps", tmp / "t.json"]


def dropped_frames(tmp: Path, env) -> list:
    """One camera's video has frames far apart in time (the others every 0.5 s): no frame near the reference's."""
    argv = ingest_video(tmp, env)
    cams = [c["name"] for c in json.loads((env.dataset / "dataset.json").read_text())["rig"]["cameras"]]
    t = {"scene_0000": {c: [0, 500_000] for c in cams}}
    t["scene_0000"][cams[-1]] = [0, 2_000_000]  # its second frame is 1.5 s late
    (tmp / "t.json").write_text(json.dumps(t))
    return argv + ["--timestamps", tmp / "t.json"]


def poses_short(tmp: Path, env) -> list:
    argv = ingest_video(tmp, env)
    (tmp / "p.json").write_text(json.dumps({"scene_0000": [{"timestamp_us": 0, "ego2world": np.eye(4).tolist()}]}))
    return argv + ["--poses", tmp / "p.json"]


def poses_not_rigid(tmp: Path, env) -> list:
    argv = ingest_video(tmp, env)
    m = (np.eye(4) * 2).tolist()
    m[3][3] = 1.0
    (tmp / "p.json").write_text(json.dumps({"scene_0000": [{"timestamp_us": t, "ego2world": m} for t in (0, 500_000)]}))
    return argv + ["--poses", tmp / "p.json"]


def images_argv(tmp: Path, env, edit=None, *extra, out=None) -> list:
    root = write_image_sequences(env.dataset, tmp / "imgs")
    if edit is not None:
        edit(root)
    return ["engine", "ingest", "--out", out or tmp / "fleet", "--source", "images", "--root", root, "--rig",
            rig(tmp, env), "--quiet", *extra]


def rename_first_image(root: Path) -> None:
    img = sorted(root.rglob("*.jpg"))[0]
    img.rename(img.with_name("frame_a.jpg"))


def camera_folder_linked_outside(root: Path) -> None:
    """clip/CAM_FRONT moved outside --root and linked back: shadow would read it as corrupt later."""
    cam = next(p for p in sorted(root.iterdir())[0].iterdir() if p.is_dir())
    outside = root.parent / "elsewhere"
    cam.rename(outside)
    cam.symlink_to(outside, target_is_directory=True)


def video_linked_outside(tmp: Path, env, *extra) -> list:
    """The first camera's video moved to tmp/elsewhere and linked back into its clip folder."""
    argv = ingest_video(tmp, env, *extra)
    v = first_video(tmp)
    (tmp / "elsewhere").mkdir()
    v.rename(tmp / "elsewhere" / v.name)
    v.symlink_to(tmp / "elsewhere" / v.name)
    return argv


def followed_images(tmp: Path) -> None:
    """The followed camera folder is recorded at its resolved path, listed as a link target, and read from there."""
    from data_engine.fleet import Fleet

    fleet = json.loads((tmp / "fleet" / "fleet.json").read_text())
    target = str((tmp / "elsewhere").resolve())
    assert fleet["source"]["follow_links"] is True and fleet["source"]["linked"] == [target]
    refs = [f["images"] for c in fleet["clips"] for f in c["frames"]]
    linked = {cam for f in refs for cam, r in f.items() if r["file"].startswith("/")}
    assert len(linked) == 1, "one camera folder was linked"
    cam = linked.pop()
    assert all(f[cam]["file"].startswith(target + "/") for f in refs)
    assert all(not r["file"].startswith("/") for f in refs for c, r in f.items() if c != cam)
    assert Fleet(tmp / "fleet").read("scene_0000", "000000", [cam])[0].shape == (48, 64, 3)


def followed_video(tmp: Path) -> None:
    from data_engine.fleet import Fleet

    fleet = json.loads((tmp / "fleet" / "fleet.json").read_text())
    target = (tmp / "elsewhere").resolve()
    [video] = fleet["source"]["linked"]
    assert Path(video).parent == target
    cam = Path(video).stem
    assert fleet["clips"][0]["frames"][1]["images"][cam] == {"video": video, "frame": 1}
    assert Fleet(tmp / "fleet").read("scene_0000", "000001", [cam])[0].shape == (48, 64, 3)


def nothing_in_the_target(tmp: Path) -> None:
    no_fleet(tmp)
    assert not (tmp / "elsewhere" / "fleet").exists() and not list((tmp / "elsewhere").glob("fleet.tmp-*")), \
        "the refused ingest wrote into the followed link's target"


def broken_sweep_chain(tmp: Path, env) -> list:
    """A sweep's `next` points at a sample_data record that does not exist."""
    from hydranet.cli import main

    root = tmp / "nus"
    assert main(["sim", "export-nuscenes", "--out", str(root), "--scenes", "1", "--seed", "0", "--sweeps", "1",
                 "--set", "frames_per_scene=2", "--set", "image_width=64", "--set", "image_height=48",
                 "--set", "frame_rate_hz=2.0"]) == 0
    path = next(root.glob("v1.0-*/sample_data.json"))
    sds = json.loads(path.read_text())
    sweep = next(s for s in sds if not s["is_key_frame"] and s["next"])
    sweep["next"] = "0" * 32
    path.write_text(json.dumps(sds))
    return ["engine", "ingest", "--out", tmp / "fleet", "--source", "dataset", "--root", root, "--sweeps", "2", "--quiet"]


def no_fleet(tmp: Path) -> None:
    assert not (tmp / "fleet").exists(), "a fleet was written for a refused ingest"
    assert not list(tmp.glob("fleet.tmp-*")), "a temp folder was left behind"


def old_fleet_kept(tmp: Path) -> None:
    assert (tmp / "fleet" / "keep.txt").read_text() == "old", "an existing fleet was replaced without --overwrite"


def existing_out(tmp: Path, env) -> list:
    (tmp / "fleet").mkdir()
    (tmp / "fleet" / "keep.txt").write_text("old")
    return ingest_video(tmp, env)


def one_clip_truncated_skip(tmp: Path, env) -> list:
    """Two clips (the second a copy of the first), the first's first video cut in half; --on-bad-clip skip."""
    argv = ingest_video(tmp, env, "--on-bad-clip", "skip")
    clip = sorted(p for p in (tmp / "v").iterdir() if p.is_dir())[0]
    shutil.copytree(clip, clip.with_name("zz_second"))
    v = sorted(clip.glob("*.mp4"))[0]
    v.write_bytes(v.read_bytes()[: v.stat().st_size // 2])
    return argv


def one_clip_left(tmp: Path) -> None:
    fleet = json.loads((tmp / "fleet" / "fleet.json").read_text())
    assert [c["name"] for c in fleet["clips"]] == ["zz_second"] and len(fleet["skipped"]) == 1
    assert "truncated" in fleet["skipped"][0]["reason"]


CASES = [
    Case("ingest-video-truncated", truncated_video, words=(".mp4", "truncated"), check=no_fleet),
    Case("ingest-video-not-a-video", garbage_video, words=(".mp4", "not a readable video"), check=no_fleet),
    Case("ingest-video-camera-missing", missing_camera_video, words=("no video for camera", "rig"), check=no_fleet),
    Case("ingest-video-camera-not-in-rig", camera_not_in_rig, words=("CAM_ROOF.mp4", "not in rig"), check=no_fleet),
    Case("ingest-video-shorter-than-timestamps", timestamps_longer, words=(".mp4", "2 frames", "lists 3", "shorter"),
         check=no_fleet),
    Case("ingest-video-dropped-frames", dropped_frames, words=("camera", "no frame within", "variable frame rate"),
         check=no_fleet),
    Case("ingest-poses-do-not-cover-clip", poses_short, words=("p.json", "no pose within", "cover"), check=no_fleet),
    Case("ingest-poses-not-rigid", poses_not_rigid, words=("p.json", "rigid"), check=no_fleet),
    Case("ingest-hz-zero", lambda t, e: ingest_video(t, e, "--hz", "0"), words=("--hz", "positive"), check=no_fleet),
    Case("ingest-rig-missing", lambda t, e: ["engine", "ingest", "--out", t / "fleet", "--source", "video", "--videos",
                                             videos(t, e), "--quiet"], words=("--source video", "--rig"), check=no_fleet),
    Case("ingest-option-of-another-source", lambda t, e: ingest_video(t, e, "--sweeps", "2"),
         words=("--sweeps", "--source video"), check=no_fleet),
    Case("ingest-out-exists", existing_out, words=("fleet", "exists", "--overwrite"), check=old_fleet_kept),
    Case("ingest-images-name-not-a-timestamp", lambda t, e: images_argv(t, e, rename_first_image),
         words=("frame_a.jpg", "timestamp"), check=no_fleet),
    Case("ingest-images-camera-folder-linked-outside", lambda t, e: images_argv(t, e, camera_folder_linked_outside),
         words=("--root", "symbolic link to", "elsewhere", "outside --root", "pass --follow-links", "move the files"),
         check=no_fleet),
    Case("ingest-images-camera-folder-linked-followed", lambda t, e: images_argv(
        t, e, camera_folder_linked_outside, "--follow-links"), status=0,
         stdout=("ingested 1 clip(s)", "followed 1 link(s)", "elsewhere"), check=followed_images),
    Case("ingest-video-linked-outside", video_linked_outside,
         words=("--videos", ".mp4 is a symbolic link to", "elsewhere", "--follow-links"), check=no_fleet),
    Case("ingest-video-linked-followed", lambda t, e: video_linked_outside(t, e, "--follow-links"), status=0,
         stdout=("ingested 1 clip(s), 2 frames", "followed 1 link(s)"), check=followed_video),
    Case("ingest-out-inside-a-followed-link-target", lambda t, e: images_argv(
        t, e, camera_folder_linked_outside, "--follow-links", out=t / "elsewhere" / "fleet"),
         words=("--out", "sits inside a followed link's target", "elsewhere", "choose --out outside it"),
         check=nothing_in_the_target),
    Case("ingest-follow-links-with-a-dataset", lambda t, e: ["engine", "ingest", "--out", t / "fleet", "--source",
                                                            "dataset", "--root", e.dataset, "--follow-links", "--quiet"],
         words=("--follow-links", "--source dataset"), check=no_fleet),
    Case("ingest-nuscenes-broken-sweep-chain", broken_sweep_chain, words=("sample_data", "chain"), check=no_fleet),
    Case("ingest-video-control", lambda t, e: ingest_video(t, e), status=0, stdout=("ingested 1 clip(s), 2 frames",)),
    Case("ingest-video-truncated-skipped-and-counted", one_clip_truncated_skip, status=0,
         stdout=("ingested 1 clip(s)", "skipped 1 unreadable clip", "truncated"), check=one_clip_left),
    Case("ingest-video-every-clip-bad-with-skip", lambda t, e: (truncated_video(t, e), ingest_video(
        t, e, "--on-bad-clip", "skip", vdir=t / "v"))[1], words=("every clip was unreadable", "truncated"), check=no_fleet),
    Case("ingest-dataset-with-a-clip-policy", lambda t, e: ["engine", "ingest", "--out", t / "fleet", "--source", "dataset",
                                                          "--root", e.dataset, "--on-bad-clip", "skip", "--quiet"],
         words=("--on-bad-clip", "--source dataset"), check=no_fleet),
]


@pytest.mark.parametrize("case", params(CASES))
def test_ingest_fault(case: Case, tmp_path, fault_env, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)


def test_a_killed_ingest_rerun_gives_the_same_fleet(tmp_path, fault_env):
    """kill -9 mid-write leaves FLEET.tmp-<pid>, never FLEET; the rerun removes it and writes the fleet."""
    argv = [str(a) for a in ingest_video(tmp_path, fault_env)]
    code = ("import os, sys\nimport data_engine.ingest as ing\n"
            "def die(*a, **k): os.kill(os.getpid(), 9)\n"
            "ing.Path.rename = lambda self, dst: die()\n"
            "from hydranet.cli import main\nmain(sys.argv[1:])\n")
    p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[2])
    assert p.returncode == -9, p.stderr
    assert not (tmp_path / "fleet").exists() and len(list(tmp_path.glob("fleet.tmp-*"))) == 1
    from hydranet.cli import main

    assert main(argv) == 0
    assert (tmp_path / "fleet" / "fleet.json").is_file() and not list(tmp_path.glob("fleet.tmp-*"))
    first = json.loads((tmp_path / "fleet" / "fleet.json").read_text())
    assert main(argv + ["--overwrite"]) == 0
    assert json.loads((tmp_path / "fleet" / "fleet.json").read_text()) == first  # deterministic


def test_a_corrupt_image_in_a_recorded_fleet_is_a_bad_frame(tmp_path, fault_env):
    """The one decoder's policy on recorded frames: a damaged JPEG is a corrupt frame (counted), never pixels."""
    from data_engine.fleet import Fleet

    argv = images_argv(tmp_path, fault_env)
    from hydranet.cli import main

    assert main([str(a) for a in argv]) == 0
    img = sorted((tmp_path / "imgs").rglob("*.jpg"))[0]
    data = bytearray(img.read_bytes())
    data[len(data) // 2: len(data) // 2 + 200] = os.urandom(200)
    img.write_bytes(bytes(data))
    fl = Fleet(tmp_path / "fleet")
    cam = img.parent.name
    with pytest.raises(ValueError, match="corrupt"):
        fl.read("scene_0000", "000000", [cam])
    ok = fl.read("scene_0000", "000001", [cam])[0]
    assert ok.shape == (48, 64, 3) and ok.dtype == np.uint8


def test_a_fleet_json_naming_a_file_outside_its_links_is_refused(tmp_path, fault_env):
    """An absolute reference in fleet.json is read only under a link target ingest followed: one edited to point
    anywhere else is refused when read, naming the file (a bad frame in shadow), never read."""
    from data_engine.fleet import Fleet
    from hydranet.cli import main

    assert main([str(a) for a in images_argv(tmp_path, fault_env, camera_folder_linked_outside, "--follow-links")]) == 0
    path = tmp_path / "fleet" / "fleet.json"
    fleet = json.loads(path.read_text())
    refs = fleet["clips"][0]["frames"][0]["images"]
    cam = next(c for c, r in refs.items() if r["file"].startswith("/"))
    secret = tmp_path / "secret.jpg"
    shutil.copy(refs[cam]["file"], secret)
    refs[cam]["file"] = str(secret)
    path.write_text(json.dumps(fleet))
    with pytest.raises(ValueError, match="secret.jpg.*lies under neither"):
        Fleet(tmp_path / "fleet").read("scene_0000", "000000", [cam])
