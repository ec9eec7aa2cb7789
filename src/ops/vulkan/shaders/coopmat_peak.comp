// Benchmark: the cooperative-matrix ceiling, fp16 x fp16 16x16x16 at subgroup scope (the prefill
// GEMM's shape), with no memory traffic: each subgroup runs pc.iters rounds of CHAINS independent
// coopMatMulAdd chains on operands held in registers (loops unrolled, so that no fragment array
// goes to local memory), then stores its accumulators (so that none of it can be dropped).
// 2·16³·CHAINS·iters FLOPs a subgroup. ACC16 1: fp16 accumulators (else fp32, the GEMM's).
#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint ACC16 = 0u;
layout(push_constant) uniform Push { uint iters; } pc;
layout(std430, binding = 0) buffer Out { float sink[]; };  // (groups · subgroups, CHAINS, 256)
layout(std430, binding = 0) buffer Out16 { float16_t sink16[]; };

const uint CHAINS = 8u;
#define MAT(T, USE) coopmat<T, gl_ScopeSubgroup, 16, 16, USE>

void main() {
  const uint sg = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
  const MAT(float16_t, gl_MatrixUseA) a = MAT(float16_t, gl_MatrixUseA)(float16_t(1.0 / 1024.0));
  const MAT(float16_t, gl_MatrixUseB) b = MAT(float16_t, gl_MatrixUseB)(float16_t(float(sg % 7u) / 4096.0));
  if (ACC16 != 0u) {
    MAT(float16_t, gl_MatrixUseAccumulator) acc[CHAINS];
    [[unroll]] for (uint c = 0u; c < CHAINS; ++c) acc[c] = MAT(float16_t, gl_MatrixUseAccumulator)(float16_t(c));
    for (uint i = 0u; i < pc.iters; ++i)
      [[unroll]] for (uint c = 0u; c < CHAINS; ++c) acc[c] = coopMatMulAdd(a, b, acc[c]);
    [[unroll]] for (uint c = 0u; c < CHAINS; ++c)
      coopMatStore(acc[c], sink16, (sg * CHAINS + c) * 256u, 16u, gl_CooperativeMatrixLayoutRowMajor);
  } else {
    MAT(float, gl_MatrixUseAccumulator) acc[CHAINS];
    [[unroll]] for (uint c = 0u; c < CHAINS; ++c) acc[c] = MAT(float, gl_MatrixUseAccumulator)(float(c));
    for (uint i = 0u; i < pc.iters; ++i)
      [[unroll]] for (uint c = 0u; c < CHAINS; ++c) acc[c] = coopMatMulAdd(a, b, acc[c]);
    [[unroll]] for (uint c = 0u; c < CHAINS; ++c)
      coopMatStore(acc[c], sink, (sg * CHAINS + c) * 256u, 16u, gl_CooperativeMatrixLayoutRowMajor);
  }
}
