// y = (x - mean) / std * gamma[c] + beta[c] over an [N, C, spatial] tensor, with the statistics of
// group_norm_stats.comp.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Params { Ts x; Ts y; F32s stats; Ts gamma; Ts beta; uint n, c, spatial, groups; } p;
void main() {
    FOR_EACH_ELEMENT(i, p.n) {
        const uint plane = i / p.spatial, ch = plane % p.c, batch = plane / p.c;
        const uint s = (batch * p.groups + ch / (p.c / p.groups)) * 2u;
        st(p.y, i, (ld(p.x, i) - p.stats.v[s]) * p.stats.v[s + 1u] * ld(p.gamma, ch) + ld(p.beta, ch));
    }
}
