// Decode GEMV (one token): y (ldy) [+]= x (cols) · W(chunk)ᵀ. Each row set of ROWS weight rows
// (specialization constant 0) is read by SPLIT subgroups (constant 1; a divisor of the workgroup's
// subgroups): Ops picks both per shape (vulkan_notes.md). When rows are whole 16-byte words, lane i
// of part p reads words p·S + i, p·S + i + SPLIT·S, ... of each of its rows (S = subgroup size, so
// each subgroup load is S contiguous words), the ROWS rows' words loaded together and x read as
// vec4 once for all of them (rows_dot, gemv_common.glsl), decoding whole 32-bit words: f16 as pairs
// (unpackHalf2x16), int8 four and int4 eight at a time (offset binary in a float's mantissa, no
// int-to-float conversion). Other rows (odd sizes) go element by element. Subgroup sums end a row,
// then (SPLIT > 1) the parts' sums meet in shared memory.
// pc.norm != 0: RMSNorm fused in front, y = (x·rstd·g)·Wᵀ: each lane sums x² over the columns it
// reads (the row set's subgroups read the row's columns once), the dot runs on x·g, and each row's
// sum is scaled by rstd = 1/sqrt(Σx²/cols + eps) at the end, so no normalised copy of x is written.
// pc.rope_heads = H != 0: W is the qkv projection (3D rows: q, k, v; D = H·hd; one chunk, no
// accumulate or SiLU), and the store is rope.comp's work too: at p = position[0], q and k rotated
// (rotate-half, cos/sin from the table) and k, v written to row p of the KV cache. Rows i and
// i + hd/2 of a head rotate together, so a subgroup's ROWS (even) rows are such pairs: logical row
// 2j, 2j + 1 -> the j-th pair's two rows (rope_row).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint ROWS = 1u;
layout(constant_id = 1) const uint SPLIT = 1u;
#define GEMV_N ROWS
#define GEMV_N_SPEC
#include "matmul_common.glsl"
#include "gemv_common.glsl"

layout(std430, binding = 7) readonly buffer Table { vec2 cos_sin[]; };  // (positions, hd/2)
layout(std430, binding = 8) readonly buffer Position { uint position[]; };
layout(std430, binding = 9) writeonly buffer KCache { float k_cache[]; };  // (positions, D)
layout(std430, binding = 10) writeonly buffer VCache { float v_cache[]; };

// The weight row of logical row l: with RoPE, the pairs of q's and k's heads in turn, then v's rows.
uint rope_row(uint l) {
  if (pc.rope_heads == 0u || l >= 2u * (pc.rows / 3u)) return l;
  const uint half_hd = pc.rows / 3u / pc.rope_heads / 2u;
  const uint pair = l >> 1u;
  return pair / half_hd * 2u * half_hd + pair % half_hd + (l & 1u) * half_hd;
}

// Logical rows l (even) and l + 1 with sums a, b: biased, rotated where q or k, stored, appended.
void store_rope_pair(uint l, float a, float b) {
  const uint D = pc.rows / 3u, half_hd = D / pc.rope_heads / 2u, pos = position[0];
  const uint ra = rope_row(l), rb = rope_row(l + 1u);
  a += bias_at(ra), b += bias_at(rb);
  if (l < 2u * D) {
    const vec2 cs = cos_sin[pos * half_hd + ra % half_hd];
    const float ya = a * cs.x - b * cs.y, yb = b * cs.x + a * cs.y;
    a = ya, b = yb;
  }
  Y[ra] = a, Y[rb] = b;
  if (ra >= 2u * D) v_cache[pos * D + ra - 2u * D] = a, v_cache[pos * D + rb - 2u * D] = b;
  else if (ra >= D) k_cache[pos * D + ra - D] = a, k_cache[pos * D + rb - D] = b;
}

shared float part_sums[32u * (ROWS + 1u)];  // per subgroup (up to 32): its rows' sums, then Σx²

void main() {
  const uint lane = gl_SubgroupInvocationID, S = gl_SubgroupSize, sg = gl_SubgroupID;
  const uint part = sg % SPLIT, per_group = gl_NumSubgroups / SPLIT * ROWS;
  for (uint base = gl_WorkGroupID.x * per_group; base < pc.rows; base += gl_NumWorkGroups.x * per_group) {
    const uint r0 = base + sg / SPLIT * ROWS;
    for (uint i = 0u; i < ROWS; ++i) g_rows[i] = rope_row(min(r0 + i, pc.rows - 1u));
    sum_sq = 0.0;
    if (ROWS == 1u) g_acc[0] = row_dot(g_rows[0], part * S + lane, SPLIT * S);  // the plain loop
    else rows_dot(part * S + lane, SPLIT * S);
    float ss = pc.norm != 0u ? subgroupAdd(sum_sq) : 0.0;
    for (uint i = 0u; i < ROWS; ++i) g_acc[i] = subgroupAdd(g_acc[i]);
    if (SPLIT > 1u) {
      if (subgroupElect()) {
        for (uint i = 0u; i < ROWS; ++i) part_sums[sg * (ROWS + 1u) + i] = g_acc[i];
        part_sums[sg * (ROWS + 1u) + ROWS] = ss;
      }
      barrier();
      if (part == 0u)
        for (uint p = 1u; p < SPLIT; ++p) {
          for (uint i = 0u; i < ROWS; ++i) g_acc[i] += part_sums[(sg + p) * (ROWS + 1u) + i];
          ss += part_sums[(sg + p) * (ROWS + 1u) + ROWS];
        }
      barrier();
    }
    if (part != 0u) continue;
    const float rstd = pc.norm != 0u ? 1.0 / sqrt(ss / float(pc.cols) + pc.norm_eps) : 1.0;
    if (pc.rope_heads != 0u) {
      for (uint i = 0u; i < ROWS; i += 2u)
        if (lane == i % S && r0 + i < pc.rows) store_rope_pair(r0 + i, g_acc[i] * rstd, g_acc[i + 1u] * rstd);
    } else {
      for (uint i = 0u; i < ROWS; ++i)
        if (lane == i % S && r0 + i < pc.rows) store_y(0u, r0 + i, g_acc[i] * rstd);
    }
  }
}
