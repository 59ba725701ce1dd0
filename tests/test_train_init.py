"""`hydranet train --init CHECKPOINT` / `train(..., init_from=...)`: a partial load, as mmengine's
`load_from` and torchvision's `weights=`. A camera model's checkpoint starts a model that adds the BEV
heads: the trunk (backbone, neck) and the camera heads are loaded bit for bit, the BEV heads and the
fusion keep the initialization a run from scratch gives them, and the summary says so. A key of another
shape, or a checkpoint that shares no key with the model, is refused in one line before the run folder
is touched; `--init` with `--resume` is refused by the CLI.

Tiny: one camera at 32x64, neck width 16, 1-step runs."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from dataset_fixtures import make_sim

from hydranet.checkpoint import load_checkpoint, save_checkpoint
from hydranet.cli import main
from hydranet.experiment import load_experiment
from hydranet.train import train

REPO = Path(__file__).resolve().parents[1]
BEV = REPO / "configs" / "bev.yaml"
SMALL = ["data.cameras=[CAM_FRONT]", "data.image_size=[32,64]", "model.neck_width=16", "model.neck_repeats=1",
         "model.bev.channels=16", "model.bev.video_frames=1", "augment.bev_rotation_deg=0", "batch_size=1", "steps=1",
         "checkpoint_every=1", "num_workers=0", "optim.warmup_steps=1", "device=cpu"]
CAMERA = "model.tasks=[{name: depth}, {name: drivable}]"
HYDRA = ("model.tasks=[{name: depth}, {name: drivable}, {name: det3d, options: {width: 16}}, "
         "{name: bevmap, options: {width: 16}}]")


def cfg(root, *sets):
    return load_experiment(BEV, [f"data.root={root}", *SMALL, *sets])


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Path:
    return make_sim(tmp_path_factory.mktemp("sim") / "sim")


@pytest.fixture(scope="module")
def camera_run(sim, tmp_path_factory) -> Path:
    """A 1-step run of the camera-only model (depth + drivable)."""
    out = tmp_path_factory.mktemp("runs") / "camera"
    train(cfg(sim, CAMERA), out, progress=False)
    return out


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_partial_init_loads_the_trunk_and_keeps_the_new_heads_at_their_initialization(sim, camera_run, tmp_path,
                                                                                       capsys):
    cam = load_checkpoint(camera_run)["model"]
    capsys.readouterr()
    model = train(cfg(sim, HYDRA), tmp_path / "init", init_from=camera_run, stop_at=0, progress=False)
    printed = capsys.readouterr().out
    scratch = train(cfg(sim, HYDRA), tmp_path / "scratch", stop_at=0, progress=False).state_dict()
    state = model.state_dict()
    assert set(cam) < set(state)
    assert [k for k in cam if not torch.equal(state[k], cam[k])] == []  # backbone, neck, camera heads: bit for bit
    new = sorted(set(state) - set(cam))
    assert {k.split(".")[0] if k.startswith("fusion") else ".".join(k.split(".")[:2]) for k in new} == {
        "fusion", "heads.det3d", "heads.bevmap"}
    assert [k for k in new if not torch.equal(state[k], scratch[k])] == []  # as a run from scratch starts them
    assert any(not torch.equal(scratch[k], cam[k]) for k in cam if k.startswith("backbone"))  # the load did something
    assert f"{len(cam)} of the model's {len(state)} tensors loaded" in printed
    assert f"missing    {len(new):5d}  kept at their initialization" in printed
    assert all(m in printed for m in ("backbone (", "neck (", "heads.depth (", "fusion (", "heads.det3d (",
                                      "heads.bevmap (", "unexpected     0"))

    # a full run records what it loaded; the other way round (a camera model from the BEV run) ignores the BEV keys
    train(cfg(sim, HYDRA), tmp_path / "hydra", init_from=camera_run, progress=False)
    rec = load_checkpoint(tmp_path / "hydra")["init_from"]
    assert (rec["matched"], rec["missing"], rec["unexpected"], rec["step"]) == (len(cam), len(new), 0, 1)
    assert set(rec["missing_modules"]) == {"fusion", "heads.det3d", "heads.bevmap"}
    capsys.readouterr()
    back = train(cfg(sim, CAMERA), tmp_path / "back", init_from=tmp_path / "hydra", stop_at=0, progress=False)
    assert "unexpected " in capsys.readouterr().out
    hydra = load_checkpoint(tmp_path / "hydra")["model"]
    assert all(torch.equal(v, hydra[k]) for k, v in back.state_dict().items())


def test_same_architecture_is_a_full_load(sim, camera_run, tmp_path, capsys):
    capsys.readouterr()
    model = train(cfg(sim, CAMERA), tmp_path / "ft", init_from=camera_run, stop_at=0, progress=False)
    cam = load_checkpoint(camera_run)["model"]
    assert all(torch.equal(v, cam[k]) for k, v in model.state_dict().items())
    assert "(the same architecture)" in capsys.readouterr().out


def test_a_shape_mismatch_is_refused_naming_the_key_and_leaves_the_run_folder(sim, camera_run, tmp_path):
    out = tmp_path / "old"
    shutil.copytree(camera_run, out)
    before = (out / "checkpoint.pt").read_bytes()
    with pytest.raises(ValueError, match=r"--init.*does not fit this model: key 'neck\.[^']+' has shape \(\d+, .*\) "
                                         r"in the weights but \(\d+, .*\) in the model") as e:
        train(cfg(sim, HYDRA, "model.neck_width=24"), out, init_from=camera_run, overwrite=True, progress=False)
    assert "\n" not in str(e.value)
    assert (out / "checkpoint.pt").read_bytes() == before  # --overwrite did not remove the old run first


def test_a_checkpoint_sharing_no_key_is_not_an_init(sim, camera_run, tmp_path):
    ckpt = load_checkpoint(camera_run)
    ckpt["model"] = {f"other.{k}": v for k, v in ckpt["model"].items()}
    save_checkpoint(tmp_path / "unrelated" / "checkpoint.pt", ckpt)
    with pytest.raises(ValueError, match="shares no weight with this model.*not an init") as e:
        train(cfg(sim, HYDRA), tmp_path / "out", init_from=tmp_path / "unrelated", progress=False)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()


def test_cli_init_is_refused_with_resume_and_with_set_init_from(sim, camera_run, tmp_path, capsys):
    argv = ["train", "--config", str(BEV), "--out", str(tmp_path / "x"), "--quiet"]
    for s in [f"data.root={sim}", *SMALL, CAMERA]:
        argv += ["--set", s]
    capsys.readouterr()
    assert main(["train", "--resume", str(camera_run), "--init", str(camera_run), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --init") and "--resume" in err and "one of them" in err
    assert main([*argv, "--set", f"init_from={camera_run}", "--init", str(camera_run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--set init_from" in err
    assert not (tmp_path / "x").exists()


def test_cli_demo_seed_is_the_training_seed(tmp_path, monkeypatch):
    """`hydranet demo --seed N` passes N to run_demo as train_seed (default 0); the stages are stubbed."""
    import hydranet.cli.demo

    seen = []
    monkeypatch.setattr(hydranet.cli.demo, "run_demo", lambda out, **k: seen.append(k))
    monkeypatch.setattr(hydranet.cli.demo, "engine_round", lambda *a, **k: None)
    assert main(["demo", "--out", str(tmp_path / "demo"), "--seed", "7"]) == 0
    assert main(["demo", "--out", str(tmp_path / "demo")]) == 0
    assert seen == [{"train_seed": 7}, {"train_seed": 0}]


def test_a_head_the_init_holds_keeps_its_weights_when_a_prior_buffer_is_new(sim, tmp_path):
    """A checkpoint whose det3d head predates `heading_prior` starts a model with it (label priors on): the head's
    trained weights are loaded as they are, not refitted to the labels, and the new buffer stays 0, the head as it
    was trained; a head the checkpoint lacks is fitted."""
    old = tmp_path / "old"
    train(cfg(sim, HYDRA, "label_priors=true"), old, progress=False)
    state = load_checkpoint(old)["model"]
    tasks = HYDRA.replace("{name: det3d, options: {width: 16}}", "{name: det3d, options: {width: 16, heading_prior: true}}")
    got = train(cfg(sim, tasks, "label_priors=true"), tmp_path / "new", init_from=old, stop_at=0,
                progress=False).state_dict()
    assert [k for k in state if not torch.equal(got[k], state[k])] == []
    assert float(got["heads.det3d.head.heading_prior"].abs().max()) == 0.0
    fresh = train(cfg(sim, tasks, "label_priors=true"), tmp_path / "fresh", stop_at=0, progress=False).state_dict()
    assert float(fresh["heads.det3d.head.heading_prior"].abs().max()) > 0.0  # fitted where nothing was loaded
