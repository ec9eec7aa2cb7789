// Prefill GEMM on cooperative matrices (VK_KHR_cooperative_matrix, fp16 x fp16 -> fp32,
// 16x16x16): Y (n, ldy) [+]= X (n, cols) · W(chunk)ᵀ. A workgroup of 4 subgroups of 32 owns a
// 64x64 output tile (tokens m0.., weight rows n0..); subgroup s owns 32 tokens (s / 2) x 32 rows
// (s % 2): 2 x 2 accumulators. Each K step of 32 stages X (rounded to fp16) and W (decoded, rounded
// to fp16) in shared memory; thread t loads half (t % 2) of the step's 32 columns of token and row
// t / 2 as whole words where the layout allows (X as vec4, W as 16-byte words: f16 taken as is, int8
// and int4 scaled; else element by element), and the next step's words are loaded into registers
// while this step's products run. The plain tiled GEMM is the oracle; fp16 rounding of both inputs
// sets the tolerance.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 128) in;
#include "matmul_common.glsl"
layout(std430, binding = 0) readonly buffer X4Buf { vec4 X4[]; };  // X as vec4

const uint TM = 64u, TN = 64u, TK = 32u, LDS = TK + 8u;  // +8 halves: fewer bank conflicts
shared float16_t As[TM * LDS];  // X tile, (token, k) row-major
shared float16_t Bs[TN * LDS];  // W tile, (weight row, k) row-major = B (k, n) column-major
shared float Cs[4u * 256u];     // per subgroup: one 16x16 accumulator on its way to Y

// This thread's share of a K step: 16 values of a token row of X and of a weight row of W.
uint tile_row, half_k;  // token tile_row of X's tile and weight row tile_row of W's
vec4 xa[4];     // X, when vector loads apply
uvec4 wq[4];    // W's raw words
float wscale;   // int8 / int4 scale of those words
bool x_vec, w_words;

void load_step(uint k0) {
  const uint c0 = k0 + half_k * 16u, m = gl_WorkGroupID.y * TM + tile_row, r = gl_WorkGroupID.x * TN + tile_row;
  if (x_vec) {
    for (uint j = 0u; j < 4u; ++j)
      xa[j] = m < pc.n && c0 + 4u * j < pc.cols ? X4[(pc.x_off + m * pc.cols + c0 + 4u * j) >> 2] : vec4(0.0);
  }
  if (!w_words || r >= pc.rows || c0 + 16u > pc.cols) return;  // store_step goes element by element
  if (pc.wtype == WT_F32) {
    for (uint j = 0u; j < 4u; ++j) wq[j] = W4[(r * pc.cols + c0) / 4u + j];
  } else if (pc.wtype == WT_F16) {
    const uint at = (r * pc.cols + c0) / 8u;
    wq[0] = W4[at], wq[1] = W4[at + 1u];
  } else if (pc.wtype == WT_INT8) {
    wq[0] = W4[(r * pc.cols + c0) / 16u];
    wscale = scale_at(pc.row_base + r);
  } else {
    const uint at = (r * int4_row_bytes() + c0 / 2u) / 4u;
    wq[0].xy = uvec2(W[at], W[at + 1u]);
    wscale = scale_at((pc.row_base + r) * int4_groups() + c0 / pc.group);
  }
}

