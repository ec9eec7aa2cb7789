// RMSNorm: y (n, D) = x * rstd * w, rstd = 1/sqrt(mean(x²) + eps); one workgroup per row, the sum
// of squares reduced over subgroups then through shared memory. w in f32 or f16 (raw words).
#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { uint dim, f16; float eps; } pc;
layout(std430, binding = 0) readonly buffer In { float x[]; };
layout(std430, binding = 1) readonly buffer Wt { uint w[]; };
layout(std430, binding = 2) writeonly buffer Out { float y[]; };
shared float partial[256];

void main() {
  const uint row = gl_WorkGroupID.x, base = row * pc.dim;
  float ss = 0.0;
  for (uint c = gl_LocalInvocationID.x; c < pc.dim; c += gl_WorkGroupSize.x) ss += x[base + c] * x[base + c];
  ss = subgroupAdd(ss);
  if (subgroupElect()) partial[gl_SubgroupID] = ss;
  barrier();
  float total = 0.0;
  for (uint s = 0u; s < gl_NumSubgroups; ++s) total += partial[s];
  const float r = 1.0 / sqrt(total / float(pc.dim) + pc.eps);
  for (uint c = gl_LocalInvocationID.x; c < pc.dim; c += gl_WorkGroupSize.x) {
    const float wc = pc.f16 != 0u ? unpackHalf2x16(w[c >> 1])[c & 1u] : uintBitsToFloat(w[c]);
    y[base + c] = x[base + c] * r * wc;
  }
}
