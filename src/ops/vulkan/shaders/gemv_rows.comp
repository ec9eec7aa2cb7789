// Decode GEMV for CPU devices, one invocation per weight row (gemv_rows.glsl), without a fused
// RMSNorm: on llvmpipe the norm's branch costs its loads even when off, so the CPU decode runs
// the norm as its own dispatch and this GEMV after it; gemv_rows_norm fuses it.
#version 450
#extension GL_GOOGLE_include_directive : require
#define NO_NORM
#include "gemv_rows.glsl"
