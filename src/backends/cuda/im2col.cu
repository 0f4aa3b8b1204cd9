// im2col for one image and a range of output pixels, as the CPU's ops/im2col.cpp: row (ch * k + i) * k + j
// of col holds tap (i, j) of channel ch for every output pixel of the range (w [O, C, k, k] flattened
// to [O, C * k * k] times col is the convolution). Planes are channels: a thread takes an output pixel
// and writes its k * k taps of the channel, so a warp's stores are contiguous in each row.
// With a norm, in-image taps become silu((v - mean) * rstd * gamma + beta) in float, rounded once;
// padding taps stay 0 (the convolution pads the normalised image with zeros).
#include "backends/cuda/activation_math.cuh"
#include "backends/cuda/kernel_common.cuh"
#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

struct Geometry {
    int64_t c, h, w;
    int k, stride, padding;
    int64_t ow, first, count;
};

template <class T, bool kNorm>
__global__ void im2col_kernel(const T* x, T* col, Geometry g, const float* stats, const T* gamma, const T* beta,
                              int64_t channels_per_group) {
    const T zero = detail::from_float<T>(0.0f);
    for (int64_t ch = detail::plane_first(); ch < g.c; ch += detail::plane_step()) {
        float mean = 0.0f, rstd = 0.0f, scale = 0.0f, shift = 0.0f;
        if (kNorm) {
            const int64_t grp = ch / channels_per_group;
            mean = stats[2 * grp];
            rstd = stats[2 * grp + 1];
            scale = detail::to_float(gamma[ch]);
            shift = detail::to_float(beta[ch]);
        }
        const T* plane = x + ch * g.h * g.w;
        T* rows = col + ch * g.k * g.k * g.count;
        for (int64_t p = detail::grid_first(); p < g.count; p += detail::grid_step()) {
            const int64_t q = g.first + p, oy = q / g.ow, ox = q - oy * g.ow;
            const int64_t y0 = oy * g.stride - g.padding, x0 = ox * g.stride - g.padding;
            for (int i = 0; i < g.k; ++i) {
                const int64_t iy = y0 + i;
                for (int j = 0; j < g.k; ++j) {
                    const int64_t ix = x0 + j;
                    T v = zero;
                    if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) {
                        if (kNorm)
                            v = detail::from_float<T>(
                                detail::silu((detail::to_float(plane[iy * g.w + ix]) - mean) * rstd * scale + shift));
                        else
                            v = plane[iy * g.w + ix];
                    }
                    rows[(int64_t(i) * g.k + j) * g.count + p] = v;
                }
            }
        }
    }
}

}  // namespace

void im2col(const void* x, void* col, DType type, int64_t c, int64_t h, int64_t w, int k, int stride, int padding,
            int64_t oh, int64_t ow, int64_t first, int64_t count, const Im2colNorm* norm, cudaStream_t stream) {
    const char* op = "im2col";
    detail::dispatch(op, type, [](auto) {});
    require(k >= 1 && stride >= 1 && padding >= 0, ErrorKind::InvalidArgument,
            "kiln::cuda::im2col: kernel " + std::to_string(k) + ", stride " + std::to_string(stride) + ", padding " +
                std::to_string(padding) + ": need k >= 1, stride >= 1, padding >= 0");
    detail::checked_count(op, {c, h, w});
    const int64_t pixels = detail::checked_count(op, {oh, ow});
    require(first >= 0 && count >= 0 && first <= pixels - count, ErrorKind::InvalidArgument,
            "kiln::cuda::im2col: pixels [" + std::to_string(first) + ", +" + std::to_string(count) +
                ") are not within the " + std::to_string(oh) + " x " + std::to_string(ow) + " output");
    if (norm) {
        require(norm->groups >= 1 && c % norm->groups == 0, ErrorKind::InvalidArgument,
                "kiln::cuda::im2col: " + std::to_string(norm->groups) + " groups must divide the " + std::to_string(c) +
                    " channels");
        require(norm->silu, ErrorKind::InvalidArgument, "kiln::cuda::im2col: applies GroupNorm+SiLU only (silu unset)");
    }
    if (detail::checked_count(op, {c, k, k, count}) == 0) return;
    detail::check_pointer(op, "x", x);
    detail::check_pointer(op, "col", col);
    if (norm) {
        detail::check_pointer(op, "norm->stats", norm->stats);
        detail::check_pointer(op, "norm->gamma", norm->gamma);
        detail::check_pointer(op, "norm->beta", norm->beta);
    }
    const Geometry g{c, h, w, k, stride, padding, ow, first, count};
    const detail::PlaneGrid grid = detail::plane_grid(c, count);
    detail::dispatch(op, type, [&](auto t) {
        using T = typename decltype(t)::type;
        if (norm)
            im2col_kernel<T, true><<<grid.blocks, grid.threads, 0, stream>>>(
                static_cast<const T*>(x), static_cast<T*>(col), g, norm->stats, static_cast<const T*>(norm->gamma),
                static_cast<const T*>(norm->beta), c / norm->groups);
        else
            im2col_kernel<T, false><<<grid.blocks, grid.threads, 0, stream>>>(
                static_cast<const T*>(x), static_cast<T*>(col), g, nullptr, nullptr, nullptr, 1);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
