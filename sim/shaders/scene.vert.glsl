// World-space triangle soup -> one camera of the rig. The projection works on OpenCV camera
// coordinates (x right, y down, z forward) and maps image row 0 to the framebuffer's first row.
// (#version and the variant's #defines are prepended by sim/render.py.)
uniform mat4 world2cam;
uniform mat4 proj;
in vec3 in_pos;
in vec3 in_normal;
in vec3 in_color;
in float in_emissive;
in float in_semantic;
in float in_instance;
in float in_material;
out vec3 v_world;
out vec3 v_cam;
out vec3 v_nworld;
out vec3 v_ncam;
out vec3 v_color;
out float v_emissive;
flat out uint v_label;
flat out float v_material;
void main() {
    vec4 cam = world2cam * vec4(in_pos, 1.0);
    v_world = in_pos;
    v_cam = cam.xyz;
    v_nworld = in_normal;
    v_ncam = mat3(world2cam) * in_normal;
    v_color = in_color;
    v_emissive = in_emissive;
    v_label = (uint(in_semantic + 0.5) << 16) | uint(in_instance + 0.5);
    v_material = in_material;
    gl_Position = proj * cam;
}
