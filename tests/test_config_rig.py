"""Config loading (typed dataclasses, --set overrides), camera rigs (presets, YAML files, every
invalid rig a one-line RigError) and the CLI's one-line errors."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pytest
import yaml

from hydranet.cli import main
from hydranet.config import ConfigError, apply_overrides, from_dict, load_config, to_dict
from hydranet.geometry import camera_rotation, is_rotation
from hydranet.rig import RigError, load_rig, preset_names, rig_from_dict
from sim.config import SimConfig


# --- config ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Optim:
    lr: float = 1e-3
    kind: Literal["sgd", "adamw"] = "adamw"
    betas: tuple[float, float] = (0.9, 0.999)


@dataclass(frozen=True)
class Exp:
    name: str = "x"
    steps: int = 10
    amp: bool = False
    tasks: tuple[str, ...] = ("det",)
    optim: Optim = field(default_factory=Optim)


def test_unknown_key_names_dotted_key_and_allowed():
    with pytest.raises(ConfigError) as e:
        from_dict(Exp, {"optim": {"lr": 0.1, "learning_rate": 0.2}})
    msg = str(e.value)
    assert "optim.learning_rate" in msg
    for k in ("betas", "kind", "lr"):
        assert k in msg
    assert "\n" not in msg
    with pytest.raises(ConfigError, match=r"'stepz'.*steps"):
        from_dict(Exp, {"stepz": 3})


@pytest.mark.parametrize("data, key", [
    ({"steps": "ten"}, "steps"),
    ({"steps": 1.5}, "steps"),
    ({"steps": True}, "steps"),  # bool is not an int here
    ({"amp": "yes"}, "amp"),
    ({"name": 3}, "name"),
    ({"optim": {"lr": "fast"}}, "optim.lr"),
    ({"optim": 3}, "optim"),
    ({"tasks": "det"}, "tasks"),
    ({"tasks": ["det", 2]}, "tasks[1]"),
    ({"optim": {"betas": [0.9]}}, "optim.betas"),
])
def test_wrong_type_names_key(data, key):
    with pytest.raises(ConfigError) as e:
        from_dict(Exp, data)
    assert f"'{key}'" in str(e.value)


def test_literal_and_variadic_tuple_types():
    cfg = from_dict(Exp, {"optim": {"kind": "sgd", "lr": 1}, "tasks": ["a", "b"]})
    assert cfg.optim.kind == "sgd" and cfg.tasks == ("a", "b")
    assert isinstance(cfg.optim.lr, float)  # ints are accepted for floats
    with pytest.raises(ConfigError) as e:
        from_dict(Exp, {"optim": {"kind": "adam"}})
    assert "optim.kind" in str(e.value) and "sgd" in str(e.value) and "adamw" in str(e.value)
    assert to_dict(cfg)["tasks"] == ["a", "b"]


def test_yaml_booleans_read_back_as_the_words_a_literal_allows():
    """`--set look.shadows=on` parses `on` as YAML 1.1's True: a Literal of "auto"/"on"/"off" takes it as "on"
    (and off/no/false as "off"); a Literal without such a word still refuses a boolean, naming the key."""
    on = from_dict(SimConfig, apply_overrides(to_dict(SimConfig()), ["look.shadows=on", "look.glare=off"]))
    assert (on.look.shadows, on.look.glare) == ("on", "off")
    with pytest.raises(ConfigError, match="optim.kind"):
        from_dict(Exp, {"optim": {"kind": True}})


def test_fixed_length_tuple_type():
    cfg = from_dict(Exp, {"optim": {"betas": [0.8, 0.9]}})
    assert cfg.optim.betas == (0.8, 0.9)
    with pytest.raises(ConfigError, match=r"optim.betas\[1\]"):
        from_dict(Exp, {"optim": {"betas": [0.8, "x"]}})


def test_set_overrides(tmp_path):
    data = apply_overrides({"optim": {"lr": 0.1}}, ["optim.kind=sgd", "steps=5", "tasks=[a, b]", "optim.betas=[0.5, 0.6]"])
    assert data == {"optim": {"lr": 0.1, "kind": "sgd", "betas": [0.5, 0.6]}, "steps": 5, "tasks": ["a", "b"]}
    with pytest.raises(ConfigError, match="key.sub=value"):
        apply_overrides({}, ["steps"])
    with pytest.raises(ConfigError, match="not a section"):
        apply_overrides({"steps": 3}, ["steps.x=1"])
    path = tmp_path / "exp.yaml"
    path.write_text("name: base\nsteps: 3\noptim: {lr: 0.5}\n")
    cfg = load_config(Exp, path, ["optim.lr=0.01", "amp=true"])
    assert cfg == Exp(name="base", steps=3, amp=True, optim=Optim(lr=0.01))
    with pytest.raises(ConfigError, match="optim.lrr"):
        load_config(Exp, path, ["optim.lrr=0.01"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(Exp, tmp_path / "missing.yaml")


def test_sim_config_file_loads():
    from pathlib import Path
    cfg = load_config(SimConfig, Path(__file__).parents[1] / "configs" / "sim.yaml", ["traffic.vehicles=3"])
    assert cfg.traffic.vehicles == 3 and cfg.rig == "nuscenes6"
    with pytest.raises(ConfigError, match="traffic.vehicles"):
        load_config(SimConfig, None, ["traffic.vehicles=many"])


# --- rigs -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, n", [("nuscenes6", 6), ("tesla8", 8)])
def test_presets(name, n):
    assert name in preset_names()
    rig = load_rig(name)
    assert len(rig) == n and len(set(rig.names)) == n
    for c in rig.cameras:
        assert is_rotation(c.cam2ego[:3, :3]) and c.K[0, 0] > 0 and c.cam2ego[2, 3] > 0
    small = rig.resized(160, 96)
    assert all((c.width, c.height) == (160, 96) for c in small.cameras)
    assert rig_from_dict(rig.to_dict(), name).names == rig.names


def _cam(name="CAM_A", **kw):
    d = {"name": name, "width": 320, "height": 192, "hfov_deg": 70.0, "translation": [1.5, 0.0, 1.5],
         "ypr_deg": [0.0, 0.0, 0.0]}
    d.update(kw)
    return d


def test_rig_yaml_file(tmp_path):
    T = np.eye(4)
    T[:3, :3] = camera_rotation(np.pi, 0.1)
    T[:3, 3] = [-1.0, 0.0, 1.2]
    cams = [
        _cam("FRONT", width=640, height=360),
        _cam("LEFT", width=320, height=240, hfov_deg=100.0, ypr_deg=[90.0, 5.0, 0.0]),
        {"name": "RIGHT", "width": 400, "height": 300, "intrinsics": {"fx": 250.0, "fy": 250.0, "cx": 200.0, "cy": 150.0},
         "translation": [0.5, -0.9, 1.0], "ypr_deg": [-90.0, 10.0, 0.0]},
        {"name": "REAR", "width": 200, "height": 100, "K": [[100.0, 0, 99.5], [0, 100.0, 49.5], [0, 0, 1]],
         "cam2ego": T.tolist()},
        _cam("NARROW", width=1280, height=720, hfov_deg=30.0),
    ]
    path = tmp_path / "my_rig.yaml"
    path.write_text(yaml.safe_dump({"name": "five", "cameras": cams}))
    rig = load_rig(str(path))
    assert rig.name == "five" and rig.names == ["FRONT", "LEFT", "RIGHT", "REAR", "NARROW"]
    assert [(c.width, c.height) for c in rig.cameras] == [(640, 360), (320, 240), (400, 300), (200, 100), (1280, 720)]
    np.testing.assert_allclose(rig.cameras[3].cam2ego, T)
    np.testing.assert_allclose(rig.cameras[0].K[0, 0], 320 / np.tan(np.radians(35)))
    np.testing.assert_allclose(rig.cameras[1].cam2ego[:3, 2], camera_rotation(np.pi / 2, np.radians(5))[:, 2], atol=1e-12)


def _bad_rotation():
    T = np.eye(4)
    T[:3, :3] = camera_rotation(0.0) * 1.1
    T[:3, 3] = [1, 0, 1.5]
    return T.tolist()


@pytest.mark.parametrize("cam, needle", [
    (_cam(intrinsics={"fx": -100.0, "fy": 100.0, "cx": 160.0, "cy": 96.0}, hfov_deg=None), "focal"),
    (_cam(K=[[0.0, 0, 160], [0, 100, 96], [0, 0, 1]], hfov_deg=None), "focal"),
    (_cam(cam2ego=_bad_rotation(), translation=None, ypr_deg=None), "orthonormal"),
    (_cam(ypr_deg=[0.0, -80.0, 0.0]), "sees no road"),
    (_cam(translation=[1.0, 0.0, -0.3]), "below the road"),
])
def test_bad_rig_one_line_error(cam, needle):
    cam = {k: v for k, v in cam.items() if v is not None}
    with pytest.raises(RigError) as e:
        rig_from_dict({"name": "bad", "cameras": [_cam("OK"), cam]}, "bad.yaml")
    msg = str(e.value)
    assert needle in msg and "\n" not in msg
    assert "CAM_A" in msg  # names the camera to fix


def test_duplicate_names():
    with pytest.raises(RigError, match="unique") as e:
        rig_from_dict({"cameras": [_cam("X"), _cam("X")]})
    assert "\n" not in str(e.value)


def test_unknown_preset_lists_presets():
    with pytest.raises(RigError) as e:
        load_rig("nope")
    msg = str(e.value)
    assert "nope" in msg and "nuscenes6" in msg and "tesla8" in msg and "\n" not in msg


def test_missing_rig_file(tmp_path):
    with pytest.raises(RigError, match="does not exist"):
        load_rig(str(tmp_path / "absent.yaml"))


# --- CLI ------------------------------------------------------------------------------------

def test_cli_unknown_rig(capsys, tmp_path):
    code = main(["sim", "generate", "--rig", "nope", "--out", str(tmp_path / "ds"), "--scenes", "1", "--quiet"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error:")
    assert "nuscenes6" in err and "tesla8" in err
    assert not (tmp_path / "ds").exists()


def test_cli_unwritable_out(capsys, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    code = main(["sim", "generate", "--out", str(blocker / "ds"), "--scenes", "1", "--quiet",
                 "--set", "image_width=32", "--set", "image_height=16", "--set", "frames_per_scene=1"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error:")
    assert "choose a writable --out" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


# --- YAML: a key written twice (issue 21.7) ---------------------------------------------------------

@pytest.mark.parametrize("text, key, lines", [
    ("a: 1\nb: 2\na: 3\n", "'a'", "line 1 and line 3"),
    ("optim:\n  lr: 0.1\n  kind: sgd\n  lr: 0.001\n", "'lr'", "line 2 and line 4"),
    ("- {x: 1, y: 2, x: 3}\n", "'x'", "line 1 and line 1"),
])
def test_a_key_written_twice_is_an_error_naming_the_key_and_lines(text, key, lines):
    from hydranet.config import yaml_load

    with pytest.raises(ConfigError) as e:
        yaml_load(text, "config file c.yaml")
    msg = str(e.value)
    assert "c.yaml" in msg and key in msg and lines in msg and "twice" in msg and "\n" not in msg


def test_merge_keys_may_still_be_overridden():
    from hydranet.config import yaml_load

    text = "base: &b {lr: 0.1, kind: sgd}\nrun: {<<: *b, lr: 0.01}\nnested: {<<: {<<: *b, lr: 1}, lr: 2}\n"
    assert yaml_load(text, "c") == {"base": {"lr": 0.1, "kind": "sgd"}, "run": {"lr": 0.01, "kind": "sgd"},
                                    "nested": {"lr": 2, "kind": "sgd"}}


def test_duplicate_keys_in_files_and_overrides(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("name: a\noptim:\n  lr: 0.5\n  lr: 0.1\n")
    with pytest.raises(ConfigError, match=r"exp.yaml: key 'lr' appears twice \(line 3 and line 4\)"):
        load_config(Exp, path)
    with pytest.raises(ConfigError, match=r"override 'optim=\{lr: 1, lr: 2\}'.*'lr' appears twice"):
        load_config(Exp, None, ["optim={lr: 1, lr: 2}"])
    rig = tmp_path / "rig.yaml"
    rig.write_text("name: r\ncameras: []\nname: s\n")
    with pytest.raises(RigError, match=r"rig.yaml: key 'name' appears twice \(line 1 and line 3\)"):
        load_rig(str(rig))


@pytest.mark.parametrize("value, yaml_text", [(float("nan"), ".nan"), (float("inf"), ".inf"), (float("-inf"), "-.inf"),
                                              (10 ** 400, "1" + "0" * 400)])
def test_non_finite_config_numbers_are_refused(value, yaml_text):
    """No config number means NaN or infinity (and config.json could not hold it): refused naming the key."""
    with pytest.raises(ConfigError, match="'optim.lr'.*finite"):
        from_dict(Exp, {"optim": {"lr": value}})
    with pytest.raises(ConfigError, match="'optim.lr'.*finite"):
        load_config(Exp, None, [f"optim.lr={yaml_text}"])


# --- rig keys checked before numpy sees them (issue 21.7) ------------------------------------------

def _one(cam, drop=()):
    cam = {k: v for k, v in cam.items() if k not in drop}
    return rig_from_dict({"name": "r", "cameras": [cam]}, "my_rig.yaml")


@pytest.mark.parametrize("kw, drop, words", [
    ({"K": [[250, 0, 159.5], [0, 250, 95.5], [0, 0, 2]]}, ("hfov_deg",), ("'K'", "last row must be [0, 0, 1]")),
    ({"K": [[250, 5000, 159.5], [0, 250, 95.5], [0, 0, 1]]}, ("hfov_deg",), ("'K'", "skew", "0.01 * fx = 2.5")),
    ({"K": [[250, 3, 159.5], [0, 250, 95.5], [0, 0, 1]]}, ("hfov_deg",), ("'K'", "skew")),  # 3 > 2.5
    ({"K": [[250, 0, 159.5], [1e-6, 250, 95.5], [0, 0, 1]]}, ("hfov_deg",), ("'K'", "[1][0]")),
    ({"K": [[250, 0], [0, 250]]}, ("hfov_deg",), ("'K'", "3x3", "2 rows of 2, 2")),
    ({"K": [250, 0, 159.5, 0, 250, 95.5, 0, 0, 1]}, ("hfov_deg",), ("'K'", "3x3")),
    ({"K": [[0, 0, 159.5], [0, 250, 95.5], [0, 0, 1]]}, ("hfov_deg",), ("'K'", "focal", "singular")),
    ({"intrinsics": {"fx": 250, "cx": 159.5, "cy": 95.5}}, ("hfov_deg",), ("'intrinsics'", "missing 'fy'")),
    ({"intrinsics": {"fx": 250, "fy": True, "cx": 159.5, "cy": 95.5}}, ("hfov_deg",), ("'intrinsics.fy'", "number")),
    ({"hfov_deg": "wide"}, (), ("hfov_deg", "'wide'")),
    ({"hfov_deg": float("nan")}, (), ("hfov_deg", "nan")),
    ({"width": 320.0}, (), ("'width'", "320.0")),
    ({"height": 0}, (), ("'height'", "from 1 to 16384")),
    ({"ypr_deg": [0, 0, 0, 0]}, (), ("'ypr_deg'", "3 numbers", "got 4")),
    ({}, ("ypr_deg",), ("'ypr_deg' is missing",)),
    ({"translation": [1e6, 0, 1.5]}, (), ("'translation'", "1e+06 m", "millimetres")),
    ({"cam2ego": [[0, 0, 1, 1.5], [1, 0, 0, 0], [0, -1, 0, 1.5], [0, 0, 0, 1]]}, ("translation", "ypr_deg"),
     ("'cam2ego'", "reflection")),
    ({"cam2ego": [[0, 0, 1.1, 1.5], [-1, 0, 0, 0], [0, -1, 0, 1.5], [0, 0, 0, 1]]}, ("translation", "ypr_deg"),
     ("'cam2ego'", "not orthonormal", "determinant 1.1")),
    ({"cam2ego": [[0, 0, 1, 1.5], [-1, 0, 0, 0], [0, -1, 0, 1.5], [0, 0, 1, 1]]}, ("translation", "ypr_deg"),
     ("'cam2ego'", "last row 0 0 0 1")),
    ({"distortion": {"model": "fisheye", "coeffs": [0.1, 0, 0, 10 ** 400]}}, (), ("4 finite coefficients",)),
])
def test_every_rig_key_is_checked_with_a_one_line_error_naming_it(kw, drop, words):
    with pytest.raises(RigError) as e:
        _one(_cam(**kw), drop)
    msg = str(e.value)
    assert "my_rig.yaml" in msg and "camera CAM_A" in msg and "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)


def test_a_small_skew_and_exact_calibrations_load():
    """A calibrated skew within 0.01 * fx loads (and is kept); KITTI's and nuScenes' K (zero skew) load as they are."""
    kitti = [[721.5377, 0.0, 609.5593], [0.0, 721.5377, 172.854], [0.0, 0.0, 1.0]]
    rig = _one(_cam(K=kitti, width=1242, height=375), ("hfov_deg",))
    np.testing.assert_array_equal(rig.cameras[0].K, kitti)
    cam = _one(_cam(K=[[250, 2.0, 159.5], [0, 250, 95.5], [0, 0, 1 + 1e-12]]), ("hfov_deg",)).cameras[0]
    assert cam.K[0, 1] == 2.0


def test_every_preset_passes_the_checks_and_round_trips():
    for name in preset_names():
        rig = load_rig(name)
        again = rig_from_dict(rig.to_dict(), name)
        for a, b in zip(rig.cameras, again.cameras):
            np.testing.assert_allclose(a.K, b.K, atol=1e-8)
            np.testing.assert_allclose(a.cam2ego, b.cam2ego, atol=1e-11)
        rig_from_dict(rig.resized(97, 61).to_dict(), name)  # resizing keeps K normalised


def test_rig_files_read_scientific_numbers(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("cameras:\n  - {name: A, width: 320, height: 192, K: [[2.5e2, 0, 159.5], [0, 2.5e2, 95.5], [0, 0, 1]],"
                    " translation: [1.5, 0, 1.5], ypr_deg: [0, 0, 0]}\n")
    assert load_rig(str(path)).cameras[0].K[0, 0] == 250.0


def test_non_finite_numbers_inside_free_form_options_are_refused():
    @dataclass(frozen=True)
    class Task:
        options: dict[str, Any] = field(default_factory=dict)

    assert from_dict(Task, {"options": {"a": [1.0, {"b": 2}]}}).options == {"a": [1.0, {"b": 2}]}
    with pytest.raises(ConfigError, match=r"'options.a\[1\].b': expected a finite number, got nan"):
        from_dict(Task, {"options": {"a": [1.0, {"b": float("nan")}]}})
