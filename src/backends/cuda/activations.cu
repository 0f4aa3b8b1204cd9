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
    detail::dependent_launch_prologue();
    for (int64_t r = detail::plane_first(); r < rows; r += detail::plane_step()) {
        const T* value = x + r * 2 * half;
        const T* gate = value + half;
        T* dst = out + r * half;
        for (int64_t j = detail::grid_first(); j < half; j += detail::grid_step())
            dst[j] = detail::from_float<T>(detail::to_float(value[j]) * detail::gelu(detail::to_float(gate[j])));
    }
}

// The same, kN values per thread and load (16 bytes: half a multiple of kN, x and out aligned; counts in Vecs).
template <class T, int kN>
__global__ void geglu_wide_kernel(const detail::Vec<T, kN>* x, detail::Vec<T, kN>* out, int64_t rows, int64_t half) {
    detail::dependent_launch_prologue();
    for (int64_t r = detail::plane_first(); r < rows; r += detail::plane_step()) {
        const detail::Vec<T, kN>* value = x + r * 2 * half;
        const detail::Vec<T, kN>* gate = value + half;
        detail::Vec<T, kN>* dst = out + r * half;
        for (int64_t j = detail::grid_first(); j < half; j += detail::grid_step()) {
            const detail::Vec<T, kN> a = value[j], g = gate[j];
            detail::Vec<T, kN> y;
#pragma unroll
            for (int k = 0; k < kN; ++k)
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
        constexpr int kN = 16 / int(sizeof(T));
        if (half % kN == 0 && detail::aligned16(x) && detail::aligned16(out)) {
            using V = detail::Vec<T, kN>;
            const detail::PlaneGrid grid = detail::plane_grid(rows, half / kN);
            detail::launch_dependent(geglu_wide_kernel<T, kN>, grid.blocks, grid.threads, 0, stream,
                                     static_cast<const V*>(x), static_cast<V*>(out), rows, half / kN);
            return;
        }
        const detail::PlaneGrid grid = detail::plane_grid(rows, half);
        detail::launch_dependent(geglu_kernel<T>, grid.blocks, grid.threads, 0, stream, static_cast<const T*>(x),
                                 static_cast<T*>(out), rows, half);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
