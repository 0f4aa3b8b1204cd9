// Moves values between layouts; each output element finds its source.
//   op 0: nearest 2x upsample of [planes, h, w]
//   op 1: concatenation along channels of a [N, c, hw] and b [N, c2, hw]
//   op 2: [N, c, hw] -> [N, hw, c]       op 3: [N, hw, c] -> [N, c, hw]
//   op 4: [rows, c2] -> [rows, c], columns h .. h + c - 1
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Params { Ts a; Ts b; Ts y; uint n, op, c, c2, h, w; } p;
void main() {
    FOR_EACH_ELEMENT(i, p.n) {
        float v;
        if (p.op == 0u) {
            const uint ow = 2u * p.w, plane = i / (4u * p.h * p.w), r = i - plane * 4u * p.h * p.w;
            v = ld(p.a, (plane * p.h + (r / ow) / 2u) * p.w + (r % ow) / 2u);
        } else if (p.op == 1u) {
            const uint hw = p.h * p.w, per = (p.c + p.c2) * hw, batch = i / per, r = i - batch * per;
            const uint ch = r / hw, s = r - ch * hw;
            v = ch < p.c ? ld(p.a, (batch * p.c + ch) * hw + s) : ld(p.b, (batch * p.c2 + ch - p.c) * hw + s);
        } else if (p.op == 2u) {
            const uint hw = p.h * p.w, batch = i / (hw * p.c), r = i - batch * hw * p.c, l = r / p.c, ch = r % p.c;
            v = ld(p.a, (batch * p.c + ch) * hw + l);
        } else if (p.op == 3u) {
            const uint hw = p.h * p.w, batch = i / (hw * p.c), r = i - batch * hw * p.c, ch = r / hw, l = r % hw;
            v = ld(p.a, (batch * hw + l) * p.c + ch);
        } else {
            const uint row = i / p.c, col = i - row * p.c;
            v = ld(p.a, row * p.c2 + p.h + col);
        }
        st(p.y, i, v);
    }
}
