// In place: x = activation(x) (op 0-3, ops::DeviceActivation's order) or x = s * x (op 4).
#version 450
#include "common.glsl"
#include "activation.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Params { Ts x; uint n, op; float s; } p;
void main() {
    FOR_EACH_ELEMENT(i, p.n) {
        const float v = ld(p.x, i);
        st(p.x, i, p.op == 4u ? p.s * v : activation(v, p.op));
    }
}
