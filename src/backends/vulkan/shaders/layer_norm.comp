// LayerNorm over the last dim, one workgroup per row; statistics in two float32 passes.
#version 450
#include "common.glsl"
#include "reduce.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Params { Ts x; Ts y; Ts gamma; Ts beta; uint rows, d; float eps; } p;
void main() {
    const uint row = workgroup_row();
    if (row >= p.rows) return;  // uniform per workgroup, so the barriers below stay uniform
    const uint base = row * p.d;
    float s = 0.0;
    for (uint i = gl_LocalInvocationIndex; i < p.d; i += 256u) s += ld(p.x, base + i);
    const float mean = workgroup_sum(s) / float(p.d);
    float s2 = 0.0;
    for (uint i = gl_LocalInvocationIndex; i < p.d; i += 256u) {
        const float v = ld(p.x, base + i) - mean;
        s2 += v * v;
    }
    const float rstd = 1.0 / sqrt(workgroup_sum(s2) / float(p.d) + p.eps);
    for (uint i = gl_LocalInvocationIndex; i < p.d; i += 256u)
        st(p.y, base + i, (ld(p.x, base + i) - mean) * rstd * ld(p.gamma, i) + ld(p.beta, i));
}
