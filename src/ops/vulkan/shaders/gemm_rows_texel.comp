// Prefill GEMM for CPU devices: gemv_rows_texel (eight weight rows an invocation, x, the weights'
// words and the scales through uniform texel buffers) over GEMM_T tokens at once, so that each
// weight word is fetched and decoded once for GEMM_T tokens (gemv_rows.glsl). llvmpipe runs
// gemm_tiled's per-element storage-buffer loads lane by lane (vulkan_notes.md).
#version 450
#extension GL_GOOGLE_include_directive : require
#define NO_NORM
#define TEXEL_LOADS
#define GEMV_N 8u
#define GEMM_T 4u
#include "gemv_rows.glsl"
