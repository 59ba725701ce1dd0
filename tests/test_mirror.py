"""Left-right mirroring (`hydranet.loader.mirror`, `augment.hflip_p`): every per-camera label follows the pixels, the
mirrored intrinsics project a 3D point to the mirrored pixel, and the view transform lifts a mirrored image to the
same BEV cells, so BEV labels stay as they are."""
from __future__ import annotations

import numpy as np
import pytest

from hydranet.bevgrid import BevGrid
from hydranet.config import ConfigError
from hydranet.data import SimDataset
from hydranet.experiment import AugmentConfig
from hydranet.geometry import project
from hydranet.loader import Augmenter, mirror
from hydranet.models.view_transform import projection_lut


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from sim.config import SimConfig
    from sim.generate import generate_dataset

    return generate_dataset(tmp_path_factory.mktemp("sim") / "tiny", SimConfig(image_width=160, image_height=96,
                            frames_per_scene=3), scenes=1, seed=3, progress=False)


def test_mirror_moves_every_camera_label_with_its_pixels(data):
    sample = SimDataset(data)[1]
    flip = [n % 2 == 0 for n in range(len(sample["camera_names"]))]
    out = mirror(sample, flip)
    W = sample["images"].shape[2]
    n_boxes = n_lanes = 0
    for n, name in enumerate(sample["camera_names"]):
        if not flip[n]:
            assert np.array_equal(out["images"][n], sample["images"][n])
            assert out["labels"]["cameras"][name] == sample["labels"]["cameras"][name]
            continue
        assert np.array_equal(out["images"][n], sample["images"][n][:, ::-1])
        assert np.array_equal(out["depth"][n], sample["depth"][n][:, ::-1])
        assert np.array_equal(out["drivable"][n], sample["drivable"][n][:, ::-1])
        np.testing.assert_array_equal(out["normals"][n][..., 0], -sample["normals"][n][:, ::-1, 0])
        np.testing.assert_array_equal(out["normals"][n][..., 1:], sample["normals"][n][:, ::-1, 1:])
        before, after = sample["labels"]["cameras"][name], out["labels"]["cameras"][name]
        for b, a in zip(before["boxes2d"], after["boxes2d"], strict=True):
            x0, y0, x1, y1 = b["bbox"]
            assert a["bbox"] == pytest.approx([W - x1, y0, W - x0, y1]) and a["class"] == b["class"]
            n_boxes += 1
        for b, a in zip(before["lanes2d"], after["lanes2d"], strict=True):
            np.testing.assert_allclose(np.asarray(a["points"]), np.asarray(b["points"]) * [-1, 1] + [W - 1, 0])
            n_lanes += 1
    assert n_boxes and n_lanes
    for n, name in enumerate(sample["camera_names"]):  # each mirrored box is its object's extent in the mirrored pixels
        for b in out["labels"]["cameras"][name]["boxes2d"] if flip[n] else []:
            rows, cols = np.nonzero(out["instance"][n] == b["track_id"])
            assert b["bbox"] == [cols.min(), rows.min(), cols.max() + 1, rows.max() + 1]
    back = mirror(out, flip)  # mirroring twice gives the sample back
    for key in ("images", "depth", "normals", "intrinsics"):
        np.testing.assert_array_equal(back[key], sample[key])
    for name, cam in sample["labels"]["cameras"].items():
        again = back["labels"]["cameras"][name]
        np.testing.assert_allclose([b["bbox"] for b in again["boxes2d"]], [b["bbox"] for b in cam["boxes2d"]])
        for a, b in zip(again["lanes2d"], cam["lanes2d"], strict=True):
            np.testing.assert_allclose(a["points"], b["points"], atol=1e-9)
    assert out["labels"]["boxes3d"] == sample["labels"]["boxes3d"]  # BEV labels are not touched


def test_mirrored_intrinsics_project_to_the_mirrored_pixel(data):
    sample = SimDataset(data)[0]
    W = sample["images"].shape[2]
    K, K_m = sample["intrinsics"][0], mirror(sample, [True] + [False] * 5)["intrinsics"][0]
    pts = np.random.default_rng(0).uniform([-8, -3, 4], [8, 3, 40], (50, 3))  # camera frame, in front
    uv, uv_m = project(pts, K)[0], project(pts, K_m)[0]  # (50, 2) pixels
    np.testing.assert_allclose(uv_m[:, 0], W - 1 - uv[:, 0], atol=1e-3)
    np.testing.assert_allclose(uv_m[:, 1], uv[:, 1], atol=1e-3)


