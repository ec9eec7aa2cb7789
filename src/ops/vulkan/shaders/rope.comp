// Rotary embedding (rotate-half form) on the q and k thirds of qkv (n, 3D), token i at position
// p + i with p = pos0 + position[0] (read on the device, so that one recorded decode step serves
// every position). cos/sin come from a table (positions, hd/2) made on the CPU in fp32, so every
// angle is exactly the CPU reference's (GPU sin/cos of large angles are not). append != 0: the KV
// append too, token i's rotated k and its v written to row p + i of the caches (positions, D).
#version 450
layout(local_size_x = 64) in;
layout(push_constant) uniform Push { uint n, dim, heads, pos0, append; } pc;
layout(std430, binding = 0) buffer QKV { float qkv[]; };
layout(std430, binding = 1) readonly buffer Table { vec2 cos_sin[]; };
layout(std430, binding = 2) readonly buffer Position { uint position[]; };
layout(std430, binding = 3) writeonly buffer KCache { float k_cache[]; };
layout(std430, binding = 4) writeonly buffer VCache { float v_cache[]; };

void main() {
  const uint i = gl_WorkGroupID.y, hd = pc.dim / pc.heads, half_hd = hd / 2u;
  const uint pos = pc.pos0 + position[0] + i;
  for (uint e = gl_GlobalInvocationID.x; e < pc.heads * half_hd; e += gl_NumWorkGroups.x * gl_WorkGroupSize.x) {
    const uint h = e / half_hd, p = e % half_hd, c = h * hd + p;
    const vec2 cs = cos_sin[pos * half_hd + p];
    for (uint part = 0u; part < 2u; ++part) {
      const uint at = i * 3u * pc.dim + part * pc.dim + c;
      const float x1 = qkv[at], x2 = qkv[at + half_hd];
      const float y1 = x1 * cs.x - x2 * cs.y, y2 = x2 * cs.x + x1 * cs.y;
      qkv[at] = y1;
      qkv[at + half_hd] = y2;
      if (part == 1u && pc.append != 0u) k_cache[pos * pc.dim + c] = y1, k_cache[pos * pc.dim + c + half_hd] = y2;
    }
    if (pc.append != 0u) {
      const uint v = i * 3u * pc.dim + 2u * pc.dim + c;
      v_cache[pos * pc.dim + c] = qkv[v];
      v_cache[pos * pc.dim + c + half_hd] = qkv[v + half_hd];
    }
  }
}
