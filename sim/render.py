"""OpenGL rasterizer (moderngl on EGL: Mesa's llvmpipe on CPUs, the GPU where there is one).

All cameras of the rig are drawn side by side into one framebuffer atlas with four targets
(colour, normal, z-depth, semantic<<16|instance) and read back once per frame.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hydranet.geometry import invert_rigid
from hydranet.rig import Rig

SHADERS = Path(__file__).parent / "shaders"
NEAR, FAR = 0.3, 250.0  # nothing beyond FAR is drawn: depth stays inside the uint16 encoding
_ATTRS = ("in_pos", "in_normal", "in_color", "in_emissive", "in_semantic", "in_instance")


class RenderError(RuntimeError):
    """No usable OpenGL driver or a failed GL call."""


# Libraries that bundle their own LLVM and export its symbols: (package, glob under the package).
# Mesa's llvmpipe loads its libLLVM with RTLD_GLOBAL when the EGL context is created; a bundled
# LLVM loaded after that binds its own symbols to Mesa's copy (another LLVM version), and its
# static initializers crash the process (triton's libtriton.so, loaded by `import torchvision`).
# Loaded first, with RTLD_LOCAL, each library binds to itself and stays out of the global scope,
# so Mesa's LLVM binds to itself too; a later import reuses the loaded copy. Nothing is imported
# (sim stays torch-free); a missing package is a no-op (the car has none of them). Cost, where
# triton is installed: ~30 ms and ~70 MB resident once per rendering process.
_BUNDLED_LLVM = (("triton", "_C/libtriton*.so"),)


def preload_bundled_llvm() -> list[str]:
    """Load the installed libraries of _BUNDLED_LLVM with RTLD_LOCAL; returns their paths."""
    loaded = []
    for package, pattern in _BUNDLED_LLVM:
        try:
            spec = importlib.util.find_spec(package)  # finds the package without importing it
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.submodule_search_locations:
            continue
        for root in spec.submodule_search_locations:
            for lib in sorted(Path(root).glob(pattern)):
                try:
                    ctypes.CDLL(str(lib), mode=os.RTLD_NOW | os.RTLD_LOCAL)
                except OSError as e:
                    raise RenderError(f"cannot load {lib} ({e}); reinstall {package} or uninstall it") from None
                loaded.append(str(lib))
    return loaded


def create_context():
    """A headless moderngl context on EGL, or a one-line RenderError saying what to install."""
    try:
        import moderngl
    except ImportError as e:
        raise RenderError(f"moderngl is not installed ({e}); run `pip install moderngl`") from None
    preload_bundled_llvm()  # before EGL loads Mesa's LLVM: any later import order is then safe
    try:
        return moderngl.create_standalone_context(backend="egl", require=330)
    except Exception as e:  # noqa: BLE001 - any driver failure becomes one actionable line
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RenderError(
            f"no usable OpenGL 3.3 driver through EGL ({msg}); install Mesa (Debian: apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri)") from None


def projection(K: np.ndarray, width: int, height: int, near: float = NEAR, far: float = FAR) -> np.ndarray:
    """Clip-space projection of OpenCV camera points for a viewport of width x height.

    Pixel centres sit at integer coordinates (OpenCV); row v of the image lands on framebuffer
    row v, so the read-back buffer is in image order without a flip.
    """
    fx, s, cx, fy, cy = K[0, 0], K[0, 1], K[0, 2], K[1, 1], K[1, 2]
    a, b = (far + near) / (far - near), -2 * far * near / (far - near)
    return np.array([
        [2 * fx / width, 2 * s / width, (2 * cx + 1) / width - 1, 0],
        [0, 2 * fy / height, (2 * cy + 1) / height - 1, 0],
        [0, 0, a, b],
        [0, 0, 1, 0],
    ])


@dataclass
class Lighting:
    """Per-scene shading uniforms."""

    sun_dir: np.ndarray
    sun_color: np.ndarray
    ambient: np.ndarray
    fog_color: np.ndarray
    fog_density: float
    rain: float
    noise_std: float
    lights: list  # [(pos (3,), colour (3,), spot dir (3,) or zeros)]


@dataclass
class CameraImages:
    rgb: np.ndarray  # (H, W, 3) uint8
    normal: np.ndarray  # (H, W, 3) float32 camera frame, zeros for sky
    depth: np.ndarray  # (H, W) float32 z-depth metres, 0 for sky
    semantic: np.ndarray  # (H, W) uint8
    instance: np.ndarray  # (H, W) int32


class Renderer:
    """Renders a rig into RGB and every label channel. One GL context per renderer."""

    def __init__(self, rig: Rig):
        self.rig = rig
        self.ctx = ctx = create_context()
        self.prog = ctx.program(vertex_shader=(SHADERS / "scene.vert.glsl").read_text(),
                                fragment_shader=(SHADERS / "scene.frag.glsl").read_text())
        self.offsets = np.cumsum([0] + [c.width for c in rig.cameras])
        W, H = int(self.offsets[-1]), max(c.height for c in rig.cameras)
        self.size = (W, H)
        self.targets = [ctx.texture((W, H), 4, dtype="f1"), ctx.texture((W, H), 4, dtype="f1"),
                        ctx.texture((W, H), 1, dtype="f4"), ctx.texture((W, H), 1, dtype="u4")]
        self.fbo = ctx.framebuffer(color_attachments=self.targets, depth_attachment=ctx.depth_renderbuffer((W, H)))
        # the sky colour is cleared through a second framebuffer on the colour texture alone, so
        # label targets keep their zero clear (0 = sky / no surface in every label channel)
        self.clear_color = ctx.framebuffer(color_attachments=self.targets[:1])
        self.projs = [projection(c.K, c.width, c.height).astype("f4") for c in rig.cameras]
        self.static_vao = None
        self.dyn_vbo = None
        self.dyn_vao = None
        self.dyn_capacity = 0

    def _vao(self, vbo):
        return self.ctx.vertex_array(self.prog, [(vbo, "3f 3f 3f 1f 1f 1f", *_ATTRS)])

    def set_static(self, verts: np.ndarray, tile: float = 24.0) -> None:
        """Upload the scene's static triangles (V, 12) once per scene, sorted into square
        tiles of `tile` metres so each camera draws only the tiles inside its frustum."""
        if self.static_vao is not None:
            self.static_vao.release()
            self.static_vbo.release()
        tris = verts.reshape(-1, 3, verts.shape[1])  # (T, 3, 12)
        key = np.floor(tris[:, :, :2].mean(1) / tile).astype(np.int64)  # (T, 2)
        key = key[:, 0] * 100003 + key[:, 1]
        order = np.argsort(key, kind="stable")
        tris, key = tris[order], key[order]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        ends = np.r_[starts[1:], len(key)]
        lo = np.minimum.reduceat(tris[:, :, :3].min(1), starts)  # (K, 3) per-tile bounds
        hi = np.maximum.reduceat(tris[:, :, :3].max(1), starts)
        self.tile_ranges = np.stack([starts * 3, (ends - starts) * 3], 1)  # (K, 2) first vertex, count
        corners = np.stack([np.where(np.array([i & 1, i & 2, i & 4]) > 0, hi, lo) for i in range(8)], 1)  # (K, 8, 3)
        self.tile_corners = np.concatenate([corners, np.ones(corners.shape[:2] + (1,))], -1)  # (K, 8, 4)
        self.static_vbo = self.ctx.buffer(np.ascontiguousarray(tris, np.float32).tobytes())
        self.static_vao = self._vao(self.static_vbo)

    def _visible_ranges(self, clip_from_world: np.ndarray) -> list[tuple[int, int]]:
        """(first, count) vertex ranges of the static tiles that intersect the frustum."""
        c = self.tile_corners @ clip_from_world.T  # (K, 8, 4) clip coordinates
        x, y, z, w = c[..., 0], c[..., 1], c[..., 2], c[..., 3]
        outside = ((x < -w).all(1) | (x > w).all(1) | (y < -w).all(1) | (y > w).all(1)
                   | (z < -w).all(1) | (z > w).all(1))
        ranges: list[tuple[int, int]] = []
        for first, count in self.tile_ranges[~outside]:
            if ranges and ranges[-1][0] + ranges[-1][1] == first:  # merge neighbours in the buffer
                ranges[-1] = (ranges[-1][0], ranges[-1][1] + int(count))
            else:
                ranges.append((int(first), int(count)))
        return ranges

    def _set_dynamic(self, verts: np.ndarray) -> int:
        data = np.ascontiguousarray(verts, np.float32).tobytes()
        if len(data) > self.dyn_capacity:
            if self.dyn_vao is not None:
                self.dyn_vao.release()
                self.dyn_vbo.release()
            self.dyn_capacity = max(len(data) * 2, 1 << 16)
            self.dyn_vbo = self.ctx.buffer(reserve=self.dyn_capacity)
            self.dyn_vao = self._vao(self.dyn_vbo)
        if data:
            self.dyn_vbo.write(data)
        return len(verts)

    def _uniforms(self, lighting: Lighting) -> None:
        p = self.prog
        p["sun_dir"].value = tuple(lighting.sun_dir)
        p["sun_color"].value = tuple(lighting.sun_color)
        p["ambient"].value = tuple(lighting.ambient)
        p["fog_color"].value = tuple(lighting.fog_color)
        p["fog_density"].value = lighting.fog_density
        p["rain"].value = lighting.rain
        p["noise_std"].value = lighting.noise_std
        n = len(lighting.lights)
        p["n_lights"].value = n
        if n:
            pos, col, dirs = (np.zeros((16, 3), "f4") for _ in range(3))
            for i, (a, b, c) in enumerate(lighting.lights):
                pos[i], col[i], dirs[i] = a, b, c
            p["light_pos"].write(pos.tobytes())
            p["light_color"].write(col.tobytes())
            p["light_dir"].write(dirs.tobytes())

    def render(self, dynamic: np.ndarray, ego2world: np.ndarray, lighting: Lighting, exposures, seed: int) -> list[CameraImages]:
        """Draw the static scene plus `dynamic` (V, 12) vertices from every camera."""
        if self.static_vao is None:
            raise RenderError("set_static() must be called before render()")
        n_dyn = self._set_dynamic(dynamic)
        ctx = self.ctx
        sky = np.clip(lighting.fog_color * np.mean(exposures), 0, 1) ** (1 / 2.2)
        self.fbo.clear(0.0, 0.0, 0.0, 0.0, depth=1.0)
        self.clear_color.clear(*sky, 1.0)
        self.fbo.use()
        ctx.enable(ctx.DEPTH_TEST)
        ctx.disable(ctx.CULL_FACE)
        self._uniforms(lighting)
        world2ego = invert_rigid(ego2world)
        for i, cam in enumerate(self.rig.cameras):
            x0 = int(self.offsets[i])
            ctx.viewport = (x0, 0, cam.width, cam.height)
            w2c = cam.ego2cam @ world2ego
            self.prog["world2cam"].write(w2c.astype("f4").T.tobytes())
            self.prog["proj"].write(self.projs[i].T.tobytes())
            self.prog["exposure"].value = float(exposures[i])
            self.prog["seed"].value = int(seed * 16 + i) & 0xFFFFFFFF
            for first, count in self._visible_ranges(self.projs[i].astype(np.float64) @ w2c):
                self.static_vao.render(first=first, vertices=count)
            if n_dyn:
                self.dyn_vao.render(vertices=n_dyn)
        return self._read()

    def _read(self) -> list[CameraImages]:
        W, H = self.size
        color = np.frombuffer(self.fbo.read(attachment=0, components=3), np.uint8).reshape(H, W, 3)
        normal = np.frombuffer(self.fbo.read(attachment=1, components=3), np.uint8).reshape(H, W, 3)
        depth = np.frombuffer(self.fbo.read(attachment=2, components=1, dtype="f4"), np.float32).reshape(H, W)
        label = np.frombuffer(self.fbo.read(attachment=3, components=1, dtype="u4"), np.uint32).reshape(H, W)
        out = []
        for i, cam in enumerate(self.rig.cameras):
            x0 = int(self.offsets[i])
            sl = (slice(0, cam.height), slice(x0, x0 + cam.width))
            d = depth[sl]
            n = normal[sl] * np.float32(2.0 / 255.0) - np.float32(1.0)
            n *= (d > 0)[..., None]  # depth 0: no surface (sky), normal stays 0
            lab = label[sl]
            out.append(CameraImages(
                rgb=np.ascontiguousarray(color[sl]),
                normal=n,
                depth=np.ascontiguousarray(d),
                semantic=(lab >> 16).astype(np.uint8),
                instance=(lab & 0xFFFF).astype(np.int32),
            ))
        return out
