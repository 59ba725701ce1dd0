#version 330
// World-space triangle soup -> one camera of the rig. The projection works on OpenCV camera
// coordinates (x right, y down, z forward) and maps image row 0 to the framebuffer's first row.
uniform mat4 world2cam;
uniform mat4 proj;
in vec3 in_pos;
in vec3 in_normal;
in vec3 in_color;
in float in_emissive;
in float in_semantic;
in float in_instance;
out vec3 v_world;
out vec3 v_cam;
out vec3 v_nworld;
out vec3 v_ncam;
out vec3 v_color;
out float v_emissive;
flat out uint v_label;
void main() {
    vec4 cam = world2cam * vec4(in_pos, 1.0);
    v_world = in_pos;
    v_cam = cam.xyz;
    v_nworld = in_normal;
    v_ncam = mat3(world2cam) * in_normal;
    v_color = in_color;
    v_emissive = in_emissive;
    v_label = (uint(in_semantic + 0.5) << 16) | uint(in_instance + 0.5);
    gl_Position = proj * cam;
}
