"""`hydranet engine retrain` (data_engine/retrain.py, docs/data_engine.md "Retrain"): the accepted labels
as a dataset (accepted only, deterministic, oracle frames with their label channels, human frames
supervising only their 2D heads), a human 2D label giving exactly zero gradient to the heads it cannot
supervise, `init_from` starting at the production's weights (fresh optimizer, recorded, other
architectures refused), a retrain killed and resumed bit-identical to an uninterrupted one, export of
the result. One tiny fleet (2 clips x 3 frames, 96x64, nuscenes6) and a 2-step engine_tiny production."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from engine_fixtures import REPO, make_fleet

from data_engine.catalog import Catalog
from hydranet.io import file_sha256
from data_engine.fleet import Fleet
from data_engine.label_exchange import import_labels, send
from data_engine.label_queue import create_jobs, load_jobs
from data_engine.labeling import build_backend
from data_engine.labeling.base import Vocabulary
from data_engine.labeling.files import image_entries, write_coco
from data_engine.labels import accepted_versions, open_catalog, transition
from data_engine.retrain import HUMAN_HEADS, RetrainConfig, RetrainError, materialize_accepted, retrain
from hydranet.config import ConfigError

TINY = ["steps=2", "checkpoint_every=2", "batch_size=1", "optim.warmup_steps=1", "device=cpu", "augment.photometric=false",
        "data.cameras=[CAM_FRONT, CAM_BACK]"]  # two of the fleet's six cameras: a quick model


def _select(tmp: Path, name: str, frames) -> Path:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps({"name": name, "frames": [{"clip": f"clip_{c:05d}", "frame": f} for c, f in frames]}))
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    """Fleet, production run, and a catalog whose jobs are in every state: accepted oracle labels
    (clip 0 frames 0, 1; clip 1 frame 0), an accepted file label (clip 1 frame 1), an oracle label
    rejected (clip 0 frame 2), one labelled but not accepted (clip 1 frame 2), one only sent and
    one only queued (clip 0 frame 2 in other selections)."""
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    tmp = tmp_path_factory.mktemp("retrain")
    fleet = make_fleet(tmp / "fleet", clips=2, frames=3, seed=5)
    prod = tmp / "production"
    train(load_experiment(REPO / "configs" / "engine_tiny.yaml", [f"data.root={fleet}", *TINY]), prod, progress=False)
    cat_path = tmp / "catalog.db"
    with Catalog(cat_path, create=True) as c:
        c.add_fleet(Fleet(fleet))
    oracle = build_backend("oracle")
    with open_catalog(cat_path) as cat:
        for name, frames in (("ok", [(0, 0), (0, 1), (1, 0)]), ("bad", [(0, 2)]), ("open", [(1, 2)])):
            create_jobs(cat, _select(tmp, name, frames), "oracle")
            send(cat, oracle, name)
            import_labels(cat, oracle, name)
        transition(cat, [j.id for j in load_jobs(cat, "ok")], "accepted")
        transition(cat, [j.id for j in load_jobs(cat, "bad")], "rejected")
        # a person's 2D boxes, through the COCO file round trip
        create_jobs(cat, _select(tmp, "human", [(1, 1)]), "files")
        send(cat, build_backend("files", out=tmp / "export"), "human")
        jobs = load_jobs(cat, "human")
        coco = tmp / "team.coco.json"
        write_coco(coco, image_entries(jobs, {j.id: json.loads((j.folder / "labels.json").read_text()) for j in jobs}),
                   Vocabulary.from_dataset(fleet), "team")
        import_labels(cat, build_backend("files", files=[coco]), "human")
        transition(cat, [j.id for j in jobs], "accepted")
        create_jobs(cat, _select(tmp, "sent-only", [(0, 2)]), "files")
        send(cat, build_backend("files", out=tmp / "export2"), "sent-only")
        create_jobs(cat, _select(tmp, "queued-only", [(1, 2)]), "oracle")
        accepted = accepted_versions(cat)
    return {"tmp": tmp, "fleet": fleet, "production": prod, "catalog": cat_path, "accepted": accepted}


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_materialized_set_holds_accepted_labels_only_and_is_deterministic(world, tmp_path):
    from hydranet.data import SimDataset
    from hydranet.data.formats import check_dataset

    a = materialize_accepted(world["catalog"], tmp_path / "a")
    assert materialize_accepted(world["catalog"], tmp_path / "b")["labels"] == a["labels"]
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")  # same catalog, same bytes
    assert a["frames"] == 4 and a["by_source"] == {"oracle": 3, "file": 1} and a["scenes"] == 2
    assert sorted(x["frame_id"] for x in a["labels"]) == sorted(world["accepted"])
    ds = SimDataset(tmp_path / "a")
    # frame 2 of either clip: rejected, labelled-not-accepted, sent, queued: never there
    assert [(s, d) for s, d in ds.frame_ids] == [(ds.scenes[0]["name"], "000000"), (ds.scenes[0]["name"], "000001"),
                                                  (ds.scenes[1]["name"], "000000"), (ds.scenes[1]["name"], "000001")]
    assert [s["clip"]["name"] for s in ds.scenes] == ["clip_00000", "clip_00001"]
    assert ds.supervises == frozenset(SimDataset(world["fleet"]).supervises)
    fleet = world["fleet"] / "scenes"
    for i, (scene, fdir) in enumerate(ds.frame_ids):
        clip = ds.scenes[0 if i < 2 else 1]["clip"]["name"]
        frame = ds.scenes[0 if i < 2 else 1]["frames"][i % 2]
        sample = ds[i]
        folder = tmp_path / "a" / "scenes" / scene / fdir
        src = fleet / clip / fdir
        assert (folder / "CAM_FRONT.jpg").stat().st_ino == (src / "CAM_FRONT.jpg").stat().st_ino  # hard link
        assert sample["labels"]["cameras"] == world["accepted"][frame["label"]["frame_id"]]["payload"]["cameras"]
        if frame["label"]["source"] == "oracle":
            assert sample["supervises"] == set(ds.supervises) and "depth" in sample and (folder / "bev.png").exists()
            assert sample["labels"]["boxes3d"] == json.loads((src / "labels.json").read_text())["boxes3d"]
        else:  # a file label: 2D boxes only, no label channel files, no 3D boxes
            assert sample["supervises"] == set(HUMAN_HEADS) and "depth" not in sample and "drivable" not in sample
            assert sorted(p.name for p in folder.iterdir()) == sorted([f"{c}.jpg" for c in ds.rig.names] + ["labels.json"])
            assert sample["labels"]["boxes3d"] == []
    with pytest.raises(FileExistsError, match="--overwrite"):
        materialize_accepted(world["catalog"], tmp_path / "a")
    report = check_dataset(tmp_path / "a")  # `hydranet data check`: boxes without track ids count too
    assert not report["bad"] and report["frames"] == 4 and sum(k for *_, k in report["classes"]) > 0


def test_a_human_2d_label_gives_zero_gradient_to_the_heads_it_cannot_supervise(world, tmp_path):
    from hydranet.checkpoint import load_model
    from hydranet.data import SimDataset
    from hydranet.loader import Collate, LabelledFrames

    materialize_accepted(world["catalog"], tmp_path / "acc")
    ds = SimDataset(tmp_path / "acc")
    model, cfg, _ = load_model(world["production"])
    frames = LabelledFrames(ds, model.target_builders(), cfg.data.image_size, clip_length=model.video_frames)
    human = next(i for i in range(len(ds)) if ds[i].get("supervises") == set(HUMAN_HEADS))
    assert frames[human]["supervised"] == {h: h in HUMAN_HEADS for h in model.target_builders()}
    model.train()
    model.zero_grad(set_to_none=True)
    losses = model(Collate(model.target_builders())([frames[human]]), "loss")
    model.backward(losses)
    for head in ("lanes", "drivable", "depth", "det3d"):
        assert losses[f"{head}.samples"].item() == 0.0 and losses[head].item() == 0.0
        assert all(p.grad is None or bool((p.grad == 0).all()) for p in model.heads[head].parameters()), head
    assert losses["det2d.samples"].item() == 1.0
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.heads["det2d"].parameters())
    oracle = LabelledFrames(ds, model.target_builders(), cfg.data.image_size, clip_length=model.video_frames)[0]
    assert all(oracle["supervised"].values())


def test_init_from_starts_at_the_production_weights_and_refuses_another_architecture(world, tmp_path):
    from hydranet.checkpoint import load_checkpoint
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    prod = load_checkpoint(world["production"])
    cfg = load_experiment(REPO / "configs" / "engine_tiny.yaml", [f"data.root={world['fleet']}", *TINY])
    model = train(cfg, tmp_path / "zero", init_from=world["production"], stop_at=0, progress=False)
    assert all(torch.equal(v, prod["model"][k]) for k, v in model.state_dict().items())  # step 0 = production
    train(cfg, tmp_path / "one", init_from=world["production"], stop_at=1, progress=False)
    one = load_checkpoint(tmp_path / "one")
    assert one["step"] == 1 and {int(s["step"]) for s in one["optimizer"]["state"].values()} == {1}  # fresh AdamW
    assert one["init_from"]["sha256"] == file_sha256(world["production"] / "checkpoint.pt")
    assert json.loads((tmp_path / "one" / "config.json").read_text())["init_from"] == str(world["production"])
    other = load_experiment(REPO / "configs" / "engine_tiny.yaml", [f"data.root={world['fleet']}", *TINY, "model.neck_width=32"])
    with pytest.raises(ValueError, match="config key 'init_from'.*does not fit this model") as e:
        train(other, tmp_path / "other", init_from=world["production"], progress=False)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="differs from config key 'init_from'"):
        train(other.__class__(**{**other.__dict__, "init_from": "elsewhere"}), tmp_path / "x", init_from=world["production"])


def test_retrain_resumes_exactly_records_its_inputs_and_exports(world, tmp_path):
    from deploy.export import export_checkpoint
    from hydranet.checkpoint import load_checkpoint

    rc = RetrainConfig(steps=2, mix=0.5, lr=1e-3)
    whole = retrain(world["production"], world["catalog"], tmp_path / "whole", cfg=rc, progress=False)
    part = tmp_path / "part"
    retrain(world["production"], world["catalog"], part, cfg=rc, progress=False, stop_at=1)
    assert load_checkpoint(part)["step"] == 1
    with pytest.raises(FileExistsError, match="--resume"):
        retrain(world["production"], world["catalog"], part, cfg=rc, progress=False)
    with pytest.raises(RetrainError, match="--mix 0.25 differs"):
        retrain(world["production"], world["catalog"], part, mix=0.25, cfg=rc, resume=True, progress=False)
    retrain(world["production"], world["catalog"], part, cfg=rc, resume=True, progress=False)
    a, b = load_checkpoint(whole), load_checkpoint(part)
    assert a["step"] == b["step"] == 2
    assert all(torch.equal(v, b["model"][k]) for k, v in a["model"].items())  # bit-identical
    before = (part / "checkpoint.pt").stat().st_mtime_ns
    retrain(world["production"], world["catalog"], part, cfg=rc, resume=True, progress=False)  # finished: a no-op
    assert (part / "checkpoint.pt").stat().st_mtime_ns == before

    rec = json.loads((whole / "retrain.json").read_text())
    assert rec["production_sha256"] == file_sha256(world["production"] / "checkpoint.pt") and rec["mix"] == 0.5
    assert sorted((x["label_id"], x["version"]) for x in rec["labels"]) == sorted(
        (v["label_id"], v["version"]) for v in world["accepted"].values())
    cfg = json.loads((whole / "config.json").read_text())
    assert [(s["name"], s["weight"], s["cameras"]) for s in cfg["data"]["sources"]] == [
        ("base", 0.5, ["CAM_FRONT", "CAM_BACK"]), ("accepted", 0.5, ["CAM_FRONT", "CAM_BACK"])]
    assert cfg["optim"]["lr"] == 1e-3 and cfg["init_from"] == str((world["production"] / "checkpoint.pt").resolve())
    res = export_checkpoint(whole, tmp_path / "model.onnx", world["fleet"], frames=1, verbose=False)
    assert res.path.exists()


def test_retrain_keeps_the_productions_batchnorm_statistics_unless_told(world, tmp_path):
    """retrain.norm_eval (the default): every BatchNorm running statistic is the production's after the retrain while
    the weights train; off, batches of one frame move them (what failed the gate on the 60-minute production)."""
    from hydranet.checkpoint import load_checkpoint

    prod = load_checkpoint(world["production"])["model"]
    stats = [k for k in prod if k.endswith(("running_mean", "running_var"))]
    assert stats
    for norm_eval in (True, False):
        run = retrain(world["production"], world["catalog"], tmp_path / str(norm_eval), progress=False,
                      cfg=RetrainConfig(steps=2, mix=0.5, lr=1e-3, norm_eval=norm_eval))
        got = load_checkpoint(run)["model"]
        assert json.loads((run / "config.json").read_text())["norm_eval"] is norm_eval
        assert json.loads((run / "retrain.json").read_text())["norm_eval"] is norm_eval
        assert any(not torch.equal(got[k], v) for k, v in prod.items() if k.endswith("weight"))  # the weights trained
        kept = [torch.equal(got[k], prod[k]) for k in stats]
        assert all(kept) if norm_eval else not any(kept)
    with pytest.raises(ConfigError, match="retrain.norm_eval"):
        RetrainConfig(norm_eval="yes")


def test_refusals(world, tmp_path):
    empty = tmp_path / "empty.db"
    with Catalog(empty, create=True) as c:
        c.add_fleet(Fleet(world["fleet"]))
    with pytest.raises(RetrainError, match="no accepted labels.*--accept all"):
        retrain(world["production"], empty, tmp_path / "r", progress=False)
    with pytest.raises(RetrainError, match="no retrain.json"):
        retrain(world["production"], world["catalog"], tmp_path / "r", resume=True, progress=False)
    with pytest.raises(FileNotFoundError, match="production checkpoint"):
        retrain(tmp_path / "nope", world["catalog"], tmp_path / "r", progress=False)
    with pytest.raises(ConfigError, match="retrain.mix"):
        retrain(world["production"], world["catalog"], tmp_path / "r", mix=1.0, progress=False)
    assert not (tmp_path / "r").exists()


def test_clips_of_several_fleets_stay_apart(world, tmp_path):
    """The loop labels a new fleet each round, all with clips named clip_00000...: one scene per (fleet, clip)."""
    import shutil

    from hydranet.data import SimDataset

    other = tmp_path / "fleet2"
    shutil.copytree(world["fleet"], other)
    cat = tmp_path / "two.db"
    oracle = build_backend("oracle")
    with Catalog(cat, create=True) as c:
        c.add_fleet(Fleet(world["fleet"]))
        c.add_fleet(Fleet(other))
    with open_catalog(cat) as c:
        for k, fleet in enumerate((world["fleet"], other)):
            sel = tmp_path / f"s{k}.json"
            sel.write_text(json.dumps({"name": f"s{k}", "fleet": str(fleet), "frames": [{"clip": "clip_00000", "frame": 1}]}))
            create_jobs(c, sel, "oracle")
            send(c, oracle, f"s{k}")
            import_labels(c, oracle, f"s{k}")
            transition(c, [j.id for j in load_jobs(c, f"s{k}")], "accepted")
    got = materialize_accepted(cat, tmp_path / "acc")
    ds = SimDataset(tmp_path / "acc")
    assert got["frames"] == 2 and [s["clip"] for s in ds.scenes] == [
        {"fleet": str(world["fleet"].resolve()), "name": "clip_00000"}, {"fleet": str(other.resolve()), "name": "clip_00000"}]
    assert len({s["name"] for s in ds.scenes}) == 2 and ds.meta["accepted"]["fleets"] == [str(world["fleet"].resolve()),
                                                                                          str(other.resolve())]


def _one_label_catalog(world, path: Path, frame: tuple[int, int]) -> Path:
    """Another catalog over the same fleet with one accepted oracle label (a user's own, or a loop's)."""
    oracle = build_backend("oracle")
    with Catalog(path, create=True) as c:
        c.add_fleet(Fleet(world["fleet"]))
    with open_catalog(path) as cat:
        create_jobs(cat, _select(path.parent, f"own-{path.stem}", [frame]), "oracle")
        send(cat, oracle, f"own-{path.stem}")
        import_labels(cat, oracle, f"own-{path.stem}")
        transition(cat, [j.id for j in load_jobs(cat, f"own-{path.stem}")], "accepted")
    return path


def test_labels_of_an_earlier_retrain_are_carried_unless_a_person_drops_them(world, tmp_path):
    """Issue 34 item 1: a production retrained on catalog A's labels, retrained again from catalog B (a loop's own),
    keeps A's labels in training; from A again they are superseded (A's labels are materialized anew); a person may
    drop them (recorded); a label set that is gone is refused, never silently left out."""
    import shutil

    from data_engine.retrain import label_sources_line

    rc = RetrainConfig(steps=1, mix=0.5, lr=1e-3)
    first = retrain(world["production"], world["catalog"], tmp_path / "first", cfg=rc, progress=False)
    other = _one_label_catalog(world, tmp_path / "loop.db", (0, 2))

    def sources(run: Path) -> list[tuple[str, float, str]]:
        cfg = json.loads((run / "config.json").read_text())
        return [(s["name"], round(s["weight"], 6), s["root"]) for s in cfg["data"]["sources"]]

    second = retrain(first, other, tmp_path / "second", cfg=rc, progress=False)
    assert [(n, w) for n, w, _ in sources(second)] == [("base", 0.25), ("accepted-1", 0.25), ("accepted", 0.5)]
    assert sources(second)[1][2] == str((first / "accepted").resolve())
    rec = json.loads((second / "retrain.json").read_text())
    assert [(s["name"], s["catalog"], s["frames"], s["carried"]) for s in rec["label_sources"]] == [
        ("accepted", str(other.resolve()), 1, False), ("accepted-1", str(world["catalog"].resolve()), 4, True)]
    line = label_sources_line(rec)
    assert "accepted-1 (carried): 4 frames (file 1, oracle 3)" in line and str(world["catalog"].resolve()) in line

    third = retrain(second, other, tmp_path / "third", cfg=rc, progress=False)  # B again: B's set superseded, A's kept
    assert [n for n, _, _ in sources(third)] == ["base", "accepted-1", "accepted"]
    assert sources(third)[1][2] == str((first / "accepted").resolve())
    rec = json.loads((third / "retrain.json").read_text())
    assert [d["root"] for d in rec["dropped_labels"]] == [str((second / "accepted").resolve())]
    assert "superseded" in rec["dropped_labels"][0]["why"]

    dropped = retrain(second, other, tmp_path / "dropped", cfg=rc, progress=False, drop_labels=(world["catalog"],))
    assert [n for n, _, _ in sources(dropped)] == ["base", "accepted"]
    assert "removed (--drop-labels)" in label_sources_line(json.loads((dropped / "retrain.json").read_text()))
    with pytest.raises(RetrainError, match="--drop-labels .* is neither"):
        retrain(second, other, tmp_path / "x", cfg=rc, progress=False, drop_labels=(tmp_path / "elsewhere",))

    shutil.rmtree(first / "accepted")
    with pytest.raises(RetrainError, match=r"accepted labels at .*first/accepted, which no longer exist.*--drop-labels"):
        retrain(second, other, tmp_path / "gone", cfg=rc, progress=False)
    assert not (tmp_path / "gone").exists()


def test_an_auto_label_supervises_the_heads_the_labeller_fused():
    """An accepted auto label trains what its payload names (det2d, det3d), never signs_lights from its sign boxes
    (the auto-labeller fuses no sign classes); a person's boxes train HUMAN_HEADS."""
    from data_engine.retrain import supervised

    assert supervised({"supervises": ["det2d", "det3d"]}, "auto", recorded=False) == ["det2d", "det3d"]
    assert supervised({}, "auto", recorded=True) == ["det2d"]
    assert supervised({}, "label-studio", recorded=False) == list(HUMAN_HEADS) and "signs_lights" in HUMAN_HEADS

