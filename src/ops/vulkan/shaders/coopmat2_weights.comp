// gemm_coopmat2's int8 / int4 weights as fp16, for prefill: rows first .. first + rows - 1 of a
// weight chunk dequantized (each weight times its scale, as matmul_common.glsl's w_at) into
// Halves (rows, cols), then read by gemm_coopmat2 as f16 weights. Its tensor loads read a
// matrix's element type as stored, and decoding int8 in a decode function a 16-byte block ran no
// faster than gemm_coopmat (bench/vulkan_notes.md, 2026-12-02), so the weights are decoded once a
// GEMM here: an extra pass over the weights that costs less than gemm_coopmat's slower products
// from 16 tokens up (Ops::Coopmat2Dequant).
// A run of 8 columns a step, 4 steps an invocation: run g·1024 + l + 256·j at step j (workgroup
// g, invocation l), so that each step's loads and stores are contiguous across the subgroup, with
// 4 loads in flight. H200, 8192 x 2048, int8 / int4: 16.3 / 17.1-17.3 µs (2.6 TB/s); one run an
// invocation 15.5-16.3 / 17.9-18.8; 32 columns an invocation, its 16-byte stores 64 bytes apart,
// 31.5-32.0 (bench/vulkan_notes.md). Needs cols % 32 == 0 (rows of whole 16-byte words) and, for
// int4, group % 8 == 0 (a run of 8 columns under one scale).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  uint rows;       // rows dequantized by this dispatch
  uint cols;
  uint first;      // their first row in the chunk
  uint row_base;   // the chunk's first row in the matrix (the scales' row)
  uint wtype;      // 2 int8 (f32 row scales), 3 int4 (group scales)
  uint group;      // int4 columns a scale
  uint scale_f16;  // int4 scales stored as f16
} pc;
layout(std430, binding = 0) readonly buffer WBuf { uint W[]; };  // the chunk's words
layout(std430, binding = 1) readonly buffer SBuf { uint S[]; };  // the matrix's scales
layout(std430, binding = 2) writeonly buffer Halves { uvec4 halves[]; };

#include "words.glsl"

float scale_at(uint i) {
  if (pc.wtype == 3u && pc.scale_f16 != 0u) return unpackHalf2x16(S[i >> 1])[i & 1u];
  return uintBitsToFloat(S[i]);
}

const uint STEPS = 4u;

// Run i's 8 columns as fp16 (halves[i]), from its words w0 (int8: and w1).
void store_run(uint i, uint w0, uint w1) {
  const uint runs = pc.cols / 8u;  // a row's
  const uint r = pc.first + i / runs, c = i % runs * 8u;  // r: the row in the chunk
  vec4 a, b;
  if (pc.wtype == 2u) {
    const float s = scale_at(pc.row_base + r);
    a = i8x4(w0) * s, b = i8x4(w1) * s;
  } else {
    const float s = scale_at((pc.row_base + r) * ((pc.cols + pc.group - 1u) / pc.group) + c / pc.group);
    a = i4lo(w0) * s, b = i4hi(w0) * s;
  }
  halves[i] = uvec4(packHalf2x16(a.xy), packHalf2x16(a.zw), packHalf2x16(b.xy), packHalf2x16(b.zw));
}

void main() {
  const uint g = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  const uint first = g * STEPS * 256u + gl_LocalInvocationID.x, count = pc.rows * (pc.cols / 8u);
  const uint words = pc.wtype == 2u ? 2u : 1u;  // a run's
  const uint base = pc.first * (pc.cols / 8u) * words;  // the piece's first word
  uint w0[STEPS], w1[STEPS];
  [[unroll]] for (uint j = 0u; j < STEPS; ++j) {  // all loads first
    const uint i = first + 256u * j;
    w0[j] = i < count ? W[base + words * i] : 0u;
    w1[j] = i < count && words == 2u ? W[base + 2u * i + 1u] : 0u;
  }
  [[unroll]] for (uint j = 0u; j < STEPS; ++j)
    if (first + 256u * j < count) store_run(first + 256u * j, w0[j], w1[j]);
}
