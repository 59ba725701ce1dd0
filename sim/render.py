"""OpenGL rasterizer (moderngl on EGL: Mesa's llvmpipe on CPUs, the GPU where there is one).

All cameras of the rig are drawn side by side into one framebuffer atlas with four targets
(colour, normal, z-depth, semantic<<16|instance) and read back once per frame.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hydranet.geometry import invert_rigid
from hydranet.rig import Rig
from sim.meshes import VERTEX_FLOATS

SHADERS = Path(__file__).parent / "shaders"
NEAR, FAR = 0.3, 250.0  # nothing beyond FAR is drawn: depth stays inside the uint16 encoding
_ATTRS = ("in_pos", "in_normal", "in_color", "in_emissive", "in_semantic", "in_instance")


class RenderError(RuntimeError):
    """No usable OpenGL driver or a failed GL call."""


def create_context():
    """A headless moderngl context on EGL, or a one-line RenderError saying what to install."""
    try:
        import moderngl
    except ImportError as e:
        raise RenderError(f"moderngl is not installed ({e}); run `pip install moderngl`") from None
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
        self.projs = [projection(c.K, c.width, c.height).astype("f4") for c in rig.cameras]
        self.static_vao = None
        self.dyn_vbo = None
        self.dyn_vao = None
        self.dyn_capacity = 0

    def _vao(self, vbo):
        return self.ctx.vertex_array(self.prog, [(vbo, "3f 3f 3f 1f 1f 1f", *_ATTRS)])

    def set_static(self, verts: np.ndarray) -> None:
        """Upload the scene's static triangles (V, 12) once per scene."""
        if self.static_vao is not None:
            self.static_vao.release()
            self.static_vbo.release()
        self.static_vbo = self.ctx.buffer(np.ascontiguousarray(verts, np.float32).tobytes())
        self.static_vao = self._vao(self.static_vbo)
        self.static_count = len(verts)

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
        self.fbo.use()
        ctx.enable(ctx.DEPTH_TEST)
        ctx.disable(ctx.CULL_FACE)
        self._uniforms(lighting)
        sky = np.clip(lighting.fog_color * np.mean(exposures), 0, 1) ** (1 / 2.2)
        world2ego = invert_rigid(ego2world)
        for i, cam in enumerate(self.rig.cameras):
            x0 = int(self.offsets[i])
            ctx.viewport = (x0, 0, cam.width, cam.height)
            # clears every target: alpha 0 marks "no surface" in the normal target
            self.fbo.clear(*sky, 0.0, depth=1.0, viewport=(x0, 0, cam.width, cam.height))
            w2c = (cam.ego2cam @ world2ego).astype("f4")
            self.prog["world2cam"].write(w2c.T.tobytes())
            self.prog["proj"].write(self.projs[i].T.tobytes())
            self.prog["exposure"].value = float(exposures[i])
            self.prog["seed"].value = int(seed * 16 + i) & 0xFFFFFFFF
            self.static_vao.render(vertices=self.static_count)
            if n_dyn:
                self.dyn_vao.render(vertices=n_dyn)
        return self._read()

    def _read(self) -> list[CameraImages]:
        W, H = self.size
        # the colour attachments' clear set RGB to the sky; labels use their own zero clear
        color = np.frombuffer(self.fbo.read(attachment=0, components=4), np.uint8).reshape(H, W, 4)
        normal = np.frombuffer(self.fbo.read(attachment=1, components=4), np.uint8).reshape(H, W, 4)
        depth = np.frombuffer(self.fbo.read(attachment=2, components=1, dtype="f4"), np.float32).reshape(H, W)
        label = np.frombuffer(self.fbo.read(attachment=3, components=1, dtype="u4"), np.uint32).reshape(H, W)
        out = []
        for i, cam in enumerate(self.rig.cameras):
            x0, x1 = int(self.offsets[i]), int(self.offsets[i]) + cam.width
            sl = (slice(0, cam.height), slice(x0, x1))
            surface = normal[sl][..., 3] > 0
            n = normal[sl][..., :3].astype(np.float32) * (2.0 / 255.0) - 1.0
            n[~surface] = 0.0
            lab = label[sl]
            out.append(CameraImages(
                rgb=np.ascontiguousarray(color[sl][..., :3]),
                normal=n,
                depth=np.where(surface, depth[sl], 0.0).astype(np.float32),
                semantic=np.where(surface, lab >> 16, 0).astype(np.uint8),
                instance=np.where(surface, lab & 0xFFFF, 0).astype(np.int32),
            ))
        return out
