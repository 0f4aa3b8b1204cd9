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
    detail::dependent_launch_prologue();
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
// GroupNorms have 32 groups per image: 32 to 64 blocks for 132 multiprocessors), in one read of x: each warp
// takes a chunk of kChunk values into registers (16 per lane, or 8 on a 64-lane warp; 16-byte loads where
// the groups allow), as y = x - x0 (x0 the group's first value), and writes the chunk's sum S_c of y and its
// centred squares M_c = sum (y - m_c)^2 around its own mean m_c = S_c / n_c; finish_kernel then adds the
// chunks, one block per group: mean = x0 + sum S_c / n, and n var = sum (M_c + n_c (m_c - m)^2) with
// m = sum S_c / n (the parallel-variance identity of Chan, Golub and LeVeque; its cross term
// 2 (m_c - m) sum (y - m_c) is the chunk mean's rounding times n_c, second order). Working in y keeps every
// rounding relative to the group's spread, not its offset from 0. A lane adds its values pairwise (4
// roundings), the warp's butterfly adds 5 (6 on 64 lanes), and the finish one per chunk its thread takes plus
// its block's tree of at most 10: within run_sum_depth, the bound of the one-block kernel, for every group
// this path takes (tests/cuda/kernel_test_support.h). Fixed orders: the result repeats run to run.
// Warps, not blocks, own chunks so that no barrier stalls the loads: while one warp reduces, the others of
// its multiprocessor keep the memory busy; 16 values a lane keep the kernel under 64 registers (4 blocks a
// multiprocessor). Session 6's blocks of 4096 values, each with two block reductions (132 registers: one
// block a multiprocessor), and a finish of one thread per group read x at 0.4 TB/s, a tenth of the memory's
// speed (ncu, H200).
constexpr int64_t kChunk = 512;
constexpr int64_t kChunkedAbove = 8192;  // smaller groups: one block per group (group_norm_stats_kernel)
constexpr int kPerLane = 16;             // kChunk / the smallest warp
constexpr int kChunkThreads = 256;

// A lane's values of a chunk, kept as loaded (16-bit values two to a register, so that a block of 256 threads
// needs few registers and several blocks share a multiprocessor): with kWideLoads, kWide consecutive values
// per 16-byte load (the group size a multiple of kWide and x aligned: chunks then hold whole loads); else one
// value at a time, a warp apart, in the same slots. A 64-lane warp uses half the slots.
template <class T, bool kWideLoads>
__global__ void __launch_bounds__(kChunkThreads, 4)
    chunk_moments_kernel(const T* x, int64_t groups_total, int64_t group_size, int64_t chunks, float* sums,
                         float* squares) {
    detail::dependent_launch_prologue();
    constexpr int kWide = 16 / int(sizeof(T));
    constexpr int kLoads = kPerLane / kWide;
    static_assert(kPerLane % kWide == 0, "a lane's values are whole loads");
    const int lane = threadIdx.x % warpSize, used = kLoads * 32 / warpSize;
    const int64_t warps = int64_t(gridDim.x) * (blockDim.x / warpSize);
    // The chunk offset of slot (it, k).
    auto index = [&](int it, int k) {
        return kWideLoads ? kWide * (lane + it * warpSize) + k : lane + (it * kWide + k) * warpSize;
    };
    for (int64_t b = blockIdx.x * int64_t(blockDim.x / warpSize) + threadIdx.x / warpSize; b < groups_total * chunks;
         b += warps) {  // uniform over the warp
        const int64_t g = b / chunks, begin = b % chunks * kChunk;
        const int n = static_cast<int>(min(kChunk, group_size - begin));
        const T* src = x + g * group_size + begin;
        const float pivot = detail::to_float(x[g * group_size]);
        detail::Vec<T, kWide> raw[kLoads];
#pragma unroll
        for (int it = 0; it < kLoads; ++it) {
            if (kWideLoads) {
                if (it < used && index(it, 0) < n)
                    raw[it] = *reinterpret_cast<const detail::Vec<T, kWide>*>(src + index(it, 0));
            } else {
#pragma unroll
                for (int k = 0; k < kWide; ++k)
                    if (it < used && index(it, k) < n) raw[it].v[k] = src[index(it, k)];
            }
        }
        // The pairwise sum of f(y), y = value - pivot, over the valid slots: each load's kWide values as a tree,
        // then the loads as a tree, so a balanced tree of depth log2(kPerLane) in all.
        auto lane_sum = [&](auto f) {
            return pairwise_sum<0, kLoads>([&](int it) {
                return pairwise_sum<0, kWide>([&](int k) {
                    return it < used && index(it, k) < n ? f(detail::to_float(raw[it].v[k]) - pivot) : 0.0f;
                });
            });
        };
        const float sum = warp_sum(lane_sum([](float y) { return y; }));
        const float mean_c = sum / static_cast<float>(n);
        const float squared = warp_sum(lane_sum([mean_c](float y) {
            const float d = y - mean_c;
            return d * d;
        }));
        if (lane == 0) {
            sums[b] = sum;
            squares[b] = squared;
        }
    }
}

