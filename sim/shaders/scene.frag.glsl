// Shading and the exact label channels. Variants (#defines prepended by sim/render.py):
//   COLOR     linear radiance (before exposure) into location 0, alpha 1 (0 = sky, cleared)
//   LABELS    camera-frame normal, z-depth and semantic << 16 | instance at LOC_NORMAL, LOC_DEPTH, LOC_LABEL
//   TEXTURES  procedural materials (asphalt wear and patches, concrete, facades with windows,
//             foliage, grass, faded paint); without it every surface is its flat colour
//   HDR       specular sun and lamps, reflections of the sky on glass, paint and wet roads, lit
//             windows at night, bright emissive lamps (tone mapped in post.frag.glsl)
//   SHADOWS   the sun's shadow map
// Exposure, sky, glare, sensor noise and tone mapping happen in post.frag.glsl.
const int MAX_LIGHTS = 16;
uniform vec3 sun_dir;
uniform vec3 sun_color;
uniform vec3 ambient;
uniform vec3 fog_color;
uniform float fog_density;
uniform float rain;
uniform float night;  // 1 at night: lit windows
uniform uint seed;
uniform int n_lights;
uniform vec3 light_pos[MAX_LIGHTS];
uniform vec3 light_color[MAX_LIGHTS];
uniform vec3 light_dir[MAX_LIGHTS];
uniform vec3 cam_pos;  // camera centre, world
uniform vec3 sky_zenith;
uniform vec3 sky_horizon;
uniform float emissive_gain;
#ifdef SHADOWS
uniform sampler2DShadow shadow_map;
uniform mat4 shadow_vp;
#endif
in vec3 v_world;
in vec3 v_cam;
in vec3 v_nworld;
in vec3 v_ncam;
in vec3 v_color;
in float v_emissive;
flat in uint v_label;
flat in float v_material;
#ifdef COLOR
layout(location = 0) out vec4 o_color;
#endif
#ifdef LABELS
layout(location = LOC_NORMAL) out vec4 o_normal;
layout(location = LOC_DEPTH) out float o_depth;
layout(location = LOC_LABEL) out uint o_label;
#endif

float hash(uvec3 p) {  // integer hash -> [0, 1)
    uint h = p.x * 374761393u + p.y * 668265263u + p.z * 2246822519u;
    h = (h ^ (h >> 13u)) * 1274126177u;
    return float((h ^ (h >> 16u)) & 0xFFFFFFu) / 16777216.0;
}

float hash2(vec2 p) {
    return hash(uvec3(uvec2(ivec2(floor(p))), 91u));
}

float vnoise(vec2 p) {  // value noise in [0, 1)
    vec2 i = floor(p);
    vec2 f = p - i;
    f = f * f * (3.0 - 2.0 * f);
    float a = hash2(i), b = hash2(i + vec2(1.0, 0.0)), c = hash2(i + vec2(0.0, 1.0)), d = hash2(i + vec2(1.0, 1.0));
    return mix(mix(a, b, f.x), mix(c, d, f.x), f.y);
}

vec3 sky_at(vec3 d) {  // sky radiance along a world direction (reflections)
    float e = clamp(d.z, 0.0, 1.0);
    return mix(sky_horizon, sky_zenith, sqrt(e));
}

