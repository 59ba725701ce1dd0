"""OpenGL rasterizer (moderngl on EGL: Mesa's llvmpipe on CPUs, the GPU where there is one).

All cameras of the rig are drawn side by side into one framebuffer atlas and read back once per
frame. Passes (sim.config.LookConfig switches them):

1. shadow (look.shadows, sun up): depth of the scene seen from the sun, 120 m around the ego;
2. labels + colour in one pass into four one-sample targets (linear radiance, normal, z-depth,
   semantic << 16 | instance); with look.antialias > 1 the labels are drawn alone (one sample
   per pixel: exact) and the colour again into a multisampled target, then resolved;
3. post, per camera: sky behind partly covered pixels, glare, exposure, vignetting, sensor
   noise, tone curve and gamma into the 8-bit RGB image;
4. lens: a camera with a distortion model is drawn through its source pinhole (`sim.lens`) and
   resampled on read-back (colour bilinear, labels nearest; `sim.labels` then makes the object
   masks exact at each pixel's ray from the source channels kept in `CameraImages.source`).
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
from sim.config import LookConfig
from sim.lens import lens_view

SHADERS = Path(__file__).parent / "shaders"
NEAR, FAR = 0.3, 250.0  # nothing beyond FAR is drawn: depth stays inside the uint16 encoding
_ATTRS = (("in_pos", "3f", 12), ("in_normal", "3f", 12), ("in_color", "3f", 12), ("in_emissive", "1f", 4),
          ("in_semantic", "1f", 4), ("in_instance", "1f", 4), ("in_material", "1f", 4))
SHADOW_HALF = 60.0  # metres: the sun's shadow map covers this far around the ego each way
_POST_VERT = """#version 330
void main() {  // one triangle over the viewport
    vec2 p = vec2(float((gl_VertexID & 1) << 2) - 1.0, float((gl_VertexID & 2) << 1) - 1.0);
    gl_Position = vec4(p, 0.0, 1.0);
}
"""
_SHADOW_VERT = """#version 330
uniform mat4 shadow_vp;
in vec3 in_pos;
void main() { gl_Position = shadow_vp * vec4(in_pos, 1.0); }
"""
_SHADOW_FRAG = """#version 330
void main() {}
"""
_ADD_FRAG = """#version 330
uniform sampler2D src;
uniform float weight;
out vec4 o;
void main() { o = weight * texelFetch(src, ivec2(gl_FragCoord.xy), 0); }  // blended ONE, ONE: a running sum
"""


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
            f"no usable OpenGL 3.3 driver through EGL ({msg}); install Mesa "
            "(Debian: apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri)") from None


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
    sky_zenith: np.ndarray | None = None  # sky radiance overhead and at the horizon (HDR look); None: fog_color
    sky_horizon: np.ndarray | None = None
    night: float = 0.0  # 1 at night: lit windows
    shot_gain: float = 0.0004  # photon noise variance per unit linear signal (realistic sensor)


@dataclass
class CameraImages:
    rgb: np.ndarray  # (H, W, 3) uint8
    normal: np.ndarray  # (H, W, 3) float32 camera frame, zeros for sky
    depth: np.ndarray  # (H, W) float32 z-depth metres, 0 for sky
    semantic: np.ndarray  # (H, W) uint8
    instance: np.ndarray  # (H, W) int32
    # a distorted camera's source pinhole channels (label semantic<<16|instance (Hs, Ws) uint32, z-depth
    # (Hs, Ws) float32, normal (Hs, Ws, 3) uint8), until `sim.labels` has made its label channels exact
    source: tuple | None = None


_OUTSIDE = np.zeros((4, 4))  # no sun: every point maps outside the shadow map (lit; the sun term is ~0 anyway)
_OUTSIDE[2, 3], _OUTSIDE[3, 3] = 9.0, 1.0


def _set(prog, name: str, value) -> None:
    """Set a uniform the variant uses (the GLSL compiler drops unused ones)."""
    if name in prog:
        if isinstance(value, (bytes, bytearray)):
            prog[name].write(value)
        else:
            prog[name].value = value


def sun_view_projection(sun_dir: np.ndarray, center: np.ndarray, half: float = SHADOW_HALF) -> np.ndarray:
    """Orthographic world -> clip matrix of the sun's shadow map: a square of 2 * half metres
    around `center` (3,), looking along -sun_dir, depth over +-200 m."""
    f = -np.asarray(sun_dir, float) / np.linalg.norm(sun_dir)
    up = np.array([0.0, 0.0, 1.0]) if abs(f[2]) < 0.99 else np.array([1.0, 0.0, 0.0])
    r = np.cross(f, up)
    r /= np.linalg.norm(r)
    u = np.cross(r, f)
    view = np.eye(4)
    view[0, :3], view[1, :3], view[2, :3] = r, u, -f
    view[:3, 3] = -view[:3, :3] @ center
    depth = 200.0
    ortho = np.diag([1 / half, 1 / half, -1 / depth, 1.0])
    return ortho @ view


class Renderer:
    """Renders a rig into RGB and every label channel. One GL context per renderer."""

    def __init__(self, rig: Rig, look: LookConfig | None = None):
        self.rig = rig
        self.lenses = [lens_view(c) for c in rig.cameras]
        self.sources = [lens.source for lens in self.lenses]  # what OpenGL draws: the camera or its source pinhole
        self.ctx = create_context()
        self.offsets = np.cumsum([0] + [c.width for c in self.sources])
        W, H = int(self.offsets[-1]), max(c.height for c in self.sources)
        limit = min(self.ctx.info["GL_MAX_TEXTURE_SIZE"], self.ctx.info["GL_MAX_VIEWPORT_DIMS"][0])
        if W > limit or H > limit:
            detail = ", ".join(f"{c.name} {c.width}x{c.height}" for c in self.sources)
            raise RenderError(f"the rig's cameras side by side ({detail}; lenses are drawn through wider source "
                              f"pinholes) make a {W}x{H} atlas, over this GL driver's {limit} pixels; render fewer or "
                              "smaller cameras (image_width/image_height, or split the rig)")
        self.size = (W, H)
        self.projs = [projection(c.K, c.width, c.height).astype("f4") for c in self.sources]
        self._programs: dict = {}
        self.static_vbo = None
        self.static_n = 0
        self.dyn_vbo = None
        self.dyn_capacity = 0
        self._vaos: dict = {}
        self.look = None
        self.set_look(look or LookConfig())

    # ---- set-up ---------------------------------------------------------------------------
    def _program(self, key: str, defines: tuple[str, ...] = ()):
        name = (key, defines)
        if name not in self._programs:
            head = "#version 330\n" + "".join(f"#define {d}\n" for d in defines)
            if key == "scene":
                vs, fs = (SHADERS / "scene.vert.glsl").read_text(), (SHADERS / "scene.frag.glsl").read_text()
            elif key == "post":
                vs, fs = _POST_VERT, (SHADERS / "post.frag.glsl").read_text()
            elif key == "add":
                vs, fs = _POST_VERT, _ADD_FRAG
            else:
                vs, fs = _SHADOW_VERT, _SHADOW_FRAG
            if key not in ("shadow", "add"):
                vs = vs if vs.startswith("#version") else head + vs
                fs = head + fs
            self._programs[name] = self.ctx.program(vertex_shader=vs, fragment_shader=fs)
        return self._programs[name]

    @property
    def gpu(self) -> bool:
        """Whether a GPU renders (not Mesa's CPU rasterizers)."""
        name = self.ctx.info.get("GL_RENDERER", "").lower()
        return not any(k in name for k in ("llvmpipe", "softpipe", "swrast"))

    def set_look(self, look: LookConfig) -> None:
        """Build the programs and targets of a look (a no-op when it is the current one); "auto"
        switches are decided for this context's renderer (`self.look` holds the result)."""
        look = look.resolved(self.gpu)
        if look == self.look:
            return
        self.look = look
        ctx, (W, H) = self.ctx, self.size
        for obj in getattr(self, "_targets", []):
            obj.release()
        common = ((("TEXTURES",) if look.textures else ()) + (("HDR",) if look.hdr else ())
                  + (("SHADOWS",) if look.shadows == "on" else ()))
        self.msaa = look.antialias > 1
        self.radiance = ctx.texture((W, H), 4, dtype="f2")
        glare = look.hdr and look.glare == "on"  # reads the mip chain; without mipmaps the texture must not ask for them
        self.radiance.filter = (ctx.LINEAR_MIPMAP_LINEAR if glare else ctx.LINEAR, ctx.LINEAR)
        self.radiance.repeat_x = self.radiance.repeat_y = False
        self.label_targets = [ctx.texture((W, H), 4, dtype="f1"), ctx.texture((W, H), 1, dtype="f4"),
                              ctx.texture((W, H), 1, dtype="u4")]
        depth = ctx.depth_renderbuffer((W, H))
        self._targets = [self.radiance, *self.label_targets, depth]
        if self.msaa:
            self.prog_labels = self._program("scene", ("LABELS", "LOC_NORMAL 0", "LOC_DEPTH 1", "LOC_LABEL 2"))
            self.fbo_labels = ctx.framebuffer(color_attachments=self.label_targets, depth_attachment=depth)
            self.prog_color = self._program("scene", ("COLOR",) + common)
            ms_color = ctx.renderbuffer((W, H), 4, samples=look.antialias, dtype="f2")
            ms_depth = ctx.depth_renderbuffer((W, H), samples=look.antialias)
            self.fbo_color = ctx.framebuffer(color_attachments=[ms_color], depth_attachment=ms_depth)
            self.fbo_resolve = ctx.framebuffer(color_attachments=[self.radiance])
            self._targets += [ms_color, ms_depth]
            self.passes = [(self.prog_labels, self.fbo_labels), (self.prog_color, self.fbo_color)]
        else:
            prog = self._program("scene", ("COLOR", "LABELS", "LOC_NORMAL 1", "LOC_DEPTH 2", "LOC_LABEL 3") + common)
            self.passes = [(prog, ctx.framebuffer(color_attachments=[self.radiance, *self.label_targets], depth_attachment=depth))]
        self.output = ctx.texture((W, H), 4, dtype="f1")
        self.fbo_out = ctx.framebuffer(color_attachments=[self.output])
        self.prog_post = self._program("post", (("HDR",) if look.hdr else ()) + (("REALISTIC",) if look.sensor == "realistic" else ())
                                       + (("GLARE",) if look.hdr and look.glare == "on" else ()))
        self.post_vao = ctx.vertex_array(self.prog_post, [])
        self._targets += [self.output]
        if look.shutter_ms > 0 or look.rolling_shutter_ms > 0:  # sub-frames drawn into `sub`, composed in `accum`
            self.prog_sub = self._program("scene", ("COLOR",) + common)
            self.prog_add = self._program("add")
            self.add_vao = ctx.vertex_array(self.prog_add, [])
            self.sub, self.accum = ctx.texture((W, H), 4, dtype="f2"), ctx.texture((W, H), 4, dtype="f2")
            self.accum.filter = self.radiance.filter
            self.accum.repeat_x = self.accum.repeat_y = False
            sub_depth = ctx.depth_renderbuffer((W, H))
            self.fbo_sub = ctx.framebuffer(color_attachments=[self.sub], depth_attachment=None if self.msaa else sub_depth)
            self.fbo_accum = ctx.framebuffer(color_attachments=[self.accum])
            self._targets += [self.sub, self.accum, sub_depth]
        if look.shadows == "on":
            S = look.shadow_resolution
            self.shadow_tex = ctx.depth_texture((S, S))
            self.shadow_tex.compare_func = "<="
            self.shadow_tex.filter = (ctx.LINEAR, ctx.LINEAR)
            self.fbo_shadow = ctx.framebuffer(depth_attachment=self.shadow_tex)
            self.prog_shadow = self._program("shadow")
            self._targets += [self.shadow_tex]
        self._vaos = {}

    def _vao(self, prog, which: str):
        """The vertex array of `prog` over the static or dynamic buffer (attributes the variant
        does not read are skipped as padding)."""
        key = (id(prog), which)
        vbo = self.static_vbo if which == "static" else self.dyn_vbo
        if key not in self._vaos or self._vaos[key][0] is not vbo:
            fmt, names = [], []
            for name, f, nbytes in _ATTRS:
                if name in prog:
                    fmt.append(f)
                    names.append(name)
                else:
                    fmt.append(f"{nbytes}x")
            self._vaos[key] = (vbo, self.ctx.vertex_array(prog, [(vbo, " ".join(fmt), *names)]))
        return self._vaos[key][1]

    def set_static(self, verts: np.ndarray, tile: float = 24.0) -> None:
        """Upload the scene's static triangles (V, 13) once per scene, sorted into square
        tiles of `tile` metres so each camera draws only the tiles inside its frustum."""
        if self.static_vbo is not None:
            self.static_vbo.release()
        tris = verts.reshape(-1, 3, verts.shape[1])  # (T, 3, 13)
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
        self.static_n = len(tris) * 3

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
            if self.dyn_vbo is not None:
                self.dyn_vbo.release()
            self.dyn_capacity = max(len(data) * 2, 1 << 16)
            self.dyn_vbo = self.ctx.buffer(reserve=self.dyn_capacity)
        if data:
            self.dyn_vbo.write(data)
        return len(verts)

    def _uniforms(self, p, lighting: Lighting) -> None:
        sky_z = lighting.fog_color if lighting.sky_zenith is None else lighting.sky_zenith
        sky_h = lighting.fog_color if lighting.sky_horizon is None else lighting.sky_horizon
        for name, value in (("sun_dir", lighting.sun_dir), ("sun_color", lighting.sun_color), ("ambient", lighting.ambient),
                            ("fog_color", lighting.fog_color), ("sky_zenith", sky_z), ("sky_horizon", sky_h)):
            _set(p, name, tuple(float(v) for v in value))
        _set(p, "fog_density", float(lighting.fog_density))
        _set(p, "rain", float(lighting.rain))
        _set(p, "night", float(lighting.night))
        _set(p, "emissive_gain", 6.0 if self.look.hdr else 1.5)
        n = len(lighting.lights)
        _set(p, "n_lights", n)
        if n and "light_pos" in p:
            pos, col, dirs = (np.zeros((16, 3), "f4") for _ in range(3))
            for i, (a, b, c) in enumerate(lighting.lights):
                pos[i], col[i], dirs[i] = a, b, c
            _set(p, "light_pos", pos.tobytes())
            _set(p, "light_color", col.tobytes())
            _set(p, "light_dir", dirs.tobytes())

    def _draw_scene(self, prog, w2c: np.ndarray, proj: np.ndarray, n_dyn: int) -> None:
        _set(prog, "world2cam", w2c.astype("f4").T.tobytes())
        _set(prog, "proj", proj.T.tobytes())
        static = self._vao(prog, "static")
        for first, count in self._visible_ranges(proj.astype(np.float64) @ w2c):
            static.render(first=first, vertices=count)
        if n_dyn:
            self._vao(prog, "dynamic").render(vertices=n_dyn)

    def _shadow_pass(self, lighting: Lighting, ego2world: np.ndarray, n_dyn: int) -> np.ndarray | None:
        if self.look.shadows != "on" or lighting.sun_dir[2] <= 0.05 or np.max(lighting.sun_color) < 0.1:
            return None
        ctx = self.ctx
        vp = sun_view_projection(lighting.sun_dir, ego2world[:3, 3])
        self.fbo_shadow.use()
        self.fbo_shadow.clear(depth=1.0)
        ctx.viewport = (0, 0, *self.shadow_tex.size)
        _set(self.prog_shadow, "shadow_vp", vp.astype("f4").T.tobytes())
        static = self._vao(self.prog_shadow, "static")
        for first, count in self._visible_ranges(vp):
            static.render(first=first, vertices=count)
        if n_dyn:
            self._vao(self.prog_shadow, "dynamic").render(vertices=n_dyn)
        return vp

    def render(self, dynamic: np.ndarray, ego2world: np.ndarray, lighting: Lighting, exposures, seed: int,
               subframes: list[tuple[np.ndarray, np.ndarray]] = (), cam2ego=None) -> list[CameraImages]:
        """Draw the static scene plus `dynamic` (V, 13) vertices from every camera. `subframes`:
        motion blur's other instants of the exposure as (dynamic vertices, ego2world); the colour
        image averages them with this one, the label channels are this instant's alone. `cam2ego`:
        this frame's extrinsics (N, 4, 4) of the rig's cameras (body motion, mount jitter; None:
        the rig's own). `draw` then `read` (benchmarks time them apart)."""
        self.draw(dynamic, ego2world, lighting, exposures, seed, subframes, cam2ego)
        return self.read()

    def draw(self, dynamic: np.ndarray, ego2world: np.ndarray, lighting: Lighting, exposures, seed: int,
             subframes: list[tuple[np.ndarray, np.ndarray]] = (), cam2ego=None) -> None:
        """Issue every GL pass of a frame (`render`'s arguments); the images stay on the driver until `read`."""
        if self.static_vbo is None:
            raise RenderError("set_static() must be called before render()")
        self.extrinsics = [c.cam2ego for c in self.rig.cameras] if cam2ego is None else list(cam2ego)
        if len(self.extrinsics) != len(self.rig):
            raise RenderError(f"cam2ego gives {len(self.extrinsics)} extrinsics for the rig's {len(self.rig)} cameras")
        if subframes and self.look.shutter_ms <= 0 and self.look.rolling_shutter_ms <= 0:
            raise RenderError("sub-frames need a look with shutter_ms or rolling_shutter_ms > 0 (set_look)")
        n_dyn = self._set_dynamic(dynamic)
        ctx = self.ctx
        ctx.enable(ctx.DEPTH_TEST)
        ctx.disable(ctx.CULL_FACE)
        shadow_vp = self._shadow_pass(lighting, ego2world, n_dyn)
        for prog, fbo in self.passes:
            fbo.use()
            fbo.clear(0.0, 0.0, 0.0, 0.0, depth=1.0)
            self._draw_cameras(prog, lighting, shadow_vp, ego2world, n_dyn, seed)
        if self.msaa:
            ctx.copy_framebuffer(self.fbo_resolve, self.fbo_color)
        if not subframes:
            src = self.radiance
        elif self.look.rolling_shutter_ms > 0:
            src = self._rolling_shutter(subframes, lighting, shadow_vp, seed)
        else:
            src = self._motion_blur(subframes, lighting, shadow_vp, seed)
        self._post(lighting, ego2world, exposures, seed, src)

    def _draw_cameras(self, prog, lighting: Lighting, shadow_vp, ego2world: np.ndarray, n_dyn: int, seed: int) -> None:
        """Every camera's viewport of the bound framebuffer, drawn with `prog` from ego pose `ego2world`."""
        self._uniforms(prog, lighting)
        if "shadow_map" in prog:
            self.shadow_tex.use(location=1)
            _set(prog, "shadow_map", 1)
            _set(prog, "shadow_vp", (_OUTSIDE if shadow_vp is None else shadow_vp).astype("f4").T.tobytes())
        world2ego = invert_rigid(ego2world)
        for i, cam in enumerate(self.sources):
            self.ctx.viewport = (int(self.offsets[i]), 0, cam.width, cam.height)
            w2c = invert_rigid(self.extrinsics[i]) @ world2ego
            _set(prog, "seed", int(seed * 16 + i) & 0xFFFFFFFF)
            _set(prog, "cam_pos", tuple(float(v) for v in invert_rigid(w2c)[:3, 3]))
            self._draw_scene(prog, w2c, self.projs[i], n_dyn)

    def _motion_blur(self, subframes, lighting: Lighting, shadow_vp, seed: int):
        """The mean linear radiance (RGBA16F texture, alpha = coverage) of this instant's colour and
        each sub-frame's, summed in `accum` with additive blending in the order given (deterministic)."""
        weight = 1.0 / (len(subframes) + 1)
        self.fbo_accum.use()
        self.fbo_accum.clear(0.0, 0.0, 0.0, 0.0)
        self._add(self.radiance, weight)
        for dynamic, ego2world in subframes:
            self._draw_sub(dynamic, ego2world, lighting, shadow_vp, seed)
            self.fbo_accum.use()
            self._add(self.sub, weight)
        return self.accum

    def _rolling_shutter(self, subframes, lighting, shadow_vp, seed: int):
        """Linear radiance (RGBA16F) of a rolling shutter: row band k of every camera (shutter_samples
        bands, top first) from instant k; this instant's colour is the middle band, `subframes` the
        others in time order."""
        S = self.look.shutter_samples
        if len(subframes) != S - 1:
            raise RenderError(f"a rolling shutter of {S} bands needs {S - 1} sub-frames, got {len(subframes)}")
        self.fbo_accum.use()
        self.fbo_accum.clear(0.0, 0.0, 0.0, 0.0)
        self._add(self.radiance, 1.0)  # every band starts as this instant's (the middle band stays so)
        for k, (dynamic, ego2world) in enumerate(subframes):
            band = k if k < S // 2 else k + 1
            self._draw_sub(dynamic, ego2world, lighting, shadow_vp, seed)
            self.fbo_accum.use()
            self._add(self.sub, 1.0, rows=(band, S))
        return self.accum

    def _draw_sub(self, dynamic: np.ndarray, ego2world: np.ndarray, lighting: Lighting, shadow_vp, seed: int) -> None:
        """One sub-frame's colour (through MSAA if on) into `sub`."""
        n_dyn = self._set_dynamic(dynamic)
        fbo = self.fbo_color if self.msaa else self.fbo_sub
        fbo.use()
        fbo.clear(0.0, 0.0, 0.0, 0.0, depth=1.0)
        self._draw_cameras(self.prog_sub, lighting, shadow_vp, ego2world, n_dyn, seed)
        if self.msaa:
            self.ctx.copy_framebuffer(self.fbo_sub, self.fbo_color)

    def _add(self, src, weight: float, rows: tuple[int, int] | None = None) -> None:
        """accum += weight * src over the whole atlas; with rows = (k, S): accum = src on row band k
        of S of every camera (its image rows k H / S .. (k + 1) H / S), nothing elsewhere."""
        ctx, (W, H) = self.ctx, self.size
        ctx.disable(ctx.DEPTH_TEST)
        ctx.viewport = (0, 0, W, H)
        src.use(location=0)
        _set(self.prog_add, "src", 0)
        _set(self.prog_add, "weight", float(weight))
        if rows is None:
            ctx.enable(ctx.BLEND)
            ctx.blend_func = ctx.ONE, ctx.ONE
            self.add_vao.render(vertices=3)
            ctx.disable(ctx.BLEND)
        else:
            k, S = rows
            for i, cam in enumerate(self.sources):  # image row v is framebuffer row v (`projection`)
                y0, y1 = round(k * cam.height / S), round((k + 1) * cam.height / S)
                ctx.scissor = (int(self.offsets[i]), y0, cam.width, y1 - y0)
                self.add_vao.render(vertices=3)
            ctx.scissor = None
        ctx.enable(ctx.DEPTH_TEST)

    def _post(self, lighting: Lighting, ego2world: np.ndarray, exposures, seed: int, radiance=None) -> None:
        ctx, p, (W, H) = self.ctx, self.prog_post, self.size
        radiance = self.radiance if radiance is None else radiance
        ctx.disable(ctx.DEPTH_TEST)
        if self.look.hdr and self.look.glare == "on":
            radiance.build_mipmaps()
        self.fbo_out.use()
        radiance.use(location=0)
        _set(p, "radiance", 0)
        _set(p, "atlas", (float(W), float(H)))
        self._uniforms(p, lighting)
        _set(p, "noise_std", float(lighting.noise_std))
        _set(p, "shot_gain", float(lighting.shot_gain))
        _set(p, "sky_fog", float(1.0 - np.exp(-lighting.fog_density * 150.0)))
        for i, cam in enumerate(self.sources):
            x0 = int(self.offsets[i])
            ctx.viewport = (x0, 0, cam.width, cam.height)
            cam2world = ego2world @ self.extrinsics[i]
            _set(p, "rect", (float(x0), 0.0, float(cam.width), float(cam.height)))
            _set(p, "pix2world", (cam2world[:3, :3] @ np.linalg.inv(cam.K)).astype("f4").T.tobytes())
            _set(p, "principal", (float(cam.K[0, 2]), float(cam.K[1, 2])))
            _set(p, "focal", float(cam.K[0, 0]))
            _set(p, "exposure", float(exposures[i]))
            _set(p, "seed", int(seed * 16 + i) & 0xFFFFFFFF)
            self.post_vao.render(vertices=3)
        ctx.enable(ctx.DEPTH_TEST)

    def read(self) -> list[CameraImages]:
        """The frame `draw` drew, read back: every camera's RGB and label channels."""
        W, H = self.size
        color = np.frombuffer(self.fbo_out.read(components=3), np.uint8).reshape(H, W, 3)
        normal = np.frombuffer(self.label_targets[0].read(), np.uint8).reshape(H, W, 4)[..., :3]
        depth = np.frombuffer(self.label_targets[1].read(), np.float32).reshape(H, W)
        label = np.frombuffer(self.label_targets[2].read(), np.uint32).reshape(H, W)
        out = []
        for i, (cam, lens) in enumerate(zip(self.sources, self.lenses, strict=True)):
            x0 = int(self.offsets[i])
            sl = (slice(0, cam.height), slice(x0, x0 + cam.width))
            d = lens.nearest(depth[sl])  # z-depth and normals are of the camera frame, which the lens keeps
            n = lens.nearest(normal[sl]) * np.float32(2.0 / 255.0) - np.float32(1.0)
            n *= (d > 0)[..., None]  # depth 0: no surface (sky), normal stays 0
            lab = lens.nearest(label[sl])
            out.append(CameraImages(
                rgb=np.ascontiguousarray(lens.bilinear(color[sl])),
                normal=n,
                depth=np.ascontiguousarray(d),
                semantic=(lab >> 16).astype(np.uint8),
                instance=(lab & 0xFFFF).astype(np.int32),
                source=(label[sl], depth[sl], normal[sl]) if lens.distorted else None,
            ))
        return out
