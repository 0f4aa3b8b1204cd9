// In place: a[i] += b[i / inner]. inner = 1 is add_; inner = H*W with b = [N, C] is add_channel_bias_. With
// nlc_c = C (not 0), b is [N, inner, C] tokens read at a's pixel and channel: add_nlc_ (no NCHW copy of them).
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Params { Ts a; Ts b; uint n, inner, nlc_c; } p;
void main() {
    FOR_EACH_ELEMENT(i, p.n) {
        const uint plane = i / p.inner;
        const uint at = p.nlc_c != 0u ? ((plane / p.nlc_c) * p.inner + (i - plane * p.inner)) * p.nlc_c + plane % p.nlc_c
                                      : plane;
        st(p.a, i, ld(p.a, i) + ld(p.b, at));
    }
}
