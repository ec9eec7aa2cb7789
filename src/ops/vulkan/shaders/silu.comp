// SiLU in place: x = x / (1 + exp(-x)) over n elements.
#version 450
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { uint n; } pc;
layout(std430, binding = 0) buffer X { float x[]; };

void main() {
  for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += gl_NumWorkGroups.x * gl_WorkGroupSize.x)
    x[i] = x[i] / (1.0 + exp(-x[i]));
}
