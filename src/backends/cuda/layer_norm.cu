// layer_norm over the last dim. Mean, then the biased variance as the mean of (x - mean)^2 in a second pass
// over the row (no E[x^2] - E[x]^2 cancellation); out = (x - mean) * rstd * gamma + beta, rounded once on the
// store. Rows of up to 768 values (SD's 320 and 640, CLIP's 768): a warp per row, the row read once
// into registers, each lane's values added pairwise, then across the warp (no barriers: a block per row spent
// its time in two block reductions and three reads of the row, 17 us for SD 1.5's 8192 x 320 where the bytes
// take 4 at memory speed). 16-bit rows of up to 2048 values in whole 16-byte groups: a block per row, 8 values a
// thread (layer_norm_row_block_kernel). Other longer rows: a block per row, plain sums.
#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/kernel_common.cuh"
#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

template <class T>
__global__ void layer_norm_kernel(const T* x, const T* gamma, const T* beta, T* out, int64_t rows, int64_t cols,
                                  float eps) {
    detail::dependent_launch_prologue();
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // uniform over the block: the barriers are safe
        const T* src = x + r * cols;
        T* dst = out + r * cols;
        // x - x[0] rather than x: the sum's rounding then scales with the row's spread, not its offset.
        const float pivot = detail::to_float(src[0]);
        float sum = 0.0f;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += detail::to_float(src[j]) - pivot;
        const float mean = pivot + block_sum(sum) / static_cast<float>(cols);
        float sq = 0.0f;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            const float d = detail::to_float(src[j]) - mean;
            sq += d * d;
        }
        const float var = block_sum(sq) / static_cast<float>(cols);
        const float rstd = 1.0f / sqrtf(var + eps);
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
            dst[j] = detail::from_float<T>((detail::to_float(src[j]) - mean) * rstd * detail::to_float(gamma[j]) +
                                           detail::to_float(beta[j]));
    }
}

// A warp per row of at most kPer * 32 values (on 64-lane warps it uses half the slots). The block kernel's
// arithmetic (pivot, mean, centred squares), with sums of depth ceil(log2 kPer) in the lane and
// log2(warpSize) across the warp: below the block kernel's depth bound (sum_depth in the tests). Registers
// are capped at 64 so that many rows are in flight (unbounded, the compiler kept a 64-bit address per value
// and used 80 to 200). 40 values a lane (16-bit rows of 1280 in 4-value loads, SD's third level) would spill
// under that cap: they get 128 registers (4 blocks a multiprocessor; such a layer has 512 rows, 128 blocks,
// so no fewer run at once). They took the block kernel before, 6.3 us each for 512 x 1280 under ncu on an H200.
// kVec consecutive values per load and store (4: 8 bytes of 16-bit values, where the row length is a multiple
// of 4 and the pointers align; ncu showed the 2-byte accesses taking 15 us for SD 1.5's 8192 x 320, where an
// add of twice the bytes takes 6): the lane's slot (i, e) is value (lane + i * warpSize) * kVec + e.
constexpr int kWarpsPerBlock = 4;  // rows per block, a warp each (2 warps of 64 lanes on AMD's GCN)

