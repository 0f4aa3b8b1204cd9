// y = (x - mean) / std * gamma[c] + beta[c] over an [N, C, spatial] tensor, with the statistics of
// group_norm_stats.comp. With to_nlc set, y is [N, spatial, C] (group_norm_to_nlc: a transformer's tokens,
// with nchw_to_nlc's bits and no [N, C, spatial] copy).
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Params { Ts x; Ts y; F32s stats; Ts gamma; Ts beta; uint n, c, spatial, groups, to_nlc; } p;
void main() {
    FOR_EACH_ELEMENT(i, p.n) {
        const uint plane = i / p.spatial, ch = plane % p.c, batch = plane / p.c;
        const uint s = (batch * p.groups + ch / (p.c / p.groups)) * 2u;
        const uint at = p.to_nlc != 0u ? (batch * p.spatial + (i - plane * p.spatial)) * p.c + ch : i;
        st(p.y, at, (ld(p.x, i) - p.stats.v[s]) * p.stats.v[s + 1u] * ld(p.gamma, ch) + ld(p.beta, ch));
    }
}
