"""Fault rows: the nuScenes map expansion (maps/expansion/<location>.json, hydranet/data/nuscenes_map.py)
through `hydranet data check` and `hydranet train`: corrupt or truncated JSON, not a map, an outdated
version, a layer or a polygon/line/node token missing, a map of another location; controls with and
without the map (training with the map: tests/test_nuscenes_map.py). One row per case; see faultlib.py."""
from __future__ import annotations

import json
import shutil

import pytest
import yaml
from faultlib import Case, params, run_case

from dataset_fixtures import write_nuscenes_map

LOC = "boston-seaport"  # write_nuscenes_map gives the fault dataset's one scene this location


def nusc_with_map(tmp, env, edit=None, raw: str | None = None):
    """A copy of the fault nuScenes folder with its scene's map; `edit(js)` changes the map JSON in
    place, `raw` replaces the file's text."""
    root = shutil.copytree(env.nuscenes, tmp / "nusc")
    write_nuscenes_map(env.dataset, root)
    path = root / "maps" / "expansion" / f"{LOC}.json"
    if raw is not None:
        path.write_text(raw)
    elif edit is not None:
        js = json.loads(path.read_text())
        edit(js)
        path.write_text(json.dumps(js))
    return root


def check_case(id, words, edit=None, raw=None, status=2, stdout=()):
    def build(tmp, env):
        return ["data", "check", "--data", nusc_with_map(tmp, env, edit, raw)]
    return Case(id, build, status, words, stdout=stdout)


def train_case(id, words, edit=None, status=2):
    def build(tmp, env):
        root = nusc_with_map(tmp, env, edit)
        cfg = {"data": {"root": str(root), "cameras": ["CAM_FRONT"], "image_size": [64, 64]},
               "model": {"backbone": "tiny", "neck_width": 16, "neck_repeats": 1,
                         "tasks": [{"name": "lanes"}, {"name": "drivable"}]},
               "steps": 1, "batch_size": 1, "num_workers": 0}
        (tmp / "exp.yaml").write_text(yaml.safe_dump(cfg))
        return ["train", "--config", tmp / "exp.yaml", "--out", tmp / "run", "--quiet"]
    return Case(id, build, status, words)


def drop_node_of_first_line(js):
    used = js["line"][0]["node_tokens"][1]
    js["node"] = [n for n in js["node"] if n["token"] != used]


def shift(js, dx=1000.0):
    for n in js["node"]:
        n["x"] += dx


CASES = [
    check_case("map-truncated-json", (f"{LOC}.json", "corrupt json", "map expansion"), raw='{"version": "1.3", "node": ['),
    check_case("map-empty-file", (f"{LOC}.json", "corrupt json"), raw=""),
    check_case("map-not-an-object", (f"{LOC}.json", "not a map expansion"), raw="[]"),
    check_case("map-outdated-version", (f"{LOC}.json", "outdated", "1.2", "1.3"), lambda js: js.update(version="1.2")),
    check_case("map-without-version", (f"{LOC}.json", "outdated", "1.0"), lambda js: js.pop("version")),
    check_case("map-layer-missing", (f"{LOC}.json", "lane_divider", "missing"), lambda js: js.pop("lane_divider")),
    check_case("map-layer-not-a-list", (f"{LOC}.json", "drivable_area", "not a list"),
               lambda js: js.update(drivable_area={"token": "x"})),
    check_case("map-polygon-token-missing", (f"{LOC}.json", "drivable_area", "deadbeef", "lacks"),
               lambda js: js["drivable_area"][0]["polygon_tokens"].append("deadbeef")),
    check_case("map-line-token-missing", (f"{LOC}.json", "road_divider", "'nope'", "lacks"),
               lambda js: js["road_divider"][0].update(line_token="nope")),
    check_case("map-node-missing", (f"{LOC}.json", "node", "lacks"), drop_node_of_first_line),
    check_case("map-node-not-a-number", (f"{LOC}.json", "node", "x/y"), lambda js: js["node"][0].update(x="east")),
    check_case("map-of-another-location", (f"{LOC}.json", "scene_0000", "another location", LOC), shift),
    check_case("map-valid", (), status=0, stdout=("bevmap", "drivable", "lanes", "rasterized")),  # control
    Case("map-absent", lambda tmp, env: ["data", "check", "--data", env.nuscenes], 0,
         stdout=("not installed", "supervises: det2d, det3d")),  # control: no map, no map heads, a clear note
    train_case("train-with-a-corrupt-map", (f"{LOC}.json", "polygon", "lacks"),
               lambda js: js["drivable_area"][0]["polygon_tokens"].append("deadbeef")),
]


@pytest.mark.parametrize("case", params(CASES))
def test_nuscenes_map_fault(case, fault_env, tmp_path, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)