def test_the_view_transform_lifts_a_mirrored_image_to_the_same_cells(data):
    ds = SimDataset(data)
    sample, grid = ds[0], BevGrid.from_meta(ds.meta)
    H, W = sample["images"].shape[1:3]
    stride = 4
    flip = [True] * len(sample["camera_names"])
    plain = projection_lut(grid, (0.0, 1.0), sample["intrinsics"], sample["cam2ego"], (H, W), stride)
    mirrored = projection_lut(grid, (0.0, 1.0), mirror(sample, flip)["intrinsics"], sample["cam2ego"], (H, W), stride)
    feats = np.random.default_rng(1).normal(size=(len(flip), H // stride, W // stride)).astype(np.float32)

    def lift(table, f):
        flat = np.append(f.reshape(-1), 0.0)  # the last index is the empty slot
        return (flat[table.index] * table.weight).sum(1)

    a, b = lift(plain, feats), lift(mirrored, feats[:, :, ::-1])
    assert np.array_equal(plain.seen, mirrored.seen)
    # a point on a feature-cell boundary may fall on either side; all other cells are equal
    assert np.mean(np.isclose(a, b, atol=1e-5)) > 0.99


def test_augmenter_mirrors_by_its_own_stream(data):
    sample = SimDataset(data)[0]
    n = len(sample["camera_names"])
    always = Augmenter(photometric=False, geometric=False, hflip_p=1.0)
    assert always.active
    out = always(sample, (0, 1, 2))
    assert all(np.array_equal(out["images"][i], sample["images"][i][:, ::-1]) for i in range(n))
    half = Augmenter(photometric=False, geometric=False, hflip_p=0.5)
    flips = [[np.array_equal(half(sample, (0, e, 0))["images"][i], sample["images"][i][:, ::-1]) for i in range(n)]
             for e in range(8)]
    assert 0 < np.mean(flips) < 1  # some cameras, not all
    assert flips[3] == [np.array_equal(half(sample, (0, 3, 0))["images"][i], sample["images"][i][:, ::-1])
                        for i in range(n)]  # the same key (a clip's frames) mirrors the same cameras
    # the mirror draws from a stream of its own: the zoom and photometric draws are those of an augmenter without it
    zoom = {"photometric": True, "scale_range": (1.0, 1.5), "geometric_p": 1.0}
    mirrored = Augmenter(**zoom, hflip_p=1.0)(sample, (0, 1, 2))
    plain = Augmenter(**zoom)(sample, (0, 1, 2))
    assert not np.array_equal(plain["images"], sample["images"])  # zoomed and recoloured
    np.testing.assert_array_equal(plain["depth"], mirror(mirrored, [True] * n)["depth"])
    np.testing.assert_array_equal(plain["intrinsics"], mirror(mirrored, [True] * n)["intrinsics"])


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_hflip_p_outside_0_1_is_refused(p):
    with pytest.raises(ConfigError, match="augment.hflip_p"):
        AugmentConfig(hflip_p=p)
    with pytest.raises(ValueError, match="augment.hflip_p"):
        Augmenter(hflip_p=p)


def test_mirroring_reaches_bev_models_only_with_hflip_bev():
    """The two-stage recipe mirrors in its trunk stage (camera heads only) and not in the fused stage, where a
    mirrored car would keep its label's yaw; hflip_bev opts the BEV model in."""
    grid = BevGrid((-10.0, 10.0), (-10.0, 10.0), 1.0)
    a = AugmentConfig(hflip_p=0.5)
    assert Augmenter.from_config(a, bev=False).hflip_p == 0.5
    assert Augmenter.from_config(a, bev=True, grid=grid).hflip_p == 0.0
    assert Augmenter.from_config(AugmentConfig(hflip_p=0.5, hflip_bev=True), bev=True, grid=grid).hflip_p == 0.5
    rotating = Augmenter.from_config(AugmentConfig(bev_rotation_deg=10.0), bev=True, grid=grid)
    assert rotating.bev_rotation > 0 and Augmenter.from_config(AugmentConfig(bev_rotation_deg=10.0), bev=False).bev_rotation == 0
