// Decode GEMV for CPU devices, one invocation per weight row (gemv_rows.glsl), with the RMSNorm of
// x fused in front (push constant norm != 0).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "gemv_rows.glsl"
