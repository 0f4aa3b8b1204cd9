// In place: a[i] += b[i / inner]. inner = 1 is add_; inner = H*W with b = [N, C] is add_channel_bias_.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Params { Ts a; Ts b; uint n, inner; } p;
void main() {
    FOR_EACH_ELEMENT(i, p.n) st(p.a, i, ld(p.a, i) + ld(p.b, i / p.inner));
}
