// GroupNorm as statistics, then an affine. group_norm_stats: one block per (image, group), whose channels are
// contiguous in NCHW; the mean, then the biased variance as the mean of (x - mean)^2 in a second pass (no
// E[x^2] - E[x]^2 cancellation), both float block sums. One block per group keeps the result independent
// of the launch (no atomics, no order that varies) at the price of parallelism when images x groups is
// below the multiprocessor count; given a workspace, large groups are split into chunks instead (below).
// group_norm_apply: elementwise, (x - mean) * rstd * gamma + beta and optionally SiLU, in float, rounded once
// on the store.
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

// Chunked statistics, for groups large enough that one block per group leaves most of the GPU idle (SD's
// GroupNorms have 32 groups per image: 64 blocks for 132 multiprocessors), in one read of x: each block takes
// a chunk of kChunk values into registers (16 per thread), as y = x - x0 (x0 the group's first value), and
// writes the chunk's sum S_c of y and its centred squares M_c = sum (y - m_c)^2 around its own mean
// m_c = S_c / n_c; finish_kernel then adds the chunks in order: mean = x0 + sum S_c / n, and
// n var = sum (M_c + n_c (m_c - m)^2) with m = sum S_c / n (the parallel-variance identity of Chan, Golub and
// LeVeque; its cross term 2 (m_c - m) sum (y - m_c) is the chunk mean's rounding times n_c, second order).
// Working in y keeps every rounding relative to the group's spread, not its offset from 0. A value passes
// through 16 + 2 roundings in its thread, at most 10 in the block's tree and one per chunk: within
// run_sum_depth, the bound of the one-block kernel, for every group this path takes
// (tests/cuda/kernel_test_support.h). Fixed orders: the result repeats run to run.
constexpr int64_t kChunk = 4096;
constexpr int kChunkThreads = 256;
constexpr int kPerThread = int(kChunk / kChunkThreads);

template <class T>
__global__ void chunk_moments_kernel(const T* x, int64_t groups_total, int64_t group_size, int64_t chunks, bool quads,
                                     float* sums, float* squares) {
    for (int64_t b = blockIdx.x; b < groups_total * chunks; b += gridDim.x) {  // uniform over the block
        const int64_t g = b / chunks, begin = b % chunks * kChunk, end = min(group_size, begin + kChunk);
        const T* src = x + g * group_size;
        const float pivot = detail::to_float(src[0]);
        // y = x - x0 in registers; a thread takes 4 consecutive values at a time when `quads` (group_size a
        // multiple of 4 and x aligned: chunks hold whole quads), else one; 16 values either way.
        float y[kPerThread];
        bool in[kPerThread];
        if (quads) {
#pragma unroll
            for (int it = 0; it < kPerThread / 4; ++it) {
                const int64_t i = begin + 4 * (int64_t(threadIdx.x) + int64_t(it) * kChunkThreads);
                const bool ok = i < end;
                detail::Quad<T> q;
                if (ok) q = *reinterpret_cast<const detail::Quad<T>*>(src + i);
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    in[4 * it + k] = ok;
                    y[4 * it + k] = ok ? detail::to_float(q.v[k]) - pivot : 0.0f;
                }
            }
        } else {
#pragma unroll
            for (int it = 0; it < kPerThread; ++it) {
                const int64_t i = begin + threadIdx.x + int64_t(it) * kChunkThreads;
                in[it] = i < end;
                y[it] = in[it] ? detail::to_float(src[i]) - pivot : 0.0f;
            }
        }
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < kPerThread; ++k) s += y[k];  // values outside the chunk are 0
        const float sum = block_sum(s);
        const float mean_c = sum / static_cast<float>(end - begin);
        float q = 0.0f;
#pragma unroll
        for (int k = 0; k < kPerThread; ++k) {
            const float d = y[k] - mean_c;
            if (in[k]) q += d * d;
        }
        const float squared = block_sum(q);
        if (threadIdx.x == 0) {
            sums[b] = sum;
            squares[b] = squared;
        }
    }
}

template <class T>
__global__ void finish_kernel(const T* x, int64_t groups_total, int64_t group_size, int64_t chunks, const float* sums,
                              const float* squares, float eps, float* stats) {
    for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < groups_total; g += int64_t(gridDim.x) * blockDim.x) {
        const float* s = sums + g * chunks;
        const float* m2 = squares + g * chunks;
        float total = 0.0f;
        for (int64_t c = 0; c < chunks; ++c) total += s[c];
        const float mean_y = total / static_cast<float>(group_size);
        float centred = 0.0f;
        for (int64_t c = 0; c < chunks; ++c) {
            const float n_c = static_cast<float>(min(kChunk, group_size - c * kChunk));
            const float d = s[c] / n_c - mean_y;  // the chunk kernel's m_c, computed the same way
            centred += m2[c] + n_c * d * d;
        }
        stats[2 * g] = detail::to_float(x[g * group_size]) + mean_y;
        stats[2 * g + 1] = 1.0f / sqrtf(centred / static_cast<float>(group_size) + eps);
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

int64_t group_norm_stats_workspace(int64_t n, int64_t c, int64_t hw, int groups) {
    if (groups < 1 || c % groups != 0) return 0;
    const int64_t group_size = c / groups * hw;
    return group_size >= 2 * kChunk ? 2 * n * groups * ((group_size + kChunk - 1) / kChunk) : 0;
}

void group_norm_stats(const void* x, DType type, int64_t n, int64_t c, int64_t hw, int groups, float eps,
                      float* stats, cudaStream_t stream, float* workspace) {
    const int64_t count = detail::checked_count("group_norm_stats", {n, c, hw});
    detail::dispatch("group_norm_stats", type, [](auto) {});
    check_groups("group_norm_stats", c, groups);
    require(eps >= 0.0f, ErrorKind::InvalidArgument, "kiln::cuda::group_norm_stats: eps must be >= 0");
    // No values: no statistics either (an empty group has no mean); stats is left as it is.
    if (count == 0) return;
    detail::check_pointer("group_norm_stats", "x", x);
    detail::check_pointer("group_norm_stats", "stats", stats);
    const int64_t groups_total = n * groups, group_size = c / groups * hw;
    if (workspace && group_norm_stats_workspace(n, c, hw, groups) > 0) {
        const int64_t chunks = (group_size + kChunk - 1) / kChunk, blocks = groups_total * chunks;
        float* sums = workspace;
        float* squares = workspace + blocks;
        detail::dispatch("group_norm_stats", type, [&](auto t) {
            using T = typename decltype(t)::type;
            const T* xt = static_cast<const T*>(x);
            // Whole quads: every group starts a multiple of 4 values from x, which is aligned to a quad.
            const bool quads = group_size % 4 == 0 && detail::quad_aligned<T>(x);
            chunk_moments_kernel<T><<<detail::blocks_for(blocks, 1), kChunkThreads, 0, stream>>>(
                xt, groups_total, group_size, chunks, quads, sums, squares);
            finish_kernel<T><<<detail::blocks_for(groups_total), detail::kThreads, 0, stream>>>(
                xt, groups_total, group_size, chunks, sums, squares, eps, stats);
        });
        KILN_CUDA_CHECK(cudaGetLastError());
        return;
    }
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
