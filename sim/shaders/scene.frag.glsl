#version 330
// Shading (sun, sky ambient, street lamps and headlights, emissive lamps, fog, rain streaks,
// exposure, sensor noise) plus the exact label channels: camera-frame normal, z-depth and
// semantic << 16 | instance.
const int MAX_LIGHTS = 16;
uniform vec3 sun_dir;
uniform vec3 sun_color;
uniform vec3 ambient;
uniform vec3 fog_color;
uniform float fog_density;
uniform float exposure;
uniform float noise_std;
uniform float rain;
uniform uint seed;
uniform int n_lights;
uniform vec3 light_pos[MAX_LIGHTS];
uniform vec3 light_color[MAX_LIGHTS];
uniform vec3 light_dir[MAX_LIGHTS];
in vec3 v_world;
in vec3 v_cam;
in vec3 v_nworld;
in vec3 v_ncam;
in vec3 v_color;
in float v_emissive;
flat in uint v_label;
layout(location = 0) out vec4 o_color;
layout(location = 1) out vec4 o_normal;
layout(location = 2) out float o_depth;
layout(location = 3) out uint o_label;

float hash(uvec3 p) {  // integer hash -> [0, 1)
    uint h = p.x * 374761393u + p.y * 668265263u + p.z * 2246822519u;
    h = (h ^ (h >> 13u)) * 1274126177u;
    return float((h ^ (h >> 16u)) & 0xFFFFFFu) / 16777216.0;
}

void main() {
    vec3 n = normalize(v_nworld);
    vec3 nc = normalize(v_ncam);
    if (dot(nc, v_cam) > 0.0) { n = -n; nc = -nc; }  // two-sided: face the camera
    vec3 c = v_color * (ambient * (0.75 + 0.25 * n.z) + sun_color * max(dot(n, sun_dir), 0.0));
    for (int i = 0; i < n_lights; ++i) {
        vec3 L = light_pos[i] - v_world;
        float d2 = dot(L, L);
        L *= inversesqrt(d2);
        float spot = dot(light_dir[i], light_dir[i]) > 0.0 ? smoothstep(0.75, 0.95, dot(-L, normalize(light_dir[i]))) : 1.0;
        c += v_color * light_color[i] * max(dot(n, L), 0.0) * spot * (12.0 / (4.0 + d2));
    }
    c += v_color * v_emissive * 1.5;
    float dist = length(v_cam);
    c = mix(fog_color, c, exp(-fog_density * dist));
    vec2 px = gl_FragCoord.xy;
    if (rain > 0.0) {  // slanted streaks, brighter near the camera
        uvec3 cell = uvec3(uint(px.x), uint((px.y + px.x * 0.35) / 10.0), seed);
        if (hash(cell) < 0.012 * rain) c = mix(c, vec3(0.75), 0.2);
    }
    c = pow(clamp(c * exposure, 0.0, 1.0), vec3(1.0 / 2.2));
    float g = hash(uvec3(uint(px.x), uint(px.y), seed)) + hash(uvec3(uint(px.y), uint(px.x), seed + 7u)) - 1.0;
    c += g * noise_std * 2.45 / 255.0;  // sum of two uniforms: std 1/sqrt(6)
    o_color = vec4(clamp(c, 0.0, 1.0), 1.0);
    o_normal = vec4(nc * 0.5 + 0.5, 1.0);
    o_depth = v_cam.z;
    o_label = v_label;
}
