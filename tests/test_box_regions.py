"""Where det2d and det3d regress their boxes: the centre cell alone (CenterNet, CenterPoint) or every cell of the
object's Gaussian (TTFNet), and the GIoU term on the cells' boxes. A peak decoded a cell off the centre reads a
trained box only in the Gaussian region: that is what the dense targets are for."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torchvision.ops import generalized_box_iou

from hydranet.bevgrid import BevGrid
from hydranet.decoding import decode_centernet, decode_centerpoint
from hydranet.tasks import build_task
from hydranet.tasks.det2d import Det2dTask, encode_boxes, giou_loss_cells
from hydranet.tasks.det3d import Det3dTask, encode_boxes3d

BOXES = np.array([[10, 20, 60, 50], [30, 25, 42, 37]], np.float32)  # a car and a smaller box on it, xyxy pixels
LABELS = np.array([0, 1])


def peak_at(num_classes: int, hw: tuple[int, int], cells: list[tuple[int, int, int]]) -> np.ndarray:
    """heatmap logits (1, C, h, w): -10 everywhere, +5 at each (class, row, col)."""
    heat = np.full((1, num_classes, *hw), -10.0, np.float32)
    for k, i, j in cells:
        heat[0, k, i, j] = 5.0
    return heat


def test_gaussian_region_decodes_the_exact_box_a_cell_off_the_centre():
    _, reg, weight = encode_boxes(BOXES, LABELS, 2, (24, 40), 4, "gaussian")
    # centres in stride-4 cells: (8.75, 8.75) -> cell (8, 8); (9, 7.75) -> cell (7, 9); the car's peak a cell off
    got = decode_centernet({"heatmap": peak_at(2, (24, 40), [(0, 8, 9), (1, 7, 9)]), "box": reg[None]}, 4, 0.05, 0.9, 10)[0]
    order = np.argsort(got["labels"])
    np.testing.assert_allclose(got["boxes"][order], BOXES, atol=1e-4)
    assert weight[8, 8] > 0 and weight[7, 9] > 0  # each centre is its own object's
    _, reg_c, weight_c = encode_boxes(BOXES, LABELS, 2, (24, 40), 4, "centre")
    assert (weight_c > 0).sum() == 2 and np.allclose(weight_c[weight_c > 0], 1.0)
    off = decode_centernet({"heatmap": peak_at(2, (24, 40), [(0, 8, 9)]), "box": reg_c[None]}, 4, 0.05, 0.9, 10)[0]
    assert np.abs(off["boxes"][0] - BOXES[0]).max() > 5  # the centre-only map has nothing trained there


def test_each_objects_weights_sum_to_one_and_a_small_box_keeps_its_centre():
    far = np.array([[0, 0, 30, 20], [100, 40, 140, 80]], np.float32)
    _, _, weight = encode_boxes(far, np.array([0, 0]), 1, (24, 40), 4, "gaussian")
    assert (weight > 0).sum() > 2
    np.testing.assert_allclose([weight[:12, :20].sum(), weight[:, 20:].sum()], [1.0, 1.0], rtol=1e-5)
    _, reg, _ = encode_boxes(BOXES, LABELS, 2, (24, 40), 4, "gaussian")
    np.testing.assert_allclose(np.exp(reg[2:, 7, 9]) * 4, [12, 12], rtol=1e-5)  # the small box's size, not the car's


def test_giou_loss_of_cell_boxes_matches_torchvision():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(50, 4, generator=g), torch.randn(50, 4, generator=g)

    def xyxy(t):
        half = torch.exp(t[:, 2:]) / 2
        return torch.cat([t[:, :2] - half, t[:, :2] + half], 1)

    torch.testing.assert_close(giou_loss_cells(a, b), 1 - generalized_box_iou(xyxy(a), xyxy(b)).diagonal())
    assert float(giou_loss_cells(a, a).abs().max()) < 1e-5


def test_det3d_gaussian_region_decodes_the_box_a_cell_off_the_centre():
    grid = BevGrid((-20.0, 20.0), (-20.0, 20.0), 1.0)
    box = np.array([[5.3, -2.6, 0.8, 4.5, 1.9, 1.6, 0.4, 3.0, -1.0]], np.float32)
    outputs = {}
    for region in ("gaussian", "centre"):
        heat, reg, weight = encode_boxes3d(box, np.array([0]), 1, grid, box_region=region)
        r, c = np.unravel_index(heat[0].argmax(), heat[0].shape)
        outputs[region] = {"heatmap": peak_at(1, grid.shape, [(0, r + 1, c)]), **{k: v[None] for k, v in reg.items()}}
        assert abs(weight.sum() - 1.0) < 1e-5
    got = decode_centerpoint(outputs["gaussian"], grid.x_range, grid.y_range, 1.0, 0.1, 10)[0]["boxes"][0]
    np.testing.assert_allclose(got, box[0], atol=1e-4)
    centre = decode_centerpoint(outputs["centre"], grid.x_range, grid.y_range, 1.0, 0.1, 10)[0]["boxes"][0]
    assert abs(centre[3] - box[0, 3]) > 1  # untrained cell: no size there


def test_det3d_min_sigma_widens_the_heatmap_and_is_an_option():
    """A pedestrian (0.6 m) on 1 m cells: at min_sigma 0.5 its neighbours are exp(-2), at 1.0 exp(-1/2); a truck's
    own spread (12 m long: 1.08 cells) is above either; the option reaches the targets and is checked."""
    grid = BevGrid((-20.0, 20.0), (-20.0, 20.0), 1.0)
    ped = np.array([[5.0, -3.0, 0.9, 0.6, 0.6, 1.7, 0.0, 0.0, 0.0]], np.float32)
    truck = np.array([[5.0, -3.0, 1.5, 12.0, 2.5, 3.0, 0.0, 0.0, 0.0]], np.float32)
    r, c = np.floor(grid.to_cell(ped[:, :2])[0] + 0.5).astype(int)  # the centre cell, as encode_boxes3d rounds
    for sigma, want in ((0.5, np.exp(-2.0)), (1.0, np.exp(-0.5))):
        heat = encode_boxes3d(ped, np.array([0]), 1, grid, sigma)[0][0]
        assert heat[r, c] == 1.0 and abs(heat[r + 1, c] - want) < 1e-6 and abs(heat[r, c - 1] - want) < 1e-6
        long_axis = encode_boxes3d(truck, np.array([0]), 1, grid, sigma)[0][0][r + 1, c]
        assert abs(long_axis - np.exp(-0.5 / max(0.54 * 12 / 6, sigma) ** 2)) < 1e-6
    meta = {"classes": ["car", "pedestrian"], "bev_grid": grid.as_dict()}
    task = build_task("det3d", meta, 8, {"min_sigma": 1.0})
    sample = {"labels": {"boxes3d": [{"class": "pedestrian", "center": [5.0, -3.0, 0.9], "size": [0.6, 0.6, 1.7],
                                      "yaw": 0.0, "velocity": [0.0, 0.0, 0.0]}]}}
    heat = task.build_targets(sample)["heatmap"][0, 1]  # (1, K, X, Y)
    assert abs(float(heat[r + 1, c]) - np.exp(-0.5)) < 1e-6
    with pytest.raises(ValueError, match="min_sigma 0"):
        build_task("det3d", meta, 8, {"min_sigma": 0})


def test_box_region_is_an_option_of_both_detectors_and_checked():
    meta = {"classes": ["car"], "sign_classes": ["stop"], "light_states": ["red"]}
    assert build_task("signs_lights", meta, 8, {"box_region": "centre", "giou_weight": 0.0}).box_region == "centre"
    assert build_task("signs_lights", meta, 8).min_size == 4.0
    with pytest.raises(ValueError, match="box_region 'ring'"):
        Det2dTask(["car"], 8, box_region="ring")


def test_det2d_loss_over_the_gaussian_with_giou_is_zero_at_the_targets_and_trains():
    task = Det2dTask(["car", "bus"], 8, box_region="gaussian", giou_weight=1.0)
    heat, reg, weight = encode_boxes(BOXES, LABELS, 2, (24, 40), 4, "gaussian")
    targets = {"heatmap": torch.from_numpy(heat[None]), "box": torch.from_numpy(reg[None]),
               "box_weight": torch.from_numpy(weight[None])}
    logits = torch.zeros(1, 2, 24, 40)
    exact = task.loss({"heatmap": logits, "box": targets["box"].clone()}, targets)
    assert set(exact) == {"heatmap", "offset", "size", "giou"}
    assert max(float(exact[k]) for k in ("offset", "size", "giou")) < 1e-5
    box = (targets["box"] + 0.3).requires_grad_(True)  # every cell's box shifted and grown
    off = task.loss({"heatmap": logits, "box": box}, targets)
    assert float(off["giou"].detach()) > 0.05
    assert float(off["offset"].detach()) == pytest.approx(0.6, rel=1e-4)  # |0.3| + |0.3|, weights summing to the objects
    off["giou"].backward()
    assert box.grad[0, :, weight > 0].abs().sum() > 0 and box.grad[0, :, weight == 0].abs().sum() == 0
    assert "giou" not in Det2dTask(["car", "bus"], 8).loss({"heatmap": logits, "box": box}, targets)


def test_det3d_loss_over_the_gaussian_is_zero_at_the_targets():
    grid = BevGrid((-20.0, 20.0), (-20.0, 20.0), 1.0)
    task = Det3dTask(["car"], 8, grid, box_region="gaussian")
    box = np.array([[5.3, -2.6, 0.8, 4.5, 1.9, 1.6, 0.4, 3.0, -1.0]], np.float32)
    heat, reg, weight = encode_boxes3d(box, np.array([0]), 1, grid, box_region="gaussian")
    targets = {"heatmap": torch.from_numpy(heat[None]), "box_weight": torch.from_numpy(weight[None]),
               **{k: torch.from_numpy(v[None]) for k, v in reg.items()}}
    outputs = {"heatmap": torch.zeros(1, 1, *grid.shape), **{k: torch.from_numpy(v[None]) for k, v in reg.items()}}
    losses = task.loss(outputs, targets)
    assert all(float(losses[k]) < 1e-6 for k in ("offset", "height", "size", "rot", "vel"))
    outputs["size"] = outputs["size"] + 0.5
    assert float(task.loss(outputs, targets)["size"]) == pytest.approx(1.5, rel=1e-5)  # 3 channels x 0.5, weight 1
