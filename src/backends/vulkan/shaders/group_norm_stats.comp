// Mean and 1/sqrt(var + eps) of each (batch, group) of an [N, C, ...] tensor into stats[N, groups, 2]:
// one workgroup per (batch, group), whose values are contiguous. Two passes (mean, then the centred
// squares) in float32, so no cancellation between E[x^2] and E[x]^2.
#version 450
#include "common.glsl"
#include "reduce.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Params { Ts x; F32s stats; uint count; float eps; } p;
void main() {
    const uint g = workgroup_row(), base = g * p.count;
    float s = 0.0;
    for (uint i = gl_LocalInvocationIndex; i < p.count; i += 256u) s += ld(p.x, base + i);
    const float mean = workgroup_sum(s) / float(p.count);
    float s2 = 0.0;
    for (uint i = gl_LocalInvocationIndex; i < p.count; i += 256u) {
        const float d = ld(p.x, base + i) - mean;
        s2 += d * d;
    }
    const float var = workgroup_sum(s2) / float(p.count);
    if (gl_LocalInvocationIndex == 0u) {
        p.stats.v[2u * g] = mean;
        p.stats.v[2u * g + 1u] = 1.0 / sqrt(var + p.eps);
    }
}
