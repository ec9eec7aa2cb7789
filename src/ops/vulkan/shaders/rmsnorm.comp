// RMSNorm: y (n, D) = x * rstd * w, rstd = 1/sqrt(mean(x²) + eps); one workgroup per row, the sum
// of squares reduced over subgroups then through shared memory. w in f32 or f16 (raw words).
// D % 4 == 0: x, y and w read and written as vec4s (four values a load: a quarter of the loads,
// each its own round trip where a row has few per invocation, and of llvmpipe's per-lane loops).
#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { uint dim, f16; float eps; } pc;
layout(std430, binding = 0) readonly buffer In { float x[]; };
layout(std430, binding = 0) readonly buffer In4 { vec4 x4[]; };
layout(std430, binding = 1) readonly buffer Wt { uint w[]; };
layout(std430, binding = 1) readonly buffer Wt2 { uvec2 w2[]; };  // f16: four values
layout(std430, binding = 1) readonly buffer Wt4 { uvec4 w4[]; };  // f32: four values
layout(std430, binding = 2) writeonly buffer Out { float y[]; };
layout(std430, binding = 2) writeonly buffer Out4 { vec4 y4[]; };
shared float partial[256];

// The workgroup's sum of its invocations' ss.
float workgroup_sum(float ss) {
  ss = subgroupAdd(ss);
  if (subgroupElect()) partial[gl_SubgroupID] = ss;
  barrier();
  float total = 0.0;
  for (uint s = 0u; s < gl_NumSubgroups; ++s) total += partial[s];
  return total;
}

void main() {
  const uint row = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x, step = gl_WorkGroupSize.x;
  float ss = 0.0;
  if (pc.dim % 4u == 0u) {
    const uint base = row * (pc.dim / 4u), n4 = pc.dim / 4u;
    for (uint c = tid; c < n4; c += step) {
      const vec4 v = x4[base + c];
      ss += dot(v, v);
    }
    const float r = 1.0 / sqrt(workgroup_sum(ss) / float(pc.dim) + pc.eps);
    for (uint c = tid; c < n4; c += step) {
      const vec4 wc = pc.f16 != 0u ? vec4(unpackHalf2x16(w2[c].x), unpackHalf2x16(w2[c].y)) : uintBitsToFloat(w4[c]);
      y4[base + c] = x4[base + c] * r * wc;
    }
    return;
  }
  const uint base = row * pc.dim;
  for (uint c = tid; c < pc.dim; c += step) ss += x[base + c] * x[base + c];
  const float r = 1.0 / sqrt(workgroup_sum(ss) / float(pc.dim) + pc.eps);
  for (uint c = tid; c < pc.dim; c += step) {
    const float wc = pc.f16 != 0u ? unpackHalf2x16(w[c >> 1])[c & 1u] : uintBitsToFloat(w[c]);
    y[base + c] = x[base + c] * r * wc;
  }
}
