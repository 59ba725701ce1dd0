"""benchmarks/real_frames_curve.py end to end on tiny fixtures: a sim-trained HydraNet fine-tuned on its front camera
with 0 and 2 "genuine" KITTI frames (written in KITTI's layout from sim frames), scored on other KITTI frames; the
nested frame choice, the taxonomy kept, the refusals and nothing written outside --out."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from benchmark_scripts import load

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def split_kitti(kitti: Path, out: Path, ids: list[str]) -> Path:
    for sub in ("image_2", "label_2", "calib"):
        (out / "training" / sub).mkdir(parents=True)
        for fid in ids:
            src = next((kitti / "training" / sub).glob(f"{fid}.*"))
            shutil.copy2(src, out / "training" / sub / src.name)
    return out


def test_curve_end_to_end(tmp_path, capsys):
    from dataset_fixtures import make_sim, train_tiny_bev, write_kitti

    from hydranet.checkpoint import load_checkpoint

    sys.modules.setdefault("realism_gap", load("realism_gap"))  # its neighbour, as `python benchmarks/...` finds it
    curve = load("real_frames_curve")
    sim = make_sim(tmp_path / "sim")
    train_tiny_bev(sim, tmp_path / "base", "{name: det2d}, {name: drivable}, {name: bevmap}")
    kitti = write_kitti(sim, tmp_path / "kitti")
    ids = curve.kitti_ids(kitti)
    pool, held = split_kitti(kitti, tmp_path / "pool", ids[:3]), split_kitti(kitti, tmp_path / "held", ids[3:])
    before = {p: sorted(x.name for x in p.rglob("*")) for p in (tmp_path / "base", pool, held, sim)}
    out = tmp_path / "curve"
    args = ["--checkpoint", str(tmp_path / "base"), "--sim", str(sim), "--sim-val", str(sim), "--pool", str(pool),
            "--eval", str(held), "--counts", "0", "2", "--seeds", "2", "--steps", "2", "--resamples", "20",
            "--threads", "1", "--out", str(out)]
    figures = curve.main(args)
    assert set(figures["kitti: det2d/car AP50"]) == {0, 2} and len(figures["kitti: det2d/car AP50"][2]) == 2
    assert {p.name for p in out.iterdir()} >= {"curve.md", "curve.json", "curve.png", "k0_seed0", "k2_seed1"}
    assert not (out / "k0_seed0" / "pool").exists()
    for seed in (0, 1):  # a seed's frames: the first k of its own permutation of the pool
        chosen = sorted(p.stem for p in (out / f"k2_seed{seed}" / "pool" / "training" / "image_2").iterdir())
        assert chosen == sorted(curve.pool_order(ids[:3], seed)[:2])
    assert curve.pool_order(ids[:3], 0) != curve.pool_order(ids[:3], 1) or len(ids[:3]) < 2
    base_meta = json.loads(load_checkpoint(tmp_path / "base")["meta"])
    tuned = load_checkpoint(out / "k2_seed0" / "run")
    assert json.loads(tuned["meta"])["classes"] == base_meta["classes"]  # KITTI's Tram dropped: the same taxonomy
    tuned_cfg = json.loads(tuned["config"])
    assert tuned_cfg["data"]["fit"] == "crop" and [s["name"] for s in tuned_cfg["data"]["sources"]] == ["sim", "kitti"]
    assert [t["name"] for t in tuned_cfg["model"]["tasks"]] == ["det2d", "drivable"] and tuned["step"] == 2
    table = json.loads((out / "k2_seed0" / "eval" / "realism_gap.json").read_text())
    assert table["cells"]["kitti"]["det2d/car AP50"]["frames"] == len(ids) - 3
    assert "| 2 | " in (out / "curve.md").read_text()
    assert {p: sorted(x.name for x in p.rglob("*")) for p in before} == before  # nothing written beside --out
    with pytest.raises(SystemExit, match="exists: pass --overwrite"):
        curve.main(args)
    stamp = (out / "k2_seed1" / "run" / "checkpoint.pt").stat().st_mtime_ns
    assert curve.main([*args, "--resume"]) == figures  # finished runs kept, not trained again
    assert (out / "k2_seed1" / "run" / "checkpoint.pt").stat().st_mtime_ns == stamp
    with pytest.raises(SystemExit):
        curve.main([*args, "--resume", "--steps", "3"])  # a kept run of another recipe is not mixed in
    assert "was run with" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # one genuine frame cannot fill a batch of 2
        curve.main([*args[:11], "1", *args[13:], "--overwrite"])
    assert "needs k >= the batch size 2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        curve.main([*args[:8], "--eval", str(pool), *args[10:], "--overwrite"])  # the pool scored on itself
    assert "share frame" in capsys.readouterr().err