void store_step(uint k0) {
  const uint c0 = k0 + half_k * 16u, m = gl_WorkGroupID.y * TM + tile_row, r = gl_WorkGroupID.x * TN + tile_row;
  const uint a = tile_row * LDS + half_k * 16u, b = tile_row * LDS + half_k * 16u;
  for (uint j = 0u; j < 16u; ++j) {
    float x;
    if (x_vec) x = xa[j / 4u][j % 4u];
    else x = m < pc.n && c0 + j < pc.cols ? X[pc.x_off + m * pc.cols + c0 + j] : 0.0;
    As[a + j] = float16_t(x);
  }
  if (!w_words || r >= pc.rows || c0 + 16u > pc.cols) {
    for (uint j = 0u; j < 16u; ++j)
      Bs[b + j] = float16_t(r < pc.rows && c0 + j < pc.cols ? w_at(r, c0 + j) : 0.0);
    return;
  }
  if (pc.wtype == WT_F32) {
    for (uint j = 0u; j < 16u; ++j) Bs[b + j] = float16_t(uintBitsToFloat(wq[j / 4u][j % 4u]));
  } else if (pc.wtype == WT_F16) {
    for (uint j = 0u; j < 8u; ++j) {
      const f16vec2 h = unpackFloat2x16(wq[j / 4u][j % 4u]);
      Bs[b + 2u * j] = h.x, Bs[b + 2u * j + 1u] = h.y;
    }
  } else if (pc.wtype == WT_INT8) {
    for (uint j = 0u; j < 16u; ++j)
      Bs[b + j] = float16_t(float(bitfieldExtract(int(wq[0][j / 4u]), int(8u * (j % 4u)), 8)) * wscale);
  } else {
    for (uint j = 0u; j < 16u; ++j)
      Bs[b + j] = float16_t(float(bitfieldExtract(int(wq[0][j / 8u]), int(4u * (j % 8u)), 4)) * wscale);
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  tile_row = tid / 2u, half_k = tid % 2u;
  x_vec = pc.x_off % 4u == 0u && pc.cols % 4u == 0u;
  // Whole words: a word never straddles the end of a row or (int4) a scale group.
  w_words = pc.wtype == WT_F32 ? pc.cols % 4u == 0u
          : pc.wtype == WT_F16 ? pc.cols % 8u == 0u
          : pc.wtype == WT_INT8 ? pc.cols % 16u == 0u
                                : pc.cols % 16u == 0u && pc.group % 16u == 0u;
  coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc[2][2];
  for (uint i = 0u; i < 2u; ++i)
    for (uint j = 0u; j < 2u; ++j) acc[i][j] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
  const uint tm = (sg / 2u) * 32u, tn = (sg % 2u) * 32u;
  load_step(0u);
  for (uint k0 = 0u; k0 < pc.cols; k0 += TK) {
    store_step(k0);
    barrier();
    if (k0 + TK < pc.cols) load_step(k0 + TK);  // in flight while the products below run
    for (uint kk = 0u; kk < TK; kk += 16u) {
      coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a[2];
      coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> b[2];
      for (uint i = 0u; i < 2u; ++i)
        coopMatLoad(a[i], As, (tm + 16u * i) * LDS + kk, LDS, gl_CooperativeMatrixLayoutRowMajor);
      for (uint j = 0u; j < 2u; ++j)
        coopMatLoad(b[j], Bs, (tn + 16u * j) * LDS + kk, LDS, gl_CooperativeMatrixLayoutColumnMajor);
      for (uint i = 0u; i < 2u; ++i)
        for (uint j = 0u; j < 2u; ++j) acc[i][j] = coopMatMulAdd(a[i], b[j], acc[i][j]);
    }
    barrier();
  }
  // Each accumulator through this subgroup's 16x16 of shared memory, then to Y.
  for (uint i = 0u; i < 2u; ++i)
    for (uint j = 0u; j < 2u; ++j) {
      coopMatStore(acc[i][j], Cs, sg * 256u, 16u, gl_CooperativeMatrixLayoutRowMajor);
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      for (uint e = lane; e < 256u; e += gl_SubgroupSize) {
        const uint m = gl_WorkGroupID.y * TM + tm + 16u * i + e / 16u;
        const uint r = gl_WorkGroupID.x * TN + tn + 16u * j + e % 16u;
        if (m < pc.n && r < pc.rows) store_y(m, r, Cs[sg * 256u + e]);
      }
      subgroupBarrier();
    }
}
