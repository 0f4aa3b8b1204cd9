// GroupNorm in two kernels. group_norm_stats: one block per (image, group), whose channels are contiguous
// in NCHW; the mean, then the biased variance as the mean of (x - mean)^2 in a second pass (no
// E[x^2] - E[x]^2 cancellation), both float block sums. One block per group keeps the result independent
// of the launch (no atomics, no order that varies) at the price of parallelism when images x groups is
// below the multiprocessor count. group_norm_apply: elementwise, (x - mean) * rstd * gamma + beta and
// optionally SiLU, in float, rounded once on the store.
#include "backends/cuda/activation_math.cuh"
#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/kernel_common.cuh"
#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

// One thread's float sum of a long strided run of values (a VAE group gives each thread thousands): added
// in runs of kRun, the run totals into the sum, so a value passes through at most kRun + count / kRun + 1
// roundings rather than count.
struct RunSum {
    static constexpr int kRun = 32;
    float total = 0.0f, run = 0.0f;
    int in_run = 0;
    __device__ void add(float v) {
        run += v;
        if (++in_run == kRun) {
            total += run;
            run = 0.0f;
            in_run = 0;
        }
    }
    __device__ float value() const { return total + run; }
};

template <class T>
__global__ void group_norm_stats_kernel(const T* x, int64_t groups_total, int64_t group_size, float eps, float* stats) {
    const float count = static_cast<float>(group_size);
    for (int64_t g = blockIdx.x; g < groups_total; g += gridDim.x) {  // uniform over the block
        const T* src = x + g * group_size;
        // Summing x - x[0] rather than x: the sum's rounding then scales with the spread of the group, not
        // with its offset from 0 (a group of mean 20 and deviation 0.01 keeps its digits).
        const float pivot = detail::to_float(src[0]);
        RunSum sum;
        for (int64_t i = threadIdx.x; i < group_size; i += blockDim.x) sum.add(detail::to_float(src[i]) - pivot);
        const float mean = pivot + block_sum(sum.value()) / count;
        RunSum sq;
        for (int64_t i = threadIdx.x; i < group_size; i += blockDim.x) {
            const float d = detail::to_float(src[i]) - mean;
            sq.add(d * d);
        }
        const float var = block_sum(sq.value()) / count;
        if (threadIdx.x == 0) {
            stats[2 * g] = mean;
            stats[2 * g + 1] = 1.0f / sqrtf(var + eps);
        }
    }
}

// Planes are (image, channel); each reads its group's statistics and its gamma and beta once.
template <class T, bool kSilu>
__global__ void group_norm_apply_kernel(const T* x, const float* stats, const T* gamma, const T* beta, T* out,
                                        int64_t planes, int64_t c, int64_t hw, int64_t channels_per_group) {
    for (int64_t p = detail::plane_first(); p < planes; p += detail::plane_step()) {
        const int64_t ch = p % c, g = p / c * (c / channels_per_group) + ch / channels_per_group;
        const float mean = stats[2 * g], rstd = stats[2 * g + 1];
        const float scale = detail::to_float(gamma[ch]), shift = detail::to_float(beta[ch]);
        const T* src = x + p * hw;
        T* dst = out + p * hw;
        for (int64_t i = detail::grid_first(); i < hw; i += detail::grid_step()) {
            float y = (detail::to_float(src[i]) - mean) * rstd * scale + shift;
            if (kSilu) y = detail::silu(y);
            dst[i] = detail::from_float<T>(y);
        }
    }
}

void check_groups(const char* op, int64_t c, int groups) {
    require(groups >= 1 && c % groups == 0, ErrorKind::InvalidArgument,
            std::string("kiln::cuda::") + op + ": " + std::to_string(groups) + " groups must divide the " +
                std::to_string(c) + " channels");
}

}  // namespace

void group_norm_stats(const void* x, DType type, int64_t n, int64_t c, int64_t hw, int groups, float eps,
                      float* stats, cudaStream_t stream) {
    const int64_t count = detail::checked_count("group_norm_stats", {n, c, hw});
    detail::dispatch("group_norm_stats", type, [](auto) {});
    check_groups("group_norm_stats", c, groups);
    require(eps >= 0.0f, ErrorKind::InvalidArgument, "kiln::cuda::group_norm_stats: eps must be >= 0");
    // No values: no statistics either (an empty group has no mean); stats is left as it is.
    if (count == 0) return;
    detail::check_pointer("group_norm_stats", "x", x);
    detail::check_pointer("group_norm_stats", "stats", stats);
    const int64_t groups_total = n * groups, group_size = c / groups * hw;
    detail::dispatch("group_norm_stats", type, [&](auto t) {
        using T = typename decltype(t)::type;
        group_norm_stats_kernel<T><<<detail::blocks_for(groups_total, 1), detail::threads_for(group_size, 512), 0,
                                     stream>>>(static_cast<const T*>(x), groups_total, group_size, eps, stats);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

void group_norm_apply(const void* x, const float* stats, const void* gamma, const void* beta, void* out, DType type,
                      int64_t n, int64_t c, int64_t hw, int groups, bool silu, cudaStream_t stream) {
    const int64_t count = detail::checked_count("group_norm_apply", {n, c, hw});
    detail::dispatch("group_norm_apply", type, [](auto) {});
    check_groups("group_norm_apply", c, groups);
    if (count == 0) return;
    detail::check_pointer("group_norm_apply", "x", x);
    detail::check_pointer("group_norm_apply", "stats", stats);
    detail::check_pointer("group_norm_apply", "gamma", gamma);
    detail::check_pointer("group_norm_apply", "beta", beta);
    detail::check_pointer("group_norm_apply", "out", out);
    const detail::PlaneGrid grid = detail::plane_grid(n * c, hw);
    detail::dispatch("group_norm_apply", type, [&](auto t) {
        using T = typename decltype(t)::type;
        auto kernel = silu ? group_norm_apply_kernel<T, true> : group_norm_apply_kernel<T, false>;
        kernel<<<grid.blocks, grid.threads, 0, stream>>>(static_cast<const T*>(x), stats, static_cast<const T*>(gamma),
                                                         static_cast<const T*>(beta), static_cast<T*>(out), n * c, c, hw,
                                                         c / groups);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
