// Prefill GEMM on NVIDIA's workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2), fp16
// weights (f16 as stored; int8 / int4 decoded by coopmat2_weights.comp first, a piece of rows at a
// time): Y (n, ldy) [+]= act(X (n, cols) · W(chunk)ᵀ [+ bias]). A workgroup owns a BM x BN tile
// of Y (tokens m0.., weight rows r0..) as one accumulator and walks K in steps of BK: X's BM x BK
// slice (fp16: coopmat2_halves.comp wrote it, binding 0) and W's BN x BK slice transposed to
// BK x BN, then one coopMatMulAdd. The driver stages the tiles (with VK_KHR_cooperative_matrix,
// gemm_coopmat.comp, every byte in flight is a register of its own). Tiles inside the matrices
// load through unclamped tensor layouts whose strides are visibly whole 16-byte words (without
// that, H200: 2x slower than gemm_coopmat); edge tiles through clamped ones (reads past the edges
// are 0, stores past them dropped). The epilogue (bias, SiLU, the residual add) runs per element,
// then one tensor store. Ops::uses_coopmat2 chooses it (columns a multiple of 32): H200, 512
// tokens at the seed size, 92-147 against gemm_coopmat's 62-74 TFLOP/s. (int8 through a decode
// function in the tensor load ran no faster than gemm_coopmat, int4 3x slower: bench/vulkan_notes.md,
// 2026-12-02.)
// Split K (gl_NumWorkGroups.z > 1, where the tiles alone leave the GPU part idle: few tokens,
// few rows): workgroup z sums the columns of its share of the K steps and stores the raw sums at
// rows z·n .. of the Y binding, a (splits·n, rows) scratch (pc.ldy = rows, pc.row_base 0);
// coopmat2_reduce.comp adds them up and applies the epilogue.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 256) in;
#include "matmul_common.glsl"
layout(std430, binding = 0) readonly buffer X16Buf { float16_t X16[]; };  // X as fp16 (pc.x_off 0)
layout(std430, binding = 2) readonly buffer W16Buf { float16_t W16[]; };  // the f16 weights

layout(constant_id = 0) const uint BM = 128u;  // tokens a tile
layout(constant_id = 1) const uint BN = 128u;  // weight rows a tile
layout(constant_id = 2) const uint BK = 64u;   // columns a K step

#define ACC coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>
#define MAT_A coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>
#define MAT_B coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>

// Element (i, j) of the tile at (m0, r0): bias, SiLU, and Y's value added (store_y's order).
float epilogue(const in uint i, const in uint j, const in float v, const in uint m0, const in uint r0) {
  const uint m = m0 + i, r = r0 + j;
  if (m >= pc.n || r >= pc.rows) return v;
  float y = v + bias_at(pc.row_base + r);
  if (pc.silu != 0u) y = y / (1.0 + exp(-y));
  return pc.accumulate != 0u ? Y[m * pc.ldy + pc.row_base + r] + y : y;
}

// acc += the K loop over the layouts LX (X) and LW (W), K steps s_begin .. s_end - 1, k a visible
// multiple of BK. (H200: a loop of k from a computed column, k_begin .. k_end by BK, ran 3-4x
// slower, every tile; this one 8-16% faster a GEMM than k = 0 .. cols by BK, before split K.)
#define K_LOOP(LX, LW)                                                                    \
  for (uint s = s_begin; s < s_end; ++s) {                                               \
    const uint k = s * BK;                                                               \
    MAT_A a;                                                                             \
    MAT_B b;                                                                             \
    coopMatLoadTensorNV(a, X16, 0, sliceTensorLayoutNV(LX, m0, BM, k, BK));              \
    coopMatLoadTensorNV(b, W16, 0, sliceTensorLayoutNV(LW, r0, BN, k, BK), transposed);  \
    acc = coopMatMulAdd(a, b, acc);                                                      \
  }

void main() {
  const uint m0 = gl_WorkGroupID.y * BM, r0 = gl_WorkGroupID.x * BN;
  const uint splits = gl_NumWorkGroups.z, z = gl_WorkGroupID.z;
  const uint steps = (pc.cols + BK - 1u) / BK, per_split = (steps + splits - 1u) / splits;
  const uint s_begin = z * per_split, s_end = min(steps, s_begin + per_split);
  tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
  ACC acc = ACC(0.0);
  if (m0 + BM <= pc.n && r0 + BN <= pc.rows && pc.cols % BK == 0) {  // inside: no clamping (splits end on K steps)
    // Strides of whole 16-byte words (cols % 32 == 0), said so that the loads can be whole words.
    const uint cols = pc.cols & ~31u;
    tensorLayoutNV<2> lx = createTensorLayoutNV(2);
    lx = setTensorLayoutDimensionNV(lx, pc.n, cols);
    lx = setTensorLayoutStrideNV(lx, cols, 1);
    tensorLayoutNV<2> lw = createTensorLayoutNV(2);
    lw = setTensorLayoutDimensionNV(lw, pc.rows, cols);
    lw = setTensorLayoutStrideNV(lw, cols, 1);
    K_LOOP(lx, lw)
  } else {
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lx =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    lx = setTensorLayoutDimensionNV(lx, pc.n, pc.cols);
    lx = setTensorLayoutStrideNV(lx, pc.cols, 1);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lw =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    lw = setTensorLayoutDimensionNV(lw, pc.rows, pc.cols);
    lw = setTensorLayoutStrideNV(lw, pc.cols, 1);
    K_LOOP(lx, lw)
  }
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> ly =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  if (splits > 1u) {  // raw sums into split z's rows of the scratch; rows past them dropped
    ly = setTensorLayoutDimensionNV(ly, (z + 1u) * pc.n, pc.rows);
    ly = setTensorLayoutStrideNV(ly, pc.rows, 1);
    coopMatStoreTensorNV(acc, Y, 0, sliceTensorLayoutNV(ly, z * pc.n + m0, BM, r0, BN));
    return;
  }
  coopMatPerElementNV(acc, acc, epilogue, m0, r0);
  ly = setTensorLayoutDimensionNV(ly, pc.n, pc.row_base + pc.rows);
  ly = setTensorLayoutStrideNV(ly, pc.ldy, 1);
  coopMatStoreTensorNV(acc, Y, 0, sliceTensorLayoutNV(ly, m0, BM, pc.row_base + r0, BN));
}
