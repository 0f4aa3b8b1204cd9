// In-place arithmetic: a += b, x *= s and the channel bias addition. Each is one float operation
// on values widened exactly, so the result is the exact one rounded to float and then to the storage type.
#include "backends/cuda/kernel_common.cuh"
#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

template <class T>
__global__ void add_kernel(T* a, const T* b, int64_t n) {
    detail::dependent_launch_prologue();
    for (int64_t i = detail::grid_first(); i < n; i += detail::grid_step())
        a[i] = detail::from_float<T>(detail::to_float(a[i]) + detail::to_float(b[i]));
}

// The same sums, 4 values per thread and load (a and b aligned to Quads; n counts Quads).
template <class T>
__global__ void add_quads_kernel(detail::Quad<T>* a, const detail::Quad<T>* b, int64_t n) {
    detail::dependent_launch_prologue();
    for (int64_t i = detail::grid_first(); i < n; i += detail::grid_step()) {
        detail::Quad<T> x = a[i];
        const detail::Quad<T> y = b[i];
        for (int k = 0; k < 4; ++k) x.v[k] = detail::from_float<T>(detail::to_float(x.v[k]) + detail::to_float(y.v[k]));
        a[i] = x;
    }
}

template <class T>
__global__ void scale_kernel(T* x, int64_t n, float s) {
    for (int64_t i = detail::grid_first(); i < n; i += detail::grid_step())
        x[i] = detail::from_float<T>(detail::to_float(x[i]) * s);
}

// x [planes, inner] += bias[plane] (a channel bias, [n, c] over inner). A linear layer's bias is added in
// its product's epilogue (gemm.h).
// kN values per access: 16 bytes where the planes allow (2-byte accesses ran at a tenth of the memory's speed).
template <class T, int kN>
__global__ void add_channel_bias_kernel(T* x, const T* bias, int64_t planes, int64_t c, int64_t inner) {
    detail::dependent_launch_prologue();
    using V = detail::Vec<T, kN>;
    for (int64_t p = detail::plane_first(); p < planes; p += detail::plane_step()) {
        V* row = reinterpret_cast<V*>(x + p * inner);
        const float plane_bias = detail::to_float(bias[c ? p % c : p]);
        for (int64_t j = detail::grid_first(); j < inner / kN; j += detail::grid_step()) {
            V v = row[j];
#pragma unroll
            for (int k = 0; k < kN; ++k) v.v[k] = detail::from_float<T>(detail::to_float(v.v[k]) + plane_bias);
            row[j] = v;
        }
    }
}

}  // namespace

void add(void* a, const void* b, DType type, int64_t n, cudaStream_t stream) {
    const int64_t count = detail::checked_count("add", {n});
    detail::dispatch("add", type, [](auto) {});
    if (count == 0) return;
    detail::check_pointer("add", "a", a);
    detail::check_pointer("add", "b", b);
    detail::dispatch("add", type, [&](auto t) {
        using T = typename decltype(t)::type;
        if (count % 4 == 0 && detail::quad_aligned<T>(a) && detail::quad_aligned<T>(b))
            detail::launch_dependent(add_quads_kernel<T>, detail::blocks_for(count / 4), detail::kThreads, 0, stream,
                                     static_cast<detail::Quad<T>*>(a), static_cast<const detail::Quad<T>*>(b), count / 4);
        else
            detail::launch_dependent(add_kernel<T>, detail::blocks_for(count), detail::kThreads, 0, stream,
                                     static_cast<T*>(a), static_cast<const T*>(b), count);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

void scale(void* x, DType type, int64_t n, float s, cudaStream_t stream) {
    const int64_t count = detail::checked_count("scale", {n});
    detail::dispatch("scale", type, [](auto) {});
    if (count == 0) return;
    detail::check_pointer("scale", "x", x);
    detail::dispatch("scale", type, [&](auto t) {
        using T = typename decltype(t)::type;
        scale_kernel<T><<<detail::blocks_for(count), detail::kThreads, 0, stream>>>(static_cast<T*>(x), count, s);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

void add_channel_bias(void* x, const void* bias, DType type, int64_t n, int64_t c, int64_t inner, cudaStream_t stream,
                      bool per_channel) {
    const int64_t count = detail::checked_count("add_channel_bias", {n, c, inner});
    detail::dispatch("add_channel_bias", type, [](auto) {});
    if (count == 0) return;
    detail::check_pointer("add_channel_bias", "x", x);
    detail::check_pointer("add_channel_bias", "bias", bias);
    detail::dispatch("add_channel_bias", type, [&](auto t) {
        using T = typename decltype(t)::type;
        constexpr int kWide = 16 / int(sizeof(T));
        const bool wide = inner % kWide == 0 && detail::aligned16(x);
        const detail::PlaneGrid grid = detail::plane_grid(n * c, wide ? inner / kWide : inner);
        auto kernel = wide ? add_channel_bias_kernel<T, kWide> : add_channel_bias_kernel<T, 1>;
        detail::launch_dependent(kernel, grid.blocks, grid.threads, 0, stream, static_cast<T*>(x),
                                 static_cast<const T*>(bias), n * c, per_channel ? c : 0, inner);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
