// Decode GEMV for CPU devices, one invocation per weight row (gemv_rows.glsl), without a fused
// RMSNorm, four rows per invocation (ROWS4), reading x and the weights' 16-byte words through
// uniform texel buffers: llvmpipe serves texel fetches with its sampler's gathers, its
// storage-buffer loads lane by lane.
#version 450
#extension GL_GOOGLE_include_directive : require
#define NO_NORM
#define TEXEL_LOADS
#define ROWS4
#include "gemv_rows.glsl"
