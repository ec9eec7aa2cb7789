// SwiGLU over rows of [gate | up]: y (n, F) = SiLU(gate) · up, x (n, 2F); SiLU(g) = g / (1 + e^-g).
#version 450
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { uint n, width; } pc;  // width: F
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };

void main() {
  for (uint e = gl_GlobalInvocationID.x; e < pc.n * pc.width; e += gl_NumWorkGroups.x * gl_WorkGroupSize.x) {
    const uint r = e / pc.width, c = e % pc.width, at = r * 2u * pc.width + c;
    const float g = x[at];
    y[e] = g / (1.0 + exp(-g)) * x[at + pc.width];
  }
}
