"""Search a shadow run by image (`hydranet engine similar --image`): `embed_image` embeds one camera image with the
deployed model (its `embedding` output, as shadow mode stored it per camera) and `similar_image` finds the run's
frames whose same-camera embedding is closest (cosine). A run on some of the model's cameras stored those cameras'
embeddings, in the run's camera order (`Catalog.run_model`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from data_engine.catalog import Catalog
from data_engine.shadow import ShadowError, check_model, load_runtime


def read_image(path: str | Path) -> np.ndarray:
    """(H, W, 3) uint8 RGB of an image file, or ShadowError naming it (missing, undecodable, truncated, corrupt,
    or another format than its name says: hydranet.data.image's policy)."""
    from hydranet.data.image import ImageError, read_rgb

    path = Path(path)
    try:
        return read_rgb(path)
    except OSError as e:
        raise ShadowError(f"--image {path}: {e.strerror or e}; give a JPEG or PNG file") from None
    except ImageError as e:
        raise ShadowError(f"--image {path} is not a readable image (it {e}); give a camera image") from None


def embed_image(model: str | Path, image: str | Path, camera: str | None = None,
                cameras: list[str] | None = None) -> tuple[np.ndarray, int]:
    """(the model's embedding (C,) of one camera image, the camera's index among `cameras`: the run's, default the
    model's). The image must be the model size or that camera's calibrated size (resized as shadow mode does); the
    embedding of a camera depends on its image only (the trunk runs per camera image), so the image fills every slot."""
    import cv2

    rt = load_runtime(model)
    check_model(rt)
    cameras = cameras or rt.camera_names
    camera = camera or cameras[0]
    if camera not in cameras:
        raise ShadowError(f"--camera {camera} is not a camera of {model}'s shadow run; choose one of {cameras}")
    n = rt.camera_names.index(camera)
    img = read_image(image)
    H, W = rt.image_size
    sh, sw = rt.source_sizes[n]
    if img.shape[:2] not in ((H, W), (sh, sw)):
        raise ShadowError(f"--image {image} is {img.shape[1]}x{img.shape[0]}; camera {camera} of {model} takes {sw}x{sh} "
                          f"(its calibrated size) or {W}x{H} (the model size)")
    if img.shape[:2] != (H, W):
        img = cv2.resize(img, (W, H), interpolation=cv2.INTER_LINEAR)  # as HydraRuntime.preprocess resizes
    raw = rt.run(rt.feeds(rt.preprocess([img] * rt.num_cameras)))  # video inputs: a stream start
    return np.asarray(raw["embedding"], np.float32)[n], cameras.index(camera)  # (C,)


def similar_image(catalog: str | Path, model: str | Path | None, image: str | Path, camera: str | None = None, k: int = 50,
                  run: int | None = None) -> list[dict[str, Any]]:
    """The k frames of a shadow run whose embedding of `camera` is most like the image's (cosine), best
    first: [{"frame_id", "clip", "frame", "similarity"}]. `model` must be the run's model (same bytes)."""
    from hydranet.io import file_sha256

    if k < 1:
        raise ShadowError(f"--k must be at least 1, got {k}")
    with Catalog(catalog) as cat:
        run_id = cat.latest_run(run)
        sha, path = cat.db.execute("SELECT m.sha256, m.path FROM shadow_runs r JOIN models m ON r.model_id = m.id WHERE r.id = ?",
                                   (run_id,)).fetchone()
        if model is None:
            raise ShadowError(f"--image needs --onnx: the model of shadow run {run_id} ({path}) embeds the image")
        if not Path(model).is_file():
            raise ShadowError(f"--onnx {model} does not exist; give the model of shadow run {run_id} ({path})")
        if file_sha256(model) != sha:
            raise ShadowError(f"--onnx {model} is not the model of shadow run {run_id} ({path}, sha256 {sha[:12]}): its "
                              "embeddings would not be comparable; give that model or shadow the fleet with this one")
        q, n = embed_image(model, image, camera, cat.run_model(run_id)[1])
        ids, emb = cat.camera_embeddings(run_id, n)  # (M,), (M, C) unit rows
        table = cat.table(run_id)
    if len(ids) == 0:
        raise ShadowError(f"shadow run {run_id} of {catalog} holds no embeddings")
    sim = emb @ (q / max(float(np.linalg.norm(q)), 1e-12))  # (M,)
    order = np.lexsort((ids, -sim))[:k]
    names = {int(f): (str(c), int(i)) for f, c, i in zip(table["frame_id"], table["clip"], table["idx"])}
    return [{"frame_id": int(ids[o]), "clip": names.get(int(ids[o]), ("?", -1))[0], "frame": names.get(int(ids[o]), ("?", -1))[1],
             "similarity": round(float(sim[o]), 6)} for o in order]
