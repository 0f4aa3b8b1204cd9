// Softmax of each row of length len after multiplying by scale, one workgroup per row; x and y may be the
// same tensor. For attention's scores with causal set, row r is query q0 + r % queries and the keys after it
// are masked out (weight 0).
#version 450
#include "common.glsl"
#include "reduce.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Params { Ts x; Ts y; uint rows, len; float scale; uint causal, queries, q0; } p;
void main() {
    const uint row = workgroup_row();
    if (row >= p.rows) return;  // uniform per workgroup
    const uint base = row * p.len;
    const uint keys = p.causal != 0u ? min(p.len, p.q0 + row % p.queries + 1u) : p.len;
    float m = -3.402823466e38;
    for (uint i = gl_LocalInvocationIndex; i < keys; i += 256u) m = max(m, p.scale * ld(p.x, base + i));
    m = workgroup_max(m);
    float s = 0.0;
    for (uint i = gl_LocalInvocationIndex; i < keys; i += 256u) s += exp(p.scale * ld(p.x, base + i) - m);
    const float inv = 1.0 / workgroup_sum(s);
    for (uint i = gl_LocalInvocationIndex; i < p.len; i += 256u)
        st(p.y, base + i, i < keys ? exp(p.scale * ld(p.x, base + i) - m) * inv : 0.0);
}
