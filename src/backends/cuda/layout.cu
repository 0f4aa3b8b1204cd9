// Data movement: nearest 2x upsampling and channel concatenation, whose elements are moved as raw 16- or
// 32-bit words (dispatch_bits), so every result is a bit-exact copy; and the NCHW <-> NLC transposes, which
// are conv_layout.cu's (values through float and back: exact for every number).
#include "backends/cuda/kernel_common.cuh"
#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

// Planes are output rows (plane * 2h + oy); each reads input row oy / 2 of its plane.
template <class W>
__global__ void upsample_nearest2x_kernel(const W* x, W* out, int64_t planes, int64_t h, int64_t w) {
    const int64_t out_rows = planes * 2 * h;
    for (int64_t r = detail::plane_first(); r < out_rows; r += detail::plane_step()) {
        const int64_t plane = r / (2 * h), iy = r % (2 * h) / 2;
        const W* src = x + (plane * h + iy) * w;
        W* dst = out + r * 2 * w;
        for (int64_t ox = detail::grid_first(); ox < 2 * w; ox += detail::grid_step()) dst[ox] = src[ox / 2];
    }
}

// Planes are images: a's block of ca * inner values, then b's.
template <class W>
__global__ void concat_channels_kernel(const W* a, const W* b, W* out, int64_t n, int64_t a_block, int64_t b_block) {
    detail::dependent_launch_prologue();
    for (int64_t img = detail::plane_first(); img < n; img += detail::plane_step()) {
        const W* pa = a + img * a_block;
        const W* pb = b + img * b_block;
        W* dst = out + img * (a_block + b_block);
        for (int64_t k = detail::grid_first(); k < a_block + b_block; k += detail::grid_step())
            dst[k] = k < a_block ? pa[k] : pb[k - a_block];
    }
}

}  // namespace

void upsample_nearest2x(const void* x, void* out, DType type, int64_t planes, int64_t h, int64_t w,
                        cudaStream_t stream) {
    const int64_t count = detail::checked_count("upsample_nearest2x", {planes, h, w, 4});
    detail::dispatch_bits("upsample_nearest2x", type, [](auto) {});
    if (count == 0) return;
    detail::check_pointer("upsample_nearest2x", "x", x);
    detail::check_pointer("upsample_nearest2x", "out", out);
    const detail::PlaneGrid grid = detail::plane_grid(planes * 2 * h, 2 * w);
    detail::dispatch_bits("upsample_nearest2x", type, [&](auto t) {
        using W = typename decltype(t)::type;
        upsample_nearest2x_kernel<W><<<grid.blocks, grid.threads, 0, stream>>>(static_cast<const W*>(x),
                                                                               static_cast<W*>(out), planes, h, w);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

void concat_channels(const void* a, const void* b, void* out, DType type, int64_t n, int64_t ca, int64_t cb,
                     int64_t inner, cudaStream_t stream) {
    const int64_t count_a = detail::checked_count("concat_channels", {n, ca, inner});
    const int64_t count_b = detail::checked_count("concat_channels", {n, cb, inner});
    require(count_a <= INT64_MAX - count_b, ErrorKind::InvalidArgument,
            "kiln::cuda::concat_channels: the output overflows 64-bit element counts");
    const int64_t count = count_a + count_b;
    detail::dispatch_bits("concat_channels", type, [](auto) {});
    if (count == 0) return;
    // One of a and b may be empty (ca or cb 0) and then null.
    if (ca > 0) detail::check_pointer("concat_channels", "a", a);
    if (cb > 0) detail::check_pointer("concat_channels", "b", b);
    detail::check_pointer("concat_channels", "out", out);
    // 16 bytes per copy where both blocks are whole 16-byte runs and every pointer is aligned to them (2- or
    // 4-byte copies ran at half the memory's speed in the UNet's skip concatenations).
    const int64_t esize = int64_t(dtype_size(type)), a_bytes = ca * inner * esize, b_bytes = cb * inner * esize;
    if (a_bytes % 16 == 0 && b_bytes % 16 == 0 && detail::aligned16(a) && detail::aligned16(b) &&
        detail::aligned16(out)) {
        const detail::PlaneGrid grid = detail::plane_grid(n, (a_bytes + b_bytes) / 16);
        detail::launch_dependent(concat_channels_kernel<uint4>, grid.blocks, grid.threads, 0, stream,
                                 static_cast<const uint4*>(a), static_cast<const uint4*>(b), static_cast<uint4*>(out), n,
                                 a_bytes / 16, b_bytes / 16);
        KILN_CUDA_CHECK(cudaGetLastError());
        return;
    }
    const detail::PlaneGrid grid = detail::plane_grid(n, count / n);
    detail::dispatch_bits("concat_channels", type, [&](auto t) {
        using W = typename decltype(t)::type;
        detail::launch_dependent(concat_channels_kernel<W>, grid.blocks, grid.threads, 0, stream,
                                 static_cast<const W*>(a), static_cast<const W*>(b), static_cast<W*>(out), n,
                                 ca * inner, cb * inner);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

// NLC is NHWC with the pixels in one axis: the channels-last convolution's transposes (conv_layout.cu).
void nchw_to_nlc(const void* x, void* out, DType type, int64_t n, int64_t c, int64_t hw, cudaStream_t stream) {
    to_nhwc(x, out, type, n, c, hw, nullptr, stream);
}

void nlc_to_nchw(const void* x, void* out, DType type, int64_t n, int64_t hw, int64_t c, cudaStream_t stream) {
    from_nhwc(x, nullptr, out, type, n, hw, c, stream);
}

}  // namespace kiln::cuda
