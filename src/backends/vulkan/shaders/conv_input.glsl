// A convolution's input read as the columns of its implicit product (im2col without the buffer), shared by
// conv2d.comp and conv_columns.comp. The including shader declares push constants p with x, stats, gamma, beta,
// cin, h, wd, ow, ks, stride, pad, groups and flags (2: GroupNorm + SiLU, 32: x upsampled 2x) as conv2d.comp's, and
// a global uint batch, the image read.
// a / d for the index arithmetic of every operand read, where an integer division by a value known only at
// run time costs tens of instructions: a float32 estimate (off by less than 1 for a < 2^22 d) and one
// correction step, exact for every a and d a convolution here has.
uint quotient(uint a, uint d) {
    uint q = uint(float(a) * (1.0 / float(d)));
    const int r = int(a) - int(q * d);
    if (r < 0) --q;
    else if (r >= int(d)) ++q;
    return q;
}
// B(k, n): input row k's pixel for output pixel n, through the im2col index arithmetic (zero in the padding),
// group-normalised and passed through SiLU with flags & 2, read at (iy/2, ix/2) with flags & 32. row_read does the
// arithmetic shared by the pixels n, n + 1, ... of one output row, norm_terms loads the channel's GroupNorm terms,
// row_value gives pixel n + i: load_b takes one pixel; where ow is a multiple of 8 (flags & 256) the tiles take
// 4 or 8 at once (load_b4, load_b8) and pay the arithmetic once for them.
struct RowRead {
    uint row;     // x's index of the input row's first value
    bool inside;  // false where the input row is padding
    uint ox, kx, ci;
};
RowRead row_read(uint k, uint n) {
    const uint taps = p.ks * p.ks, ci = quotient(k, taps), tap = k - ci * taps, ky = quotient(tap, p.ks),
               kx = tap - ky * p.ks;
    const uint oy = quotient(n, p.ow), ox = n - oy * p.ow;
    const int iy = int(oy * p.stride + ky) - int(p.pad);
    const bool inside = iy >= 0 && iy < int(p.h);
    const uint up = (p.flags >> 5) & 1u;  // x's row (iy >> 1) and column of an upsampled input's pixel
    const uint row = inside ? ((batch * p.cin + ci) * (p.h >> up) + (uint(iy) >> up)) * (p.wd >> up) : 0u;
    return RowRead(row, inside, ox, kx, ci);
}
// mean, 1/std, gamma, beta of the read's channel (flags & 2).
vec4 norm_terms(RowRead r) {
    if ((p.flags & 2u) == 0u || !r.inside) return vec4(0.0, 1.0, 1.0, 0.0);
    const uint s = (batch * p.groups + quotient(r.ci, p.cin / p.groups)) * 2u;
    return vec4(p.stats.v[s], p.stats.v[s + 1u], ld(p.gamma, r.ci), ld(p.beta, r.ci));
}
float row_value(RowRead r, vec4 norm, uint i) {
    const int ix = int((r.ox + i) * p.stride + r.kx) - int(p.pad);
    if (!r.inside || ix < 0 || ix >= int(p.wd)) return 0.0;
    float v = ld(p.x, r.row + (uint(ix) >> ((p.flags >> 5) & 1u)));
    if ((p.flags & 2u) != 0u) {
        v = (v - norm.x) * norm.y * norm.z + norm.w;
        v = v / (1.0 + exp(-v));
    }
    return v;
}
