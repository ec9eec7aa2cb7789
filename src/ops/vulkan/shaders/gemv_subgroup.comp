// Decode GEMV (one token): y (ldy) [+]= x (cols) · W(chunk)ᵀ. One subgroup per weight row. When
// rows are whole 16-byte words, lane i reads words i, i + S, i + 2S, ... of its row (S = subgroup
// size, so each subgroup load is S contiguous words), x read as vec4 beside them, and decodes
// whole 32-bit words (gemv_common.glsl): f16 as pairs (unpackHalf2x16), int8 four and int4 eight
// at a time with shifts (sign extension by an arithmetic right shift). Other rows (odd
// sizes) go element by element. A subgroup reduction ends each row: no shared memory, no barriers.
// x is not staged in shared memory: a workgroup holds only 128 / S rows (enough workgroups to fill
// the GPU at D = 2048 needs few rows each), so staging would read all of x per few rows from L2
// again; the vec4 loads hit L1 instead.
// pc.norm != 0: RMSNorm fused in front, y = (x·rstd·g)·Wᵀ: each lane sums x² over the columns it
// reads (the subgroup reads the row's columns once), the dot runs on x·g, and the row's sum is
// scaled by rstd = 1/sqrt(Σx²/cols + eps) at the end, so no normalised copy of x is written.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 128) in;
#include "matmul_common.glsl"
#include "gemv_common.glsl"

void main() {
  const uint per_group = gl_NumSubgroups;
  for (uint r = gl_WorkGroupID.x * per_group + gl_SubgroupID; r < pc.rows;
       r += gl_NumWorkGroups.x * per_group) {
    sum_sq = 0.0;
    float sum = subgroupAdd(row_dot(r, gl_SubgroupInvocationID, gl_SubgroupSize));
    if (pc.norm != 0u) sum *= 1.0 / sqrt(subgroupAdd(sum_sq) / float(pc.cols) + pc.norm_eps);
    if (subgroupElect()) store_y(0u, r, sum);
  }
}
