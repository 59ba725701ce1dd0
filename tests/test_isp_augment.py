"""augment.isp: the camera and ISP effects the sim does not render (white balance, hue, gamma, sharpening, JPEG,
downscale) on top of the photometric pipeline; off, the pipeline draws exactly what it drew before."""
from __future__ import annotations

import numpy as np
import pytest

from hydranet.config import ConfigError
from hydranet.experiment import load_experiment
from hydranet.loader import Augmenter


def sample(seed=0):
    rng = np.random.default_rng(seed)
    img = rng.integers(0, 256, (2, 48, 80, 3), dtype=np.uint8)
    img[:, 20:30, 30:50] = [200, 40, 40]  # a red patch: colour effects move it
    return {"camera_names": ["CAM_FRONT", "CAM_BACK"], "images": img, "intrinsics": np.eye(3)[None].repeat(2, 0),
            "labels": {"cameras": {"CAM_FRONT": {"boxes2d": [{"class": "car", "bbox": [30, 20, 50, 30]}]}}}}


def test_isp_is_seeded_changes_only_pixels_and_is_off_by_default():
    s = sample()
    plain, isp = Augmenter(geometric=False), Augmenter(geometric=False, isp=True)
    keys = [(0, e, f) for e in range(3) for f in range(4)]
    a = [plain(s, k)["images"] for k in keys]
    b = [isp(s, k)["images"] for k in keys]
    assert all(np.array_equal(x, isp(s, k)["images"]) for x, k in zip(b, keys))  # the same key, the same pixels
    assert sum(not np.array_equal(x, y) for x, y in zip(a, b)) >= len(keys) - 2  # the ISP effects change most draws
    out = isp(s, keys[0])
    assert out["images"].dtype == np.uint8 and out["images"].shape == s["images"].shape
    assert out["labels"] == s["labels"] and np.array_equal(out["intrinsics"], s["intrinsics"])
    # off: the pipeline of before, transform for transform in its order (its random draws follow the order)
    from hydranet.loader import photometric_pipeline

    names = [type(t).__name__ for t in photometric_pipeline().transforms]
    assert names == ["RandomBrightnessContrast", "OneOf", "GaussNoise", "Haze", "RandomRain", "RandomShadow"]
    with_isp = [type(t).__name__ for t in photometric_pipeline(True).transforms]
    assert [n for n in with_isp if n in names] == names and with_isp[-2:] == ["ImageCompression", "Downscale"]


def test_isp_config_key():
    assert load_experiment(None).augment.isp is False
    assert load_experiment(None, ["augment.isp=true"]).augment.isp is True
    with pytest.raises(ConfigError, match="'augment.isp' adds to the photometric augmentation"):
        load_experiment(None, ["augment.isp=true", "augment.photometric=false"])
