// Benchmark: device memory read bandwidth. Sums `words` 16-byte words of a buffer (grid-stride,
// each invocation reading words i, i + T, i + 2T, ... with T invocations in all) and writes only
// when the sum hits a value it will not hit, so that the loads cannot be dropped.
#version 450
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { uint words; } pc;
layout(std430, binding = 0) readonly buffer In { uvec4 data[]; };
layout(std430, binding = 1) writeonly buffer Out { uint sink[]; };

void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  uvec4 acc = uvec4(0u);
  for (uint i = gl_GlobalInvocationID.x; i < pc.words; i += stride) acc += data[i];
  const uint s = acc.x ^ acc.y ^ acc.z ^ acc.w;
  if (s == 0x9E3779B9u) sink[0] = s;
}