template <class T, int kPer, int kVec>
__global__ void __launch_bounds__(32 * kWarpsPerBlock, kPer > 24 ? 4 : 8)
    layer_norm_warp_kernel(const T* x, const T* gamma, const T* beta, T* out, int64_t rows, int cols, float eps) {
    detail::dependent_launch_prologue();
    using V = detail::Vec<T, kVec>;
    constexpr int kLoads = kPer / kVec;
    const int lane = threadIdx.x % warpSize, warps_per_block = blockDim.x / warpSize;
    const int64_t warps = int64_t(gridDim.x) * warps_per_block;
    auto at = [&](int k) { return (lane + k / kVec * warpSize) * kVec + k % kVec; };  // slot k's column
    for (int64_t r = blockIdx.x * int64_t(warps_per_block) + threadIdx.x / warpSize; r < rows; r += warps) {
        const T* src = x + r * cols;
        T* dst = out + r * cols;
        const float pivot = detail::to_float(src[0]);
        float v[kPer];
#pragma unroll
        for (int i = 0; i < kLoads; ++i) {
            V in{};
            if (at(i * kVec) < cols) in = *reinterpret_cast<const V*>(src + at(i * kVec));  // whole loads
#pragma unroll
            for (int e = 0; e < kVec; ++e) v[i * kVec + e] = detail::to_float(in.v[e]);
        }
        auto in_row = [&](int k) { return at(k) < cols; };
        const float sum = warp_sum(pairwise_sum<0, kPer>([&](int k) { return in_row(k) ? v[k] - pivot : 0.0f; }));
        const float mean = pivot + sum / static_cast<float>(cols);
        const float sq = warp_sum(pairwise_sum<0, kPer>([&](int k) {
            const float d = v[k] - mean;
            return in_row(k) ? d * d : 0.0f;
        }));
        const float rstd = 1.0f / sqrtf(sq / static_cast<float>(cols) + eps);
#pragma unroll
        for (int i = 0; i < kLoads; ++i) {
            const int j = at(i * kVec);
            if (j >= cols) continue;
            const V g = *reinterpret_cast<const V*>(gamma + j), b = *reinterpret_cast<const V*>(beta + j);
            V o;
#pragma unroll
            for (int e = 0; e < kVec; ++e)
                o.v[e] = detail::from_float<T>((v[i * kVec + e] - mean) * rstd * detail::to_float(g.v[e]) +
                                               detail::to_float(b.v[e]));
            *reinterpret_cast<V*>(dst + j) = o;
        }
    }
}

// Rows of 16-bit values, 8 a thread in one 16-byte access, a block of ceil(cols / 8) threads (rounded up to
// whole warps) per row: for the wide rows of few tokens (SD's 1280 at 16 x 16 and 8 x 8 latents, 512 and 128
// rows), where a warp per row left 4 warps a multiprocessor waiting on memory, 6.3 us for 1.3 MB (session 11's
// kernel timeline on the H200). gamma and beta are read before waiting on the previous kernel. The sums: 8 in
// the thread pairwise, then the block's (block_sum).
template <class T>
__global__ void __launch_bounds__(256)
    layer_norm_row_block_kernel(const T* x, const T* gamma, const T* beta, T* out, int64_t rows, int cols, float eps) {
    using V = detail::Vec<T, 8>;
    const int j = 8 * threadIdx.x;
    const bool mine = j < cols;
    const V g = mine ? *reinterpret_cast<const V*>(gamma + j) : V{};
    const V b = mine ? *reinterpret_cast<const V*>(beta + j) : V{};
    detail::dependent_launch_prologue();
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // uniform over the block: the barriers are safe
        const T* src = x + r * cols;
        const float pivot = detail::to_float(src[0]);
        const V in = mine ? *reinterpret_cast<const V*>(src + j) : V{};
        float v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = detail::to_float(in.v[e]);
        const float sum = block_sum(mine ? pairwise_sum<0, 8>([&](int k) { return v[k] - pivot; }) : 0.0f);
        const float mean = pivot + sum / static_cast<float>(cols);
        const float sq = block_sum(mine ? pairwise_sum<0, 8>([&](int k) {
            const float d = v[k] - mean;
            return d * d;
        })
                                        : 0.0f);
        const float rstd = 1.0f / sqrtf(sq / static_cast<float>(cols) + eps);
        if (mine) {
            V o;
#pragma unroll
            for (int e = 0; e < 8; ++e)
                o.v[e] = detail::from_float<T>((v[e] - mean) * rstd * detail::to_float(g.v[e]) +
                                               detail::to_float(b.v[e]));
            *reinterpret_cast<V*>(out + r * cols + j) = o;
        }
    }
}

