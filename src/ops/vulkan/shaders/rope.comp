// Rotary embedding (rotate-half form) on the q and k parts of qkv (n, (heads + 2·kv_heads)·hd) =
// [q | k | v], token i at position p + i with p = pos0 + position[0] (read on the device, so that
// one recorded decode step serves every position). cos/sin come from a table (positions, hd/2)
// made on the CPU in fp32, so every angle is exactly the CPU reference's (GPU sin/cos of large
// angles are not). append != 0: the KV append too, token i's rotated k and its v written to row
// p + i of the caches (positions, kv_heads·hd).
#version 450
layout(local_size_x = 64) in;
layout(push_constant) uniform Push { uint n, heads, kv_heads, hd, pos0, append; } pc;
layout(std430, binding = 0) buffer QKV { float qkv[]; };
layout(std430, binding = 1) readonly buffer Table { vec2 cos_sin[]; };
layout(std430, binding = 2) readonly buffer Position { uint position[]; };
layout(std430, binding = 3) writeonly buffer KCache { float k_cache[]; };
layout(std430, binding = 4) writeonly buffer VCache { float v_cache[]; };

void main() {
  const uint i = gl_WorkGroupID.y, half_hd = pc.hd / 2u, Q = pc.heads * pc.hd, KV = pc.kv_heads * pc.hd;
  const uint row = i * (Q + 2u * KV), pos = pc.pos0 + position[0] + i;
  // Items: the query heads' pairs, then the key heads' (k follows q with the same head size).
  for (uint e = gl_GlobalInvocationID.x; e < (pc.heads + pc.kv_heads) * half_hd;
       e += gl_NumWorkGroups.x * gl_WorkGroupSize.x) {
    const uint h = e / half_hd, p = e % half_hd, c = h * pc.hd + p;
    const vec2 cs = cos_sin[pos * half_hd + p];
    const float x1 = qkv[row + c], x2 = qkv[row + c + half_hd];
    const float y1 = x1 * cs.x - x2 * cs.y, y2 = x2 * cs.x + x1 * cs.y;
    qkv[row + c] = y1;
    qkv[row + c + half_hd] = y2;
    if (h >= pc.heads && pc.append != 0u) {
      const uint kc = c - Q, at = pos * KV + kc;  // the column in k, v and the caches
      k_cache[at] = y1, k_cache[at + half_hd] = y2;
      v_cache[at] = qkv[row + Q + KV + kc], v_cache[at + half_hd] = qkv[row + Q + KV + kc + half_hd];
    }
  }
}
