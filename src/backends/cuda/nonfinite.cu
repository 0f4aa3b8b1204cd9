// find_nonfinite: a NaN/infinity detector for debugging and for the pipeline's checks. Every thread that
// meets one stores 1: the stores race, but all store the same value, and the flag is never cleared here.
#include "backends/cuda/kernel_common.cuh"
#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

template <class T>
__global__ void find_nonfinite_kernel(const T* x, int64_t n, int* flag) {
    for (int64_t i = detail::grid_first(); i < n; i += detail::grid_step())
        if (!isfinite(detail::to_float(x[i]))) {  // widening keeps NaN and infinity
            *flag = 1;
            return;
        }
}

}  // namespace

void find_nonfinite(const void* x, DType type, int64_t n, int* flag, cudaStream_t stream) {
    const int64_t count = detail::checked_count("find_nonfinite", {n});
    detail::dispatch("find_nonfinite", type, [](auto) {});
    if (count == 0) return;
    detail::check_pointer("find_nonfinite", "x", x);
    detail::check_pointer("find_nonfinite", "flag", flag);
    detail::dispatch("find_nonfinite", type, [&](auto t) {
        using T = typename decltype(t)::type;
        find_nonfinite_kernel<T><<<detail::blocks_for(count), detail::kThreads, 0, stream>>>(static_cast<const T*>(x),
                                                                                               count, flag);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
