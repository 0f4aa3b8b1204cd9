// Sums and sums of squares of runs of values (ops::DeviceOps::add_channel_sums: the GroupNorm statistics the tiled
// VAE decode gathers band by band, so that a band's values need not come to the host for them). Run r is the
// `count` values from offset + r * stride; each is cut into chunks of `chunk` values, one workgroup a chunk,
// which writes its chunk's sum and sum of squares in float32 to ws[2 (r chunks + k)] and the next: the host adds
// the chunks in double. (float64 is not on every Vulkan device: Intel's Arc has none.)
#version 450
#include "common.glsl"
#include "reduce.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Params {
    Ts x;
    F32s ws;
    uint offset, stride, count, chunk, chunks, runs;
} p;

void main() {
    const uint b = workgroup_row(), r = b / p.chunks, k = b % p.chunks;
    if (r >= p.runs) return;  // the 2D grid's last row may run past the chunks (uniform per workgroup)
    const uint base = p.offset + r * p.stride, end = min(p.count, (k + 1u) * p.chunk);
    float s = 0.0, q = 0.0;
    for (uint i = k * p.chunk + gl_LocalInvocationIndex; i < end; i += 256u) {
        const float v = ld(p.x, base + i);
        s += v;
        q += v * v;
    }
    s = workgroup_sum(s);
    q = workgroup_sum(q);
    if (gl_LocalInvocationIndex == 0u) {
        p.ws.v[2u * b] = s;
        p.ws.v[2u * b + 1u] = q;
    }
}
