// Benchmark: device memory read bandwidth through the decode GEMVs' access pattern, without their
// arithmetic (pylon_bench_vulkan --read-patterns). MODE 0: each subgroup reads items of LOADS·S
// consecutive 16-byte words (lane i: words k·S + i, k < LOADS, all issued before any is used),
// the items grid-stride over the grid's subgroups, as decode_layer.comp reads a row; MODE 1:
// each invocation reads words i + k·T (T invocations in all), LOADS at a time,
// read_bandwidth.comp's pattern on a fixed grid. Words past the last whole item (MODE 0) or round
// of LOADS (MODE 1) are not read. The sum is written only when it hits a value it will not hit,
// so the loads cannot be dropped.
#version 450
#extension GL_KHR_shader_subgroup_basic : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint LOADS = 8u;
layout(constant_id = 2) const uint MODE = 0u;
layout(push_constant) uniform Push { uint words; } pc;
layout(std430, binding = 0) readonly buffer In { uvec4 data[]; };
layout(std430, binding = 1) writeonly buffer Out { uint sink[]; };

void main() {
  uvec4 acc = uvec4(0u);
  uvec4 q[LOADS];
  if (MODE == 0u) {
    const uint S = gl_SubgroupSize, item = LOADS * S, T = gl_NumWorkGroups.x * gl_NumSubgroups;
    for (uint it = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID; it < pc.words / item; it += T) {
      for (uint k = 0u; k < LOADS; ++k) q[k] = data[it * item + k * S + gl_SubgroupInvocationID];
      for (uint k = 0u; k < LOADS; ++k) acc += q[k];
    }
  } else {
    const uint T = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i + (LOADS - 1u) * T < pc.words; i += LOADS * T) {
      for (uint k = 0u; k < LOADS; ++k) q[k] = data[i + k * T];
      for (uint k = 0u; k < LOADS; ++k) acc += q[k];
    }
  }
  const uint s = acc.x ^ acc.y ^ acc.z ^ acc.w;
  if (s == 0x9E3779B9u) sink[0] = s;
}
