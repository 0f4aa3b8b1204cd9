// A convolution's input written out as the columns of its product (im2col), in the tensors' type, for conv2d.comp's
// tiled builds (flags & 512): one pass pays the index arithmetic, the padding's bounds and the fused GroupNorm +
// SiLU once a value, where the product's tiles would pay them once for every tile of output channels that reads
// it. cols is k-major, cin x ks x ks rows of `count` values: the pixels first .. first + count - 1 of the whole
// batch counted as one row of N x oh x ow (a chunk; VulkanDeviceOps::conv bounds its size). Each thread writes 8
// pixels of one output row as two 4-value stores: ow and oh x ow are multiples of 8.
#version 450
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
layout(push_constant) uniform Params {
    Ts x;
    Ts cols;
    F32s stats;  // [N, groups, 2], read when flags & 2
    Ts gamma;
    Ts beta;
    uint cin, h, wd, oh, ow, ks, stride, pad, groups;
    uint flags;  // 2: GroupNorm + SiLU, 32: x upsampled 2x (conv2d.comp's)
    uint first, count;
} p;
uint batch;  // the image read (conv_input.glsl)
#include "conv_input.glsl"

void main() {
    const uint groups_per_row = p.count / 8u, pixels = p.oh * p.ow;
    FOR_EACH_ELEMENT(i, p.cin * p.ks * p.ks * groups_per_row) {
        const uint k = quotient(i, groups_per_row), at = p.first + 8u * (i - k * groups_per_row);
        batch = quotient(at, pixels);
        const RowRead r = row_read(k, at - batch * pixels);
        const vec4 norm = norm_terms(r);
        vec4 lo, hi;
        [[unroll]] for (uint j = 0u; j < 4u; ++j) lo[j] = row_value(r, norm, j), hi[j] = row_value(r, norm, 4u + j);
#ifdef T_F16  // float16 storage alone: no float16 arithmetic (shaderFloat16) needed
        F16x4s(p.cols).v[2u * i] = f16vec4(lo);
        F16x4s(p.cols).v[2u * i + 1u] = f16vec4(hi);
#else
        F32x4s(p.cols).v[2u * i] = lo;
        F32x4s(p.cols).v[2u * i + 1u] = hi;
#endif
    }
}
