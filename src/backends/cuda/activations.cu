// The in-place activations and GEGLU (as the CPU's ops/activations.cpp): read, compute in float
// (activation_math.cuh), round once on the store.
#include "backends/cuda/activation_math.cuh"
#include "backends/cuda/kernel_common.cuh"
#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

template <class T, Activation F>
__global__ void activation_kernel(T* x, int64_t n) {
    for (int64_t i = detail::grid_first(); i < n; i += detail::grid_step()) {
        const float v = detail::to_float(x[i]);
        float y;
        if constexpr (F == Activation::Silu) y = detail::silu(v);
        else if constexpr (F == Activation::Gelu) y = detail::gelu(v);
        else if constexpr (F == Activation::GeluTanh) y = detail::gelu_tanh(v);
        else y = detail::quick_gelu(v);
        x[i] = detail::from_float<T>(y);
    }
}

template <class T, Activation F>
void launch_activation(void* x, int64_t n, cudaStream_t stream) {
    activation_kernel<T, F><<<detail::blocks_for(n), detail::kThreads, 0, stream>>>(static_cast<T*>(x), n);
}

template <class T>
__global__ void geglu_kernel(const T* x, T* out, int64_t rows, int64_t half) {
    for (int64_t r = detail::plane_first(); r < rows; r += detail::plane_step()) {
        const T* value = x + r * 2 * half;
        const T* gate = value + half;
        T* dst = out + r * half;
        for (int64_t j = detail::grid_first(); j < half; j += detail::grid_step())
            dst[j] = detail::from_float<T>(detail::to_float(value[j]) * detail::gelu(detail::to_float(gate[j])));
    }
}

// The same, 4 values per thread and load (half a multiple of 4, x and out aligned to Quads; counts in Quads).
template <class T>
__global__ void geglu_quads_kernel(const detail::Quad<T>* x, detail::Quad<T>* out, int64_t rows, int64_t half) {
    for (int64_t r = detail::plane_first(); r < rows; r += detail::plane_step()) {
        const detail::Quad<T>* value = x + r * 2 * half;
        const detail::Quad<T>* gate = value + half;
        detail::Quad<T>* dst = out + r * half;
        for (int64_t j = detail::grid_first(); j < half; j += detail::grid_step()) {
            const detail::Quad<T> a = value[j], g = gate[j];
            detail::Quad<T> y;
            for (int k = 0; k < 4; ++k)
                y.v[k] = detail::from_float<T>(detail::to_float(a.v[k]) * detail::gelu(detail::to_float(g.v[k])));
            dst[j] = y;
        }
    }
}

}  // namespace

void activation(void* x, DType type, int64_t n, Activation f, cudaStream_t stream) {
    const int64_t count = detail::checked_count("activation", {n});
    require(f == Activation::Silu || f == Activation::Gelu || f == Activation::GeluTanh || f == Activation::QuickGelu,
            ErrorKind::InvalidArgument, "kiln::cuda::activation: unknown activation " + std::to_string(int(f)));
    detail::dispatch("activation", type, [](auto) {});
    if (count == 0) return;
    detail::check_pointer("activation", "x", x);
    detail::dispatch("activation", type, [&](auto t) {
        using T = typename decltype(t)::type;
        switch (f) {
            case Activation::Silu: launch_activation<T, Activation::Silu>(x, count, stream); break;
            case Activation::Gelu: launch_activation<T, Activation::Gelu>(x, count, stream); break;
            case Activation::GeluTanh: launch_activation<T, Activation::GeluTanh>(x, count, stream); break;
            case Activation::QuickGelu: launch_activation<T, Activation::QuickGelu>(x, count, stream); break;
        }
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

void geglu(const void* x, void* out, DType type, int64_t rows, int64_t half, cudaStream_t stream) {
    const int64_t count = detail::checked_count("geglu", {rows, half, 2});  // x holds 2 * count values
    detail::dispatch("geglu", type, [](auto) {});
    if (count == 0) return;
    detail::check_pointer("geglu", "x", x);
    detail::check_pointer("geglu", "out", out);
    detail::dispatch("geglu", type, [&](auto t) {
        using T = typename decltype(t)::type;
        if (half % 4 == 0 && detail::quad_aligned<T>(x) && detail::quad_aligned<T>(out)) {
            const detail::PlaneGrid grid = detail::plane_grid(rows, half / 4);
            geglu_quads_kernel<T><<<grid.blocks, grid.threads, 0, stream>>>(
                static_cast<const detail::Quad<T>*>(x), static_cast<detail::Quad<T>*>(out), rows, half / 4);
            return;
        }
        const detail::PlaneGrid grid = detail::plane_grid(rows, half);
        geglu_kernel<T><<<grid.blocks, grid.threads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(out), rows,
                                                                  half);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
