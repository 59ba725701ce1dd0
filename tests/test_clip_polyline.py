"""hydranet.geometry.clip_polyline: a polyline cut at a rectangle's edges (the CULane reader's lanes at the image,
the loader's at a crop window)."""
from __future__ import annotations

import numpy as np

from hydranet.geometry import clip_polyline


def test_clip_polyline():
    """Liang-Barsky per segment, runs merged, each point once (10x10 image: pixel centres 0..9)."""
    inside = np.array([[1.0, 1.0], [5.0, 5.0]])
    np.testing.assert_allclose(clip_polyline(inside, (0, 0), (9, 9))[0], inside)
    out_and_back = np.array([[2.0, 5.0], [14.0, 5.0], [2.0, 7.0]])  # leaves through x = 9 and comes back
    runs = clip_polyline(out_and_back, (0, 0), (9, 9))
    assert len(runs) == 2
    np.testing.assert_allclose(runs[0], [[2, 5], [9, 5]])
    np.testing.assert_allclose(runs[1], [[9, 5 + 2 * 5 / 12], [2, 7]])
    assert clip_polyline(np.array([[-5.0, 1.0], [-1.0, 8.0]]), (0, 0), (9, 9)) == []  # wholly outside
    corner = clip_polyline(np.array([[-3.0, 3.0], [3.0, -3.0]]), (0, 0), (9, 9))  # touches the image in one point
    assert corner == []
    assert clip_polyline(np.array([[2.0, -4.0], [7.0, -4.0]]), (0, 0), (9, 9)) == []  # parallel to an edge, outside it
    on_border = clip_polyline(np.array([[-2.0, 5.0], [0.0, 5.0], [4.0, 5.0]]), (0, 0), (9, 9))  # a vertex on the edge
    np.testing.assert_allclose(on_border[0], [[0, 5], [4, 5]])  # once, not repeated
    down = clip_polyline(np.array([[5.0, 10.0], [5.0, 9.0], [5.0, 8.0]]), (0, 0), (9, 9))  # from row 10 into a 10-row image
    np.testing.assert_allclose(down[0], [[5, 9], [5, 8]])


def test_the_loader_cuts_a_lane_at_the_crop_window():
    """A lane leaving the crop window ends on its edge (it used to stop at its last point inside), and one that
    leaves and comes back is two polylines of one lane id, not a line drawn across the gap."""
    from hydranet.loader import resize_crop

    lane = {"points": [[2.0, 2.0], [18.0, 2.0], [18.0, 6.0], [2.0, 6.0]], "type": "solid", "lane_id": 3}
    sample = {"camera_names": ["CAM_FRONT"], "intrinsics": np.eye(3)[None],
              "labels": {"cameras": {"CAM_FRONT": {"boxes2d": [], "lanes2d": [lane]}}}}
    out = resize_crop(sample, [(1.0, 1.0)], [(0.0, 0.0)], (8, 10))  # keep x in [-0.5, 9.5]: the lane's U-turn is cut
    lanes = out["labels"]["cameras"]["CAM_FRONT"]["lanes2d"]
    assert [lane["lane_id"] for lane in lanes] == [3, 3]
    np.testing.assert_allclose(lanes[0]["points"], [[2, 2], [9.5, 2]])
    np.testing.assert_allclose(lanes[1]["points"], [[9.5, 6], [2, 6]])


def _clip_segments(points, lo, hi):
    """Reference: Liang-Barsky one segment at a time, runs merged where a segment starts at the last one's end."""
    runs = []
    for a, b in zip(points[:-1], points[1:]):
        d, t0, t1 = b - a, 0.0, 1.0
        for p, q in ((-d[0], a[0] - lo[0]), (d[0], hi[0] - a[0]), (-d[1], a[1] - lo[1]), (d[1], hi[1] - a[1])):
            if p == 0:
                t0, t1 = (t0, t1) if q >= 0 else (1.0, 0.0)
            elif p < 0:
                t0 = max(t0, q / p)
            else:
                t1 = min(t1, q / p)
        if t0 <= t1:
            if runs and t0 == 0.0 and np.allclose(runs[-1][-1], a + t0 * d):
                runs[-1].append(a + t1 * d)
            else:
                runs.append([a + t0 * d, a + t1 * d])
    runs = [np.asarray(r)[np.r_[True, np.abs(np.diff(r, axis=0)).max(axis=1) > 1e-9]] for r in runs]
    return [r for r in runs if len(r) >= 2]


def test_clip_polyline_equals_the_segment_by_segment_reference():
    """The vectorized clip gives the reference's runs bit for bit, on random polylines crossing, touching and running
    along the edges (integer vertices land on them)."""
    rng = np.random.default_rng(0)
    for trial in range(3000):
        pts = rng.uniform(-5, 15, (int(rng.integers(2, 12)), 2))
        if trial % 3 == 0:
            pts = np.round(pts)
        if trial % 7 == 0:
            pts[:, rng.integers(2)] = rng.choice([0.0, 9.0, 4.0, -1.0])  # along an edge, or parallel to it
        got, want = clip_polyline(pts, (0, 0), (9, 9)), _clip_segments(pts, (0, 0), (9, 9))
        assert len(got) == len(want)
        assert all(np.array_equal(g, w) for g, w in zip(got, want))
    assert clip_polyline(np.array([[3.0, 3.0]]), (0, 0), (9, 9)) == []  # one point: no segment
