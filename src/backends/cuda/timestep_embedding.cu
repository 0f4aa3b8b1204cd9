// diffusers' get_timestep_embedding with the float arithmetic of the CPU op (ops/timestep_embedding.cpp),
// so that the two agree bit for bit wherever a correctly rounded result is unambiguous:
//   exponent = (-log(10000) * i) / (half - shift)   float32, the two constants rounded on the host as there
//   freq = exp(exponent)                            in double, rounded to float
//   arg = t * freq                                  float32
//   sin(arg), cos(arg)                              in double, rounded to float, then to the storage type
// The halves are swapped for flip_sin_to_cos; an odd dim gets a zero last column.
#include <cmath>

#include "backends/cuda/kernel_common.cuh"
#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

template <class T>
__global__ void timestep_embedding_kernel(const float* timesteps, T* out, int64_t n, int dim, bool flip_sin_to_cos,
                                          float neg_log_period, float denominator) {
    const int half = dim / 2;
    const int sin_at = flip_sin_to_cos ? half : 0, cos_at = flip_sin_to_cos ? 0 : half;
    for (int64_t r = detail::plane_first(); r < n; r += detail::plane_step()) {
        const float t = timesteps[r];
        T* row = out + r * dim;
        // Columns i < half make a sin/cos pair; i == half is the zero column of an odd dim.
        for (int64_t i = detail::grid_first(); i < half + (dim & 1); i += detail::grid_step()) {
            if (i == half) {
                row[dim - 1] = detail::from_float<T>(0.0f);
                continue;
            }
            const float exponent = (neg_log_period * static_cast<float>(i)) / denominator;
            const float freq = static_cast<float>(exp(static_cast<double>(exponent)));
            const double arg = static_cast<double>(t * freq);
            row[sin_at + i] = detail::from_float<T>(static_cast<float>(sin(arg)));
            row[cos_at + i] = detail::from_float<T>(static_cast<float>(cos(arg)));
        }
    }
}

}  // namespace

void timestep_embedding(const float* timesteps, void* out, DType type, int64_t n, int dim, bool flip_sin_to_cos,
                        float freq_shift, cudaStream_t stream) {
    const char* op = "timestep_embedding";
    detail::dispatch(op, type, [](auto) {});
    require(dim >= 1, ErrorKind::InvalidArgument, "kiln::cuda::timestep_embedding: dim " + std::to_string(dim) +
                                                      " must be >= 1");
    const int half = dim / 2;
    // The CPU op's check and its denominator: half - shift in double (python), used as a float32 scalar.
    require(half == 0 || static_cast<float>(half) - freq_shift != 0.0f, ErrorKind::InvalidArgument,
            "kiln::cuda::timestep_embedding: dim " + std::to_string(dim) + " with freq_shift " +
                std::to_string(freq_shift) + " divides by zero (half - shift = 0)");
    const float denominator = static_cast<float>(static_cast<double>(half) - static_cast<double>(freq_shift));
    const float neg_log_period = static_cast<float>(-std::log(10000.0));
    if (detail::checked_count(op, {n, dim}) == 0) return;
    detail::check_pointer(op, "timesteps", timesteps);
    detail::check_pointer(op, "out", out);
    const detail::PlaneGrid grid = detail::plane_grid(n, half + (dim & 1));
    detail::dispatch(op, type, [&](auto t) {
        using T = typename decltype(t)::type;
        timestep_embedding_kernel<T><<<grid.blocks, grid.threads, 0, stream>>>(
            timesteps, static_cast<T*>(out), n, dim, flip_sin_to_cos, neg_log_period, denominator);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
