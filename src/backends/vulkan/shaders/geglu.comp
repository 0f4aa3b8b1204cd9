// y[r, i] = x[r, i] * gelu(x[r, d + i]) for rows of x = [..., 2d] (diffusers' GEGLU: value, then gate).
#version 450
#include "common.glsl"
#include "activation.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Params { Ts x; Ts y; uint n, d; } p;
void main() {
    FOR_EACH_ELEMENT(i, p.n) {
        const uint r = i / p.d, c = i - r * p.d;
        st(p.y, i, ld(p.x, 2u * p.d * r + c) * activation(ld(p.x, 2u * p.d * r + p.d + c), 1u));
    }
}
