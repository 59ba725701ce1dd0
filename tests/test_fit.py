"""hydranet.loader.fit_to: how a frame of another camera reaches the model's input size. `camera` resamples it to the
model's own pinhole (a point lands where the model's camera projects it, a box keeps its shape), `crop` keeps the
aspect, `stretch` is the plain resize; on the model's own camera `camera` is the stretch, bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

from hydranet.config import ConfigError
from hydranet.experiment import load_experiment
from hydranet.loader import camera_intrinsics, fit_to, resize_to

KITTI_K = np.array([[721.5377, 0.0, 609.5593], [0.0, 721.5377, 172.854], [0.0, 0.0, 1.0]])  # KITTI's P2
MODEL_K = np.array([[128.0, 0.0, 79.5], [0.0, 128.0, 47.5], [0.0, 0.0, 1.0]])  # a 64-degree camera at 160x96
POINT = np.array([2.0, 0.5, 20.0])  # camera frame: 2 m right, 0.5 m down, 20 m ahead


def project(K, p):
    uv = K @ p
    return uv[:2] / uv[2]


def square_point(K=KITTI_K):
    """The pixel nearest POINT's projection and the point 20 m ahead on that pixel's ray."""
    u, v = np.round(project(K, POINT)).astype(int)
    return (u, v), 20.0 * np.linalg.inv(K) @ [u, v, 1.0]


def square_sample(K=KITTI_K, size=(375, 1242), half=40):
    """One camera CAM_FRONT: a white square of 2 * half + 1 pixels centred on square_point's pixel, its box
    labelled (box edges: pixel u covers [u, u + 1], docs/dataset_format.md)."""
    H, W = size
    img = np.zeros((H, W, 3), np.uint8)
    (u, v), _ = square_point(K)
    img[v - half:v + half + 1, u - half:u + half + 1] = 255
    box = [u - half, v - half, u + half + 1, v + half + 1]
    return {"camera_names": ["CAM_FRONT"], "images": img[None], "intrinsics": K[None].astype(np.float32),
            "labels": {"cameras": {"CAM_FRONT": {"boxes2d": [{"category": "car", "bbox": box}], "lanes2d": []}}}}


def bright_centre(img):
    ys, xs = np.nonzero(img[..., 0] > 127)
    return np.array([xs.mean(), ys.mean()])


def test_camera_fit_puts_a_point_where_the_models_camera_projects_it():
    out = fit_to(square_sample(), (96, 160), "camera", {"CAM_FRONT": MODEL_K})
    assert out["images"].shape == (1, 96, 160, 3)
    np.testing.assert_allclose(out["intrinsics"][0], MODEL_K, atol=1e-4)  # the frame now has the model's camera
    target = project(MODEL_K, square_point()[1])  # pixel-centre coordinates
    assert np.abs(bright_centre(out["images"][0]) - target).max() < 0.3
    x0, y0, x1, y1 = out["labels"]["cameras"]["CAM_FRONT"]["boxes2d"][0]["bbox"]
    np.testing.assert_allclose([(x0 + x1) / 2, (y0 + y1) / 2], target + 0.5, atol=1e-3)  # edge coordinates
    # 81 px at f 721.5 -> 81 * 128 / 721.5 px at f 128, square (a stretch would squeeze it 2x across)
    np.testing.assert_allclose([x1 - x0, y1 - y0], [81 * 128 / 721.5377] * 2, rtol=1e-4)
    stretched = fit_to(square_sample(), (96, 160), "stretch")["labels"]["cameras"]["CAM_FRONT"]["boxes2d"][0]["bbox"]
    assert (stretched[3] - stretched[1]) / (stretched[2] - stretched[0]) == pytest.approx(1242 / 375 * 96 / 160, rel=1e-3)


def test_camera_fit_pads_what_the_source_does_not_see_with_black():
    """KITTI at f 128 is 221 x 67 px: the sides cropped, rows above and below padded (nothing invented)."""
    img = np.full((375, 1242, 3), 200, np.uint8)
    sample = {**square_sample(), "images": img[None]}
    out = fit_to(sample, (96, 160), "camera", {"CAM_FRONT": MODEL_K})["images"][0]
    rows = np.nonzero(out[:, 80, 0] > 100)[0]
    top = MODEL_K[1, 2] - KITTI_K[1, 2] * 128 / 721.5377  # where KITTI's first row lands
    assert rows.min() == pytest.approx(top, abs=1.0) and rows.max() == pytest.approx(top + 375 * 128 / 721.5377, abs=1.0)
    assert out[0].max() == 0 and out[-1].max() == 0 and (out[:, [0, -1]][rows[2]:rows[-2]] > 100).all()


def test_crop_keeps_the_aspect_and_the_centre():
    out = fit_to(square_sample(), (96, 160), "crop")
    s = max(96 / 375, 160 / 1242)
    x0, y0, x1, y1 = out["labels"]["cameras"]["CAM_FRONT"]["boxes2d"][0]["bbox"]
    np.testing.assert_allclose([x1 - x0, y1 - y0], [81 * s, 81 * s], rtol=1e-6)
    K = out["intrinsics"][0]
    assert K[0, 0] == pytest.approx(KITTI_K[0, 0] * s, rel=1e-5) and K[1, 1] == pytest.approx(K[0, 0], rel=1e-6)
    # the window is centred: a square at the source's centre lands at the output's centre
    img = np.zeros((375, 1242, 3), np.uint8)
    img[187 - 20:187 + 21, 620 - 20:621 + 20] = 255  # pixel-centre coordinates: centred on (620.5, 187)
    centred = fit_to({**square_sample(), "images": img[None]}, (96, 160), "crop")["images"][0]
    np.testing.assert_allclose(bright_centre(centred), [79.5, 47.5], atol=0.3)
    assert K[0, 2] == pytest.approx(s * (KITTI_K[0, 2] + 0.5) - 0.5 - 0.5 * (1242 * s - 160), abs=1e-3)


def test_camera_and_crop_fits_of_the_models_own_camera_are_the_stretch(tmp_path):
    from dataset_fixtures import make_sim

    from hydranet.data import SimDataset

    ds = SimDataset(make_sim(tmp_path / "sim", scenes=1), channels=("images", "depth", "semantic"))
    sample = ds[0]
    hw = (sample["images"].shape[1] // 2, sample["images"].shape[2] // 2)
    a = fit_to(sample, hw, "camera", camera_intrinsics(ds.rig, hw))
    b = resize_to(sample, hw)
    c = fit_to(sample, hw, "crop")  # the same aspect: the crop is the stretch too
    for key in ("images", "depth", "semantic"):
        np.testing.assert_array_equal(a[key], b[key])
        np.testing.assert_array_equal(c[key], b[key])
    np.testing.assert_allclose(a["intrinsics"], b["intrinsics"], atol=1e-5)
    for name, cam in b["labels"]["cameras"].items():
        got = a["labels"]["cameras"][name]
        assert [x["class"] for x in got["boxes2d"]] == [x["class"] for x in cam["boxes2d"]] and cam["boxes2d"]
        np.testing.assert_allclose([x["bbox"] for x in got["boxes2d"]], [x["bbox"] for x in cam["boxes2d"]], atol=1e-4)


def test_camera_fit_refuses_what_it_cannot_resample():
    nan = {**square_sample(), "intrinsics": np.full((1, 3, 3), np.nan, np.float32)}
    with pytest.raises(ValueError, match="camera CAM_FRONT .* has no intrinsics.*data.fit=crop"):
        fit_to(nan, (96, 160), "camera", {"CAM_FRONT": MODEL_K})
    with pytest.raises(ValueError, match="model has no camera 'CAM_FRONT'.*CAM_BACK"):
        fit_to(square_sample(), (96, 160), "camera", {"CAM_BACK": MODEL_K})
    with pytest.raises(ValueError, match="model's camera CAM_FRONT has no intrinsics"):
        fit_to(square_sample(), (96, 160), "camera", {"CAM_FRONT": np.full((3, 3), np.nan)})
    with pytest.raises(ValueError, match="data.fit must be one of stretch, crop, camera"):
        fit_to(square_sample(), (96, 160), "zoom")
    with pytest.raises(ConfigError, match="data.fit"):
        load_experiment(None, ["data.fit=zoom"])
    from hydranet.loader import LabelledFrames

    with pytest.raises(ValueError, match="camera with the model's camera_K"):  # refused up front, not frame by frame
        LabelledFrames([], {}, (96, 160), fit="camera")


def test_a_large_downscale_averages_every_pixel_not_a_sample_of_them():
    """A fine checkerboard shrunk 8x is an even grey (its area average), not the aliased pattern a bilinear sample
    of every 8th pixel pair gives; the sim's 2x downscale stays the plain bilinear one."""
    board = (np.indices((384, 640)).sum(0) % 2 * 255).astype(np.uint8)[..., None].repeat(3, 2)  # 1-px checkers
    sample = {**square_sample(), "images": board[None]}
    small = fit_to(sample, (48, 80), "stretch")["images"][0].astype(float)
    assert abs(small.mean() - 127.5) < 1.5 and small.std() < 1.5
    import cv2

    half = fit_to(sample, (192, 320), "stretch")["images"][0]
    np.testing.assert_array_equal(half, cv2.resize(board, (320, 192), interpolation=cv2.INTER_LINEAR))
    # the geometry is unchanged by the averaging: the square still lands where the model's camera puts it
    out = fit_to(square_sample(), (96, 160), "camera", {"CAM_FRONT": MODEL_K})
    assert np.abs(bright_centre(out["images"][0]) - project(MODEL_K, square_point()[1])).max() < 0.3


def test_the_runtime_and_the_rig_fit_a_frame_as_training_does():
    """The car-side runtime takes a camera's calibrated size and brings it to the input exactly as the loader does
    under the model's data.fit; the model's calibration (Rig.resized with that fit) is the K of the fitted frames."""
    from deploy.runtime import HydraRuntime
    from hydranet.geometry import Camera

    img = np.random.default_rng(0).integers(0, 256, (375, 1242, 3), dtype=np.uint8)
    sample = {**square_sample(), "images": img[None]}
    rt = HydraRuntime.__new__(HydraRuntime)  # its preprocessing alone, no ONNX session
    rt.image_size, rt.camera_names, rt.source_sizes = (96, 160), ["CAM_FRONT"], [(375, 1242)]
    rt.checked_sizes, rt.any_size = {}, False
    for fit in ("crop", "stretch"):
        rt.fit = fit
        loaded = fit_to(sample, (96, 160), fit)
        np.testing.assert_array_equal(rt._camera(img, 0), loaded["images"][0])
        cam = Camera("CAM_FRONT", KITTI_K, np.eye(4), 1242, 375, None).scaled(160, 96, fit)
        np.testing.assert_allclose(cam.K, loaded["intrinsics"][0], atol=1e-4)