void main() {
    vec3 n = normalize(v_nworld);
    vec3 nc = normalize(v_ncam);
    if (dot(nc, v_cam) > 0.0) { n = -n; nc = -nc; }  // two-sided: face the camera
#ifdef LABELS
    o_normal = vec4(nc * 0.5 + 0.5, 1.0);
    o_depth = v_cam.z;
    o_label = v_label;
#endif
#ifdef COLOR
    vec3 albedo = v_color;
    vec3 emit = vec3(0.0);
    float spec = 0.0, shin = 32.0, f0 = 0.0;  // specular strength, exponent, Fresnel reflectance at normal incidence
    int mat = int(v_material);
    float mp = fract(v_material);
    float dist = length(v_cam);
    vec2 xy = v_world.xy;
#ifdef TEXTURES
    float fade = clamp(1.0 - dist / 30.0, 0.0, 1.0);  // fine grain fades out before it would alias
    if (mat == 1) {  // asphalt: large tone variation, darker patches (more with wear), aggregate grain
        albedo *= 0.78 + 0.4 * vnoise(xy * 0.06);
        float patch_ = smoothstep(0.7 - 0.3 * mp, 0.73 - 0.3 * mp, vnoise(xy * 0.16 + 31.7));
        albedo = mix(albedo, albedo * vec3(0.62, 0.62, 0.66), patch_);
        albedo = mix(albedo, albedo * 1.35, smoothstep(0.78, 0.9, vnoise(xy * vec2(0.9, 0.13) + 4.1)) * mp);  // worn streaks
        albedo *= 1.0 + (hash2(xy * 25.0) - 0.5) * 0.4 * fade;
    } else if (mat == 5) {  // paint: faded where worn
        float worn = smoothstep(0.35, 0.85, vnoise(xy * 1.7 + 3.1)) * (0.3 + 0.6 * mp);
        albedo = mix(albedo, vec3(0.17), worn);
    } else if (mat == 2) {  // concrete / paving
        albedo *= 0.85 + 0.25 * vnoise(xy * 0.7 + 1.3) + (hash2(xy * 20.0) - 0.5) * 0.2 * fade;
        albedo = mix(albedo, albedo * 0.6, smoothstep(0.72, 0.8, vnoise(xy * 0.35 + 9.0)));  // stains
    } else if (mat == 8) {  // grass and dirt
        albedo *= 0.65 + 0.6 * vnoise(xy * 0.45);
        albedo = mix(albedo, vec3(0.26, 0.2, 0.12), smoothstep(0.62, 0.8, vnoise(xy * 0.11 + 5.0)));
        albedo *= 1.0 + (hash2(xy * 12.0) - 0.5) * 0.5 * fade;
    } else if (mat == 4) {  // foliage: clumps of light and dark leaves
        vec2 q = vec2(dot(v_world, vec3(1.3, 0.4, 1.7)), dot(v_world, vec3(-0.5, 1.5, 1.1)));
        albedo *= 0.45 + 0.9 * vnoise(q * 1.8) * (0.7 + 0.6 * vnoise(q * 0.5 + mp * 10.0));
    } else if (mat == 12) {  // bark
        albedo *= 0.7 + 0.5 * vnoise(vec2(v_world.z * 6.0, dot(xy, vec2(3.0))));
    } else if (mat == 3) {  // facade: floors of windows on walls, plain roofs
        if (abs(n.z) < 0.5) {
            vec2 t = normalize(vec2(-n.y, n.x));
            float spacing = mix(2.2, 3.6, mp);
            vec2 cell = vec2(dot(xy, t) / spacing, (v_world.z - 0.6) / 3.2);
            vec2 ci = floor(cell), f = cell - ci;
            float ww = mix(0.45, 0.75, fract(mp * 7.0)), wh = mix(0.45, 0.65, fract(mp * 13.0));
            float inside = step(abs(f.x - 0.5), ww * 0.5) * step(abs(f.y - 0.5), wh * 0.5) * step(0.0, ci.y);
            float blur = clamp(max(fwidth(cell.x), fwidth(cell.y)) * 2.0 - 0.5, 0.0, 1.0);  // windows under a pixel: their mean
            float w = mix(inside, ww * wh * 0.8, blur);
            albedo *= 0.9 + 0.2 * hash2(ci * vec2(1.0, 3.0) + 0.5);
            albedo = mix(albedo, vec3(0.05, 0.06, 0.07), w);
            spec = mix(spec, 0.8, w); shin = mix(shin, 200.0, w); f0 = mix(f0, 0.08, w);
#ifdef HDR
            float lit = hash(uvec3(uvec2(ivec2(ci) + ivec2(40000)), uint(mp * 977.0)));
            if (night > 0.0 && lit < 0.35) emit = vec3(1.0, 0.72, 0.42) * (0.5 + 1.5 * fract(lit * 17.0)) * w * night;
#endif
        } else {
            albedo *= 0.55;
        }
    }
#endif
    if (mat == 6) { spec = 0.15 + 0.6 * mp; shin = 20.0 + 200.0 * mp; f0 = 0.04; }  // car paint
    else if (mat == 7) { spec = 1.0; shin = 250.0; f0 = 0.06; }  // glass
    else if (mat == 10) { spec = 0.35; shin = 40.0; f0 = 0.03; }  // metal
    else if (mat == 1 && rain > 0.0) {  // wet asphalt: darker, glossy, puddles mirror the sky
        float puddle = smoothstep(0.55, 0.7, vnoise(xy * 0.25 + 7.0));
        albedo *= 1.0 - 0.35 * rain;
        spec = rain * (0.5 + 0.5 * puddle); shin = mix(40.0, 400.0, puddle); f0 = rain * mix(0.03, 0.3, puddle);
    }
    float sh = 1.0;
#ifdef SHADOWS
    vec4 sp = shadow_vp * vec4(v_world + n * 0.06, 1.0);
    vec3 s3 = sp.xyz * 0.5 + 0.5;
    if (all(greaterThan(s3, vec3(0.0))) && all(lessThan(s3, vec3(1.0)))) sh = texture(shadow_map, vec3(s3.xy, s3.z - 0.001));
#endif
    float ndl = max(dot(n, sun_dir), 0.0);
    vec3 c = albedo * (ambient * (0.75 + 0.25 * n.z) + sun_color * ndl * sh);
#ifdef HDR
    vec3 V = normalize(cam_pos - v_world);
    if (spec > 0.0 && ndl > 0.0) c += sun_color * sh * spec * pow(max(dot(n, normalize(sun_dir + V)), 0.0), shin);
#endif
    for (int i = 0; i < n_lights; ++i) {
        vec3 L = light_pos[i] - v_world;
        float d2 = dot(L, L);
        L *= inversesqrt(d2);
        float spot = dot(light_dir[i], light_dir[i]) > 0.0 ? smoothstep(0.75, 0.95, dot(-L, normalize(light_dir[i]))) : 1.0;
        float fall = spot * (12.0 / (4.0 + d2));
        c += albedo * light_color[i] * max(dot(n, L), 0.0) * fall;
#ifdef HDR
        if (spec > 0.0) c += light_color[i] * spec * pow(max(dot(n, normalize(L + V)), 0.0), shin) * fall;
#endif
    }
#ifdef HDR
    if (f0 > 0.0) {  // Schlick's Fresnel: grazing views mirror the sky
        float fr = f0 + (1.0 - f0) * pow(1.0 - max(dot(n, V), 0.0), 5.0);
        c = mix(c, sky_at(reflect(-V, n)) * sh, fr * min(spec, 1.0));
    }
#endif
    c += v_color * v_emissive * emissive_gain + emit;
    c = mix(fog_color, c, exp(-fog_density * dist));
    vec2 px = gl_FragCoord.xy;
    if (rain > 0.0) {  // slanted streaks, brighter near the camera
        uvec3 cell = uvec3(uint(px.x), uint((px.y + px.x * 0.35) / 10.0), seed);
        if (hash(cell) < 0.012 * rain) c = mix(c, vec3(0.75), 0.2);
    }
    o_color = vec4(c, 1.0);
#endif
}
