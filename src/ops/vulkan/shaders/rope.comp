// Rotary embedding (rotate-half form) on the q and k thirds of qkv (n, 3D), token i at position
// pos0 + i. cos/sin come from a table (positions, hd/2) made on the CPU in fp32, so every angle is
// exactly the CPU reference's (GPU sin/cos of large angles are not).
#version 450
layout(local_size_x = 64) in;
layout(push_constant) uniform Push { uint n, dim, heads, pos0; } pc;
layout(std430, binding = 0) buffer QKV { float qkv[]; };
layout(std430, binding = 1) readonly buffer Table { vec2 cos_sin[]; };

void main() {
  const uint i = gl_WorkGroupID.y, hd = pc.dim / pc.heads, half_hd = hd / 2u;
  for (uint e = gl_GlobalInvocationID.x; e < pc.heads * half_hd; e += gl_NumWorkGroups.x * gl_WorkGroupSize.x) {
    const uint h = e / half_hd, p = e % half_hd;
    const vec2 cs = cos_sin[(pc.pos0 + i) * half_hd + p];
    for (uint part = 0u; part < 2u; ++part) {
      const uint at = i * 3u * pc.dim + part * pc.dim + h * hd + p;
      const float x1 = qkv[at], x2 = qkv[at + half_hd];
      qkv[at] = x1 * cs.x - x2 * cs.y;
      qkv[at + half_hd] = x2 * cs.x + x1 * cs.y;
    }
  }
}
