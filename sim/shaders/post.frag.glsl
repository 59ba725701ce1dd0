// The camera: linear radiance (resolved from the multisampled colour target; alpha = coverage,
// 0 where only sky was seen) -> sky behind partly covered pixels, glare, exposure, vignetting,
// sensor noise, tone curve, gamma. Drawn once per camera over its viewport of the atlas.
// Variants: HDR (sky gradient and sun, filmic tone mapping; without: a flat sky and a clamp),
// GLARE (light spilled around bright sources, from the mip chain), REALISTIC (shot + read noise in linear light and vignetting; without:
// the old Gaussian noise after gamma).
uniform sampler2D radiance;
uniform vec4 rect;  // x0, y0, width, height of this camera in the atlas (pixels)
uniform vec2 atlas;  // atlas size
uniform mat3 pix2world;  // image point (u, v, 1) -> world ray direction
uniform vec2 principal;  // cx, cy
uniform float focal;
uniform float exposure;
uniform uint seed;
uniform float noise_std;  // grey levels (8 bit)
uniform float shot_gain;  // photon noise variance per unit of linear signal
uniform vec3 sun_dir;
uniform vec3 sun_color;
uniform vec3 sky_zenith;
uniform vec3 sky_horizon;
uniform vec3 fog_color;
uniform float sky_fog;  // how much fog hides the sky gradient, 0..1
out vec4 o_color;

float hash(uvec3 p) {
    uint h = p.x * 374761393u + p.y * 668265263u + p.z * 2246822519u;
    h = (h ^ (h >> 13u)) * 1274126177u;
    return float((h ^ (h >> 16u)) & 0xFFFFFFu) / 16777216.0;
}

vec3 aces(vec3 x) {  // Narkowicz's fit of the ACES filmic curve
    return clamp(x * (2.51 * x + 0.03) / (x * (2.43 * x + 0.59) + 0.14), 0.0, 1.0);
}

void main() {
    vec2 px = gl_FragCoord.xy;
    vec4 h = texelFetch(radiance, ivec2(px), 0);
    vec2 uv = px - rect.xy - 0.5;  // image coordinates: pixel centres at integers (OpenCV)
#ifdef HDR
    vec3 d = normalize(pix2world * vec3(uv, 1.0));
    float e = max(d.z, 0.0);
    vec3 sky = mix(sky_horizon, sky_zenith, pow(e, 0.45));
    float cs = max(dot(d, sun_dir), 0.0);
    sky += sun_color * (0.35 * pow(cs, 12.0) + 4.0 * smoothstep(0.9995, 0.9998, cs)) * step(0.0, sun_dir.z);
    sky = mix(sky, fog_color, sky_fog);
#else
    vec3 sky = fog_color;
#endif
    vec3 c = h.rgb + (1.0 - h.a) * sky;
#ifdef GLARE
    // glare: light spilled around bright sources (lamps, headlights, the sun on glass)
    vec2 lo = rect.xy + 16.0, hi = rect.xy + rect.zw - 16.0;
    vec2 q = clamp(px, lo, hi) / atlas;
    vec3 g = textureLod(radiance, q, 3.0).rgb * 0.6 + textureLod(radiance, q, 5.0).rgb * 0.4;
    c += max(g - 1.2 / exposure, 0.0) * 0.25;
#endif
    c *= exposure;
#ifdef REALISTIC
    vec2 r = (uv - principal) / focal;
    float cos4 = 1.0 / ((1.0 + dot(r, r)) * (1.0 + dot(r, r)));
    c *= mix(1.0, cos4, 0.35);  // lens vignetting, partly corrected as a camera's ISP does
    vec3 g3;
    for (int k = 0; k < 3; ++k) {  // ~N(0, 1): sum of four uniforms
        float s = 0.0;
        for (uint j = 0u; j < 4u; ++j) s += hash(uvec3(uint(px.x), uint(px.y) * 4u + j, seed * 3u + uint(k)));
        g3[k] = (s - 2.0) * 1.7320508;
    }
    float read = noise_std / 255.0 * 0.35;
    c += sqrt(max(c, 0.0) * shot_gain + read * read) * g3;
#endif
#ifdef HDR
    c = aces(c);
#endif
    c = pow(clamp(c, 0.0, 1.0), vec3(1.0 / 2.2));
#ifndef REALISTIC
    float gn = hash(uvec3(uint(px.x), uint(px.y), seed)) + hash(uvec3(uint(px.y), uint(px.x), seed + 7u)) - 1.0;
    c += gn * noise_std * 2.45 / 255.0;  // sum of two uniforms: std 1/sqrt(6)
#endif
    o_color = vec4(clamp(c, 0.0, 1.0), 1.0);
}