// A warp per row with kPer values a lane, in loads of 4 where they fit.
template <class T, int kPer>
void launch_warp_rows(const T* x, const T* g, const T* b, T* o, int64_t rows, int cols, float eps, bool quads,
                      cudaStream_t stream) {
    const unsigned blocks = detail::blocks_for(rows, kWarpsPerBlock);
    if (quads)
        detail::launch_dependent(layer_norm_warp_kernel<T, kPer, 4>, blocks, 32 * kWarpsPerBlock, 0, stream, x, g, b, o,
                                 rows, cols, eps);
    else
        detail::launch_dependent(layer_norm_warp_kernel<T, kPer, 1>, blocks, 32 * kWarpsPerBlock, 0, stream, x, g, b, o,
                                 rows, cols, eps);
}

// Rows of 769 to 2048 16-bit values, a multiple of 8 and 16-byte aligned: a block each
// (layer_norm_row_block_kernel). Other rows of up to 1280 in 4-value loads: a warp each (40 values a lane; float
// rows, or single-value loads, would spill). False, launching nothing, for any other.
template <class T>
bool launch_wide_rows(const T* x, const T* g, const T* b, T* o, int64_t rows, int cols, float eps, bool quads,
                      cudaStream_t stream) {
    if constexpr (sizeof(T) == 2) {
        if (cols % 8 == 0 && cols <= 8 * 256 && detail::aligned16(x) && detail::aligned16(g) &&
            detail::aligned16(b) && detail::aligned16(o)) {
            const unsigned threads = unsigned((cols / 8 + 63) / 64 * 64);  // whole warps of 32 or 64 lanes
            detail::launch_dependent(layer_norm_row_block_kernel<T>, detail::blocks_for(rows, 1), threads, 0, stream,
                                     x, g, b, o, rows, cols, eps);
            return true;
        }
        if (quads && cols <= 32 * 40) {
            detail::launch_dependent(layer_norm_warp_kernel<T, 40, 4>, detail::blocks_for(rows, kWarpsPerBlock),
                                     32 * kWarpsPerBlock, 0, stream, x, g, b, o, rows, cols, eps);
            return true;
        }
    }
    return false;
}

}  // namespace

void layer_norm(const void* x, const void* gamma, const void* beta, void* out, DType type, int64_t rows, int64_t cols,
                float eps, cudaStream_t stream) {
    const int64_t count = detail::checked_count("layer_norm", {rows, cols});
    detail::dispatch("layer_norm", type, [](auto) {});
    require(eps >= 0.0f, ErrorKind::InvalidArgument, "kiln::cuda::layer_norm: eps must be >= 0");
    if (count == 0) return;
    detail::check_pointer("layer_norm", "x", x);
    detail::check_pointer("layer_norm", "gamma", gamma);
    detail::check_pointer("layer_norm", "beta", beta);
    detail::check_pointer("layer_norm", "out", out);
    detail::dispatch("layer_norm", type, [&](auto t) {
        using T = typename decltype(t)::type;
        const T* xt = static_cast<const T*>(x);
        const T* g = static_cast<const T*>(gamma);
        const T* bt = static_cast<const T*>(beta);
        T* o = static_cast<T*>(out);
        // 4 values per access where rows are whole quads and every row, gamma and beta start on one.
        const bool quads = cols % 4 == 0 && detail::quad_aligned<T>(x) && detail::quad_aligned<T>(gamma) &&
                           detail::quad_aligned<T>(beta) && detail::quad_aligned<T>(out);
        const int c = static_cast<int>(std::min<int64_t>(cols, 4096));
        if (cols <= 32 * 8)
            launch_warp_rows<T, 8>(xt, g, bt, o, rows, c, eps, quads, stream);
        else if (cols <= 32 * 16)
            launch_warp_rows<T, 16>(xt, g, bt, o, rows, c, eps, quads, stream);
        else if (cols <= 32 * 24)
            launch_warp_rows<T, 24>(xt, g, bt, o, rows, c, eps, quads, stream);
        else if (!launch_wide_rows<T>(xt, g, bt, o, rows, c, eps, quads, stream))
            detail::launch_dependent(layer_norm_kernel<T>, detail::blocks_for(rows, 1), detail::threads_for(cols, 256),
                                     0, stream, xt, g, bt, o, rows, cols, eps);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