// One block per group: its chunks' sums, then their centred squares, each thread taking every 256th chunk.
template <class T>
__global__ void finish_kernel(const T* x, int64_t groups_total, int64_t group_size, int64_t chunks, const float* sums,
                              const float* squares, float eps, float* stats) {
    detail::dependent_launch_prologue();
    for (int64_t g = blockIdx.x; g < groups_total; g += gridDim.x) {  // uniform over the block
        const float* s = sums + g * chunks;
        const float* m2 = squares + g * chunks;
        float part = 0.0f;
        for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) part += s[c];
        const float mean_y = block_sum(part) / static_cast<float>(group_size);
        float centred = 0.0f;
        for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
            const float n_c = static_cast<float>(min(kChunk, group_size - c * kChunk));
            const float d = s[c] / n_c - mean_y;  // the chunk kernel's m_c, computed the same way
            centred += m2[c] + n_c * d * d;
        }
        centred = block_sum(centred);
        if (threadIdx.x == 0) {
            stats[2 * g] = detail::to_float(x[g * group_size]) + mean_y;
            stats[2 * g + 1] = 1.0f / sqrtf(centred / static_cast<float>(group_size) + eps);
        }
    }
}

// Planes are (image, channel); each reads its group's statistics and its gamma and beta once. kN values per
// load and store (16 bytes where the planes allow: scalar 2-byte accesses ran at a quarter of the memory's speed).
template <class T, bool kSilu, int kN>
__global__ void group_norm_apply_kernel(const T* x, const float* stats, const T* gamma, const T* beta, T* out,
                                        int64_t planes, int64_t c, int64_t hw, int64_t channels_per_group) {
    detail::dependent_launch_prologue();
    using V = detail::Vec<T, kN>;
    for (int64_t p = detail::plane_first(); p < planes; p += detail::plane_step()) {
        const int64_t ch = p % c, g = p / c * (c / channels_per_group) + ch / channels_per_group;
        const float mean = stats[2 * g], rstd = stats[2 * g + 1];
        const float scale = detail::to_float(gamma[ch]), shift = detail::to_float(beta[ch]);
        const V* src = reinterpret_cast<const V*>(x + p * hw);
        V* dst = reinterpret_cast<V*>(out + p * hw);
        for (int64_t i = detail::grid_first(); i < hw / kN; i += detail::grid_step()) {
            const V in = src[i];
            V o;
#pragma unroll
            for (int k = 0; k < kN; ++k) {
                float y = (detail::to_float(in.v[k]) - mean) * rstd * scale + shift;
                if (kSilu) y = detail::silu(y);
                o.v[k] = detail::from_float<T>(y);
            }
            dst[i] = o;
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
    return group_size > kChunkedAbove ? 2 * n * groups * ((group_size + kChunk - 1) / kChunk) : 0;
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
            // Whole 16-byte loads: every group starts a multiple of 16 bytes from x, which is aligned to 16.
            const bool wide = group_size * int64_t(sizeof(T)) % 16 == 0 && detail::aligned16(x);
            // A warp per chunk: kChunkThreads / 32 chunks per block (half as many on 64-lane warps).
            auto kernel = wide ? chunk_moments_kernel<T, true> : chunk_moments_kernel<T, false>;
            detail::launch_dependent(kernel, detail::blocks_for(blocks, kChunkThreads / 32), kChunkThreads, 0, stream,
                                     xt, groups_total, group_size, chunks, sums, squares);
            detail::launch_dependent(finish_kernel<T>, detail::blocks_for(groups_total, 1), kChunkThreads, 0, stream,
                                     xt, groups_total, group_size, chunks, sums, squares, eps, stats);
        });
        KILN_CUDA_CHECK(cudaGetLastError());
        return;
    }
    detail::dispatch("group_norm_stats", type, [&](auto t) {
        using T = typename decltype(t)::type;
        detail::launch_dependent(group_norm_stats_kernel<T>, detail::blocks_for(groups_total, 1),
                                 detail::threads_for(group_size, 512), 0, stream, static_cast<const T*>(x), groups_total,
                                 group_size, eps, stats);
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
    detail::dispatch("group_norm_apply", type, [&](auto t) {
        using T = typename decltype(t)::type;
        constexpr int kWide = 16 / int(sizeof(T));
        const bool wide = hw % kWide == 0 && detail::aligned16(x) && detail::aligned16(out);
        auto kernel = wide ? (silu ? group_norm_apply_kernel<T, true, kWide> : group_norm_apply_kernel<T, false, kWide>)
                           : (silu ? group_norm_apply_kernel<T, true, 1> : group_norm_apply_kernel<T, false, 1>);
        const detail::PlaneGrid grid = detail::plane_grid(n * c, wide ? hw / kWide : hw);
        detail::launch_dependent(kernel, grid.blocks, grid.threads, 0, stream, static_cast<const T*>(x), stats,
                                 static_cast<const T*>(gamma), static_cast<const T*>(beta), static_cast<T*>(out), n * c,
                                 c, hw, c / groups);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
