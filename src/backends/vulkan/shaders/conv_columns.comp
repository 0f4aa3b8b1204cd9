// A convolution's input written out as the columns of its product (im2col), float16, for the matrix-unit build of
// conv2d.comp (flags & 512): one pass pays the index arithmetic, the padding's bounds and the fused GroupNorm +
// SiLU once a value, where the product's tiles would pay them once for every tile of output channels that reads
// it. cols is k-major, cin x ks x ks rows of `count` values: the pixels first .. first + count - 1 of the whole
// batch counted as one row of N x oh x ow (a chunk; VulkanDeviceOps::conv bounds its size). Each thread writes 8
// pixels of one output row as one 16-byte store: ow and oh x ow are multiples of 8.
#version 450
#include "common.glsl"
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
layout(buffer_reference, std430, buffer_reference_align = 16) buffer U128s { uvec4 v[]; };
layout(push_constant) uniform Params {
    Ts x;
    U128s cols;
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
        f16vec2 v[4];
        [[unroll]] for (uint j = 0u; j < 4u; ++j)
            v[j] = f16vec2(row_value(r, norm, 2u * j), row_value(r, norm, 2u * j + 1u));
        p.cols.v[i] = uvec4(packFloat2x16(v[0]), packFloat2x16(v[1]), packFloat2x16(v[2]), packFloat2x16(v[3]));
    }
}
