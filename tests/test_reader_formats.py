"""Format detection, open_dataset and `hydranet data check` over the four formats."""
from __future__ import annotations

import shutil

import pytest

from dataset_fixtures import make_sim, write_bdd100k, write_kitti, write_nuscenes
from hydranet.cli import main
from hydranet.data.reader import DatasetError
from hydranet.data.formats import check_dataset, detect_format, format_report, open_dataset


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("formats")
    sim = make_sim(base / "sim")
    return {"sim": sim, "nuscenes": write_nuscenes(sim, base / "nusc"), "kitti": write_kitti(sim, base / "kitti"),
            "bdd100k": write_bdd100k(sim, base / "bdd")}


def test_detect_and_open_every_format(roots, tmp_path):
    for fmt, root in roots.items():
        assert detect_format(root) == fmt
        ds = open_dataset(root)
        s = ds[0]
        assert s["images"].ndim == 4 and s["intrinsics"].shape[1:] == (3, 3) and "labels" in s
        assert set(s.get("supervises", ())) <= set(ds.meta.get("supervises", s.get("supervises", ())))
    with pytest.raises(DatasetError, match="not a known dataset layout"):
        detect_format(tmp_path)
    mixed = tmp_path / "mixed"
    shutil.copytree(roots["kitti"], mixed)
    (mixed / "images" / "100k").mkdir(parents=True)
    with pytest.raises(DatasetError, match=r"several formats \['kitti', 'bdd100k'\]; pass --format"):
        detect_format(mixed)
    with pytest.raises(DatasetError, match="unknown dataset format 'coco'"):
        open_dataset(roots["sim"], "coco")


def test_check_reports_classes_heads_and_bad_files(roots, tmp_path, capsys):
    r = check_dataset(roots["kitti"])
    assert r["format"] == "kitti" and r["frames"] == 8 and r["supervises"] == ["det2d", "det3d"] and not r["bad"]
    assert ("Car", "car", r["classes"][0][2]) in r["classes"] or any(c[:2] == ("Car", "car") for c in r["classes"])
    assert any(c[:2] == ("DontCare", None) for c in r["classes"])
    text = format_report(check_dataset(roots["nuscenes"]))
    assert "vehicle.car -> car" in text and "map expansion is not installed" in text
    bdd = tmp_path / "bdd"
    shutil.copytree(roots["bdd100k"], bdd)
    victim = next((bdd / "images" / "100k" / "val").glob("*.jpg"))
    victim.unlink()
    assert main(["data", "check", "--data", str(bdd), "--split", "val", "--quiet"]) == 2  # bad files: a user error
    out, err = capsys.readouterr()
    assert err.strip().splitlines()[-1].startswith("error: 1 bad file(s)") and victim.name in err
    assert f"{victim.name}: image is missing" in out and "supervises: det2d, drivable, lanes, signs_lights" in out
    assert main(["data", "check", "--data", str(roots["sim"]), "--quiet"]) == 0
    assert "format sim" in capsys.readouterr().out


class PlainFolder:
    """A new reader for the registry test: a sim dataset whose folder is marked by PLAIN.txt (a stand-in for
    another layout); it reads through SimDataset."""

    def __new__(cls, root, split=None, **kw):
        from hydranet.data import SimDataset

        ds = SimDataset(root, **kw)
        ds.format = "plain"
        ds.split = split
        return ds


def test_a_new_reader_is_one_registration(roots, tmp_path, monkeypatch, capsys):
    """Registering a format is all a reader needs beyond its file (issue 33 item 2): detection, open_dataset, the
    config's data.format, the CLI's --format choices and `data check` take it; an unknown name is refused by all."""
    import sys

    from hydranet.config import ConfigError
    from hydranet.data import formats
    from hydranet.experiment import load_experiment

    monkeypatch.setattr(sys.modules[__name__], "PlainFolder", PlainFolder)
    monkeypatch.setattr(formats, "FORMATS", dict(formats.FORMATS))
    formats.register_format(formats.DatasetFormat("plain", "Plain", f"{__name__}:PlainFolder",
                                                  lambda r: (r / "PLAIN.txt").is_file(), "plain: PLAIN.txt", ("det2d",),
                                                  default_split="all"))
    root = tmp_path / "plain"
    shutil.copytree(roots["sim"], root)
    (root / "dataset.json").rename(root / "dataset.keep")  # no longer a sim folder by its marker...
    (root / "PLAIN.txt").write_text("x")
    assert detect_format(root) == "plain"
    (root / "dataset.keep").rename(root / "dataset.json")  # ...the reader still needs the file
    assert open_dataset(root, "plain").split == "all"
    assert load_experiment("tiny", [f"data.root={root}", "data.format=plain"]).data.format == "plain"
    with pytest.raises(ConfigError, match=r"config key 'data.format': 'coco' is not allowed; choose one of \['auto', "
                                          r"'sim', 'nuscenes', 'kitti', 'bdd100k', 'cityscapes', 'tusimple', 'culane', "
                                          r"'plain'\]"):
        load_experiment("tiny", [f"data.root={root}", "data.format=coco"])
    assert main(["data", "check", "--data", str(root), "--format", "plain"]) == 0
    assert "format plain" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["data", "check", "--data", str(root), "--format", "coco"])
    assert "'plain'" in capsys.readouterr().err  # the CLI's choices come from the registry
    with pytest.raises(ValueError, match="already registered with another reader"):
        formats.register_format(formats.DatasetFormat("plain", "Plain", "x:Y", lambda r: False, "", ()))
