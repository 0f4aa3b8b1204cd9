// Mean and 1/sqrt(var + eps) of each (batch, group) of an [N, C, ...] tensor into stats[N, groups, 2]; a
// group's values are contiguous. Two passes (mean, then the centred squares) in float32, so no cancellation
// between E[x^2] and E[x]^2. Small groups take one workgroup each (phase 0). Large ones (SD has 32 groups
// per image: 32 to 64 workgroups for a whole GPU) are cut into chunks of `chunk` values: phase 1 sums each
// chunk into ws; phase 2 has every workgroup add its group's chunk sums in order (the mean, the same float
// in each, by its first thread) and sums its chunk's centred squares into ws2; phase 3, one thread per group, adds those in order.
#version 450
#include "common.glsl"
#include "reduce.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Params {
    Ts x;
    F32s stats;
    F32s ws;   // [groups, chunks] chunk sums, then [groups, chunks] centred squares
    uint count;  // values per group
    float eps;
    uint chunks, chunk, phase, groups;
} p;

shared float chunk_mean;

float group_mean(uint g) {
    float s = 0.0;
    for (uint c = 0u; c < p.chunks; ++c) s += p.ws.v[g * p.chunks + c];
    return s / float(p.count);
}

void main() {
    if (p.phase == 0u) {
        const uint g = workgroup_row(), base = g * p.count;
        if (g >= p.groups) return;  // the 2D grid's last row may run past the groups (uniform per workgroup)
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
    } else if (p.phase == 3u) {
        const uint g = gl_GlobalInvocationID.x;
        if (g >= p.groups) return;
        float s2 = 0.0;
        for (uint c = 0u; c < p.chunks; ++c) s2 += p.ws.v[(p.groups + g) * p.chunks + c];
        p.stats.v[2u * g] = group_mean(g);
        p.stats.v[2u * g + 1u] = 1.0 / sqrt(s2 / float(p.count) + p.eps);
    } else {
        const uint b = workgroup_row(), g = b / p.chunks, begin = (b % p.chunks) * p.chunk;
        if (g >= p.groups) return;  // as in phase 0
        const uint end = min(p.count, begin + p.chunk);
        // The mean once per workgroup (the same float phase 3 computes), not once per thread.
        if (p.phase == 2u && gl_LocalInvocationIndex == 0u) chunk_mean = group_mean(g);
        barrier();
        const float mean = p.phase == 2u ? chunk_mean : 0.0;
        float s = 0.0;
        for (uint i = begin + gl_LocalInvocationIndex; i < end; i += 256u) {
            const float v = ld(p.x, g * p.count + i);
            if (p.phase == 1u) {
                s += v;
            } else {
                const float d = v - mean;
                s += d * d;
            }
        }
        s = workgroup_sum(s);
        if (gl_LocalInvocationIndex == 0u) p.ws.v[(p.phase == 1u ? g : p.groups + g) * p.chunks + b % p.chunks] = s;
    }
}
