// Decode GEMV for CPU devices (gemv_rows.glsl) without a fused RMSNorm: eight rows per invocation
// (GEMV_N; 4 and 16 measured slower on llvmpipe), x, the weights' 16-byte words and the int8 /
// int4 scales read through uniform texel buffers, which llvmpipe serves with its sampler's gathers
// (its storage-buffer loads go lane by lane).
#version 450
#extension GL_GOOGLE_include_directive : require
#define NO_NORM
#define TEXEL_LOADS
#define GEMV_N 8u
#include "gemv_rows.glsl"
