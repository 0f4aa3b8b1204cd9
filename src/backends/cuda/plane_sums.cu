// Sums and sums of squares of runs of values, in double: the GroupNorm statistics the tiled VAE decode gathers
// band by band (ops::DeviceOps::add_channel_sums), so that a band's values need not travel to the host for them.
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernel_common.cuh"
#include "backends/cuda/kernels.h"
#include "kiln/error.h"

namespace kiln::cuda {

namespace {

constexpr int kSumThreads = 256;

// One block per run. A tree in shared memory rather than warp shuffles: any warp size (AMD's 64 too), and the
// statistics of a band are a small part of its work.
template <class T>
__global__ void plane_sums_kernel(const T* x, int64_t stride, int64_t length, double* sums) {
    const T* run = x + int64_t(blockIdx.x) * stride;
    double s = 0.0, q = 0.0;
    for (int64_t i = threadIdx.x; i < length; i += blockDim.x) {
        const double v = detail::to_float(run[i]);
        s += v;
        q += v * v;
    }
    __shared__ double s_part[kSumThreads], q_part[kSumThreads];
    s_part[threadIdx.x] = s;
    q_part[threadIdx.x] = q;
    __syncthreads();
    for (int half = kSumThreads / 2; half > 0; half /= 2) {
        if (int(threadIdx.x) < half) {
            s_part[threadIdx.x] += s_part[threadIdx.x + half];
            q_part[threadIdx.x] += q_part[threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        sums[2 * int64_t(blockIdx.x)] = s_part[0];
        sums[2 * int64_t(blockIdx.x) + 1] = q_part[0];
    }
}

}  // namespace

void plane_sums(const void* x, DType type, int64_t planes, int64_t stride, int64_t length, double* sums,
                cudaStream_t stream) {
    require(planes >= 0 && length >= 0 && stride >= length && planes <= (int64_t(1) << 31) - 1,
            ErrorKind::InvalidArgument,
            "plane_sums: " + std::to_string(planes) + " runs of " + std::to_string(length) + " values " +
                std::to_string(stride) + " apart");
    detail::dispatch("plane_sums", type, [](auto) {});
    if (planes == 0) return;
    detail::check_pointer("plane_sums", "sums", sums);
    if (length > 0) detail::check_pointer("plane_sums", "x", x);
    detail::dispatch("plane_sums", type, [&](auto t) {
        using T = typename decltype(t)::type;
        plane_sums_kernel<T><<<unsigned(planes), kSumThreads, 0, stream>>>(static_cast<const T*>(x), stride, length,
                                                                          sums);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
