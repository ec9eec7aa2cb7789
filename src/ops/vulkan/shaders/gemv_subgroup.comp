// Decode GEMV (one token): y (ldy) [+]= x (cols) · W(chunk)ᵀ. One subgroup per weight row, each
// lane striding over the row in 16-byte vectors when rows are 16-byte aligned (else element by
// element), then a subgroup reduction: no shared memory, no barriers.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 128) in;
#include "matmul_common.glsl"

float dot4(vec4 a, uint o) { return dot(a, vec4(X[o], X[o + 1u], X[o + 2u], X[o + 3u])); }
float dot_f16(uint w, uint o) { return dot(unpackHalf2x16(w), vec2(X[o], X[o + 1u])); }
float dot_i8(uint w, uint o) {
  const ivec4 q = ivec4(bitfieldExtract(int(w), 0, 8), bitfieldExtract(int(w), 8, 8),
                        bitfieldExtract(int(w), 16, 8), bitfieldExtract(int(w), 24, 8));
  return dot4(vec4(q), o);
}
float dot_i4(uint w, uint o) {
  float s = 0.0;
  for (int k = 0; k < 8; k += 4)
    s += dot(vec4(bitfieldExtract(int(w), 4 * k, 4), bitfieldExtract(int(w), 4 * k + 4, 4),
                  bitfieldExtract(int(w), 4 * k + 8, 4), bitfieldExtract(int(w), 4 * k + 12, 4)),
             vec4(X[o + uint(k)], X[o + uint(k) + 1u], X[o + uint(k) + 2u], X[o + uint(k) + 3u]));
  return s;
}

// Bytes of one row, and whether every row starts 16-byte aligned with whole groups per vector.
uint row_bytes() {
  if (pc.wtype == WT_F32) return pc.cols * 4u;
  if (pc.wtype == WT_F16) return pc.cols * 2u;
  if (pc.wtype == WT_INT8) return pc.cols;
  return int4_row_bytes();
}

float row_dot(uint r) {
  const uint lane = gl_SubgroupInvocationID, step = gl_SubgroupSize, x0 = pc.x_off;
  float acc = 0.0;
  const bool vec = row_bytes() % 16u == 0u && (pc.wtype != WT_INT4 || pc.group % 32u == 0u);
  if (!vec) {
    for (uint c = lane; c < pc.cols; c += step) acc += X[x0 + c] * w_at(r, c);
    return acc;
  }
  const uint per_row = row_bytes() / 16u;
  const uint base = r * per_row;
  if (pc.wtype == WT_F32) {
    for (uint v = lane; v < per_row; v += step) acc += dot4(uintBitsToFloat(W4[base + v]), x0 + v * 4u);
  } else if (pc.wtype == WT_F16) {
    for (uint v = lane; v < per_row; v += step) {
      const uvec4 w = W4[base + v];
      const uint o = x0 + v * 8u;
      acc += dot_f16(w.x, o) + dot_f16(w.y, o + 2u) + dot_f16(w.z, o + 4u) + dot_f16(w.w, o + 6u);
    }
  } else if (pc.wtype == WT_INT8) {
    for (uint v = lane; v < per_row; v += step) {
      const uvec4 w = W4[base + v];
      const uint o = x0 + v * 16u;
      acc += dot_i8(w.x, o) + dot_i8(w.y, o + 4u) + dot_i8(w.z, o + 8u) + dot_i8(w.w, o + 12u);
    }
    acc *= scale_at(pc.row_base + r);
  } else {
    const uint groups = int4_groups(), srow = (pc.row_base + r) * groups;
    for (uint v = lane; v < per_row; v += step) {
      const uvec4 w = W4[base + v];
      const uint c = v * 32u, o = x0 + c;
      const float s = dot_i4(w.x, o) + dot_i4(w.y, o + 8u) + dot_i4(w.z, o + 16u) + dot_i4(w.w, o + 24u);
      acc += s * scale_at(srow + c / pc.group);
    }
  }
  return acc;
}

void main() {
  const uint per_group = gl_NumSubgroups;
  for (uint r = gl_WorkGroupID.x * per_group + gl_SubgroupID; r < pc.rows;
       r += gl_NumWorkGroups.x * per_group) {
    const float sum = subgroupAdd(row_dot(r));
    if (subgroupElect()) store_y(0u, r, sum);
  }
}
