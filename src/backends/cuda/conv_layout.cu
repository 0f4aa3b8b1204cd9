// The layout changes around a channels-last (NHWC) convolution, for the cuDNN route that runs on NHWC
// tensors while kiln's activations stay NCHW (cuda_device_ops.cpp): the input into NHWC, with GroupNorm+SiLU
// applied on the way where the convolution fuses them; the output back into NCHW with the bias added; the
// filter from [cout, cin, k, k] into [cout, k, k, cin]. Each value is read into float, changed, and rounded
// once; a plain move keeps every number exactly (each storage type converts to float and back exactly; a NaN
// stays a NaN, its payload bits not guaranteed).
#include "backends/cuda/activation_math.cuh"
#include "backends/cuda/kernel_common.cuh"
#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

// Tiles through shared memory, so that a warp's reads and writes are both contiguous; the extra column
// staggers the banks. Blocks of 32 x 8 threads; each thread moves kVec neighbouring values at once (2 for
// 16-bit types where both extents are even: a warp then moves 128 bytes per instruction, not 64), so a tile
// is 32 kVec square. The grid is (tiles along the fast source axis, tiles along the other, images): no thread
// divides to find its tile (64-bit divisions cost more than the copy); tile rows and images beyond the
// grid's 65535 loop.
constexpr int kTile = 32, kTileRows = 8;
// Blocks a multiprocessor should hold at once (registers capped to fit): memory-bound copies need many loads
// in flight, and at 48-56 registers only 4 blocks fit. 7.5 holds 1024 threads a multiprocessor: 4 blocks there.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
constexpr int kTileBlocks = 4;
#else
constexpr int kTileBlocks = 6;
#endif

// Channel ch's GroupNorm terms (mean, rstd of its group g; gamma, beta), read once per tile into shared memory.
template <class T>
__device__ __forceinline__ void norm_terms(float* terms, int64_t g, int64_t ch, const float* stats, const T* gamma,
                                           const T* beta) {
    terms[0] = stats[2 * g];
    terms[1] = stats[2 * g + 1];
    terms[2] = detail::to_float(gamma[ch]);
    terms[3] = detail::to_float(beta[ch]);
}

template <int kVec>
dim3 tile_grid(int64_t n, int64_t rows, int64_t cols) {  // source [n][rows][cols]
    constexpr int64_t t = kTile * kVec;
    return dim3(unsigned((cols + t - 1) / t), unsigned(std::min<int64_t>((rows + t - 1) / t, 65535)),
                unsigned(std::min<int64_t>(n, 65535)));
}

// out [n][hw][c] = f(x [n][c][hw]), f the GroupNorm+SiLU (or, silu false, the GroupNorm) of the value's
// (image, channel) when stats is set.
// kVec 2 needs c and hw even. kUp: x is the nearest-2x downsampled image, [n][c][hw / 4] of width w2 / 2, read
// as its upsampled copy of width w2 (conv2d_upsample2x without that copy); hw < 2^31.
template <class T, int kVec, bool kUp>
__global__ void __launch_bounds__(kTile * kTileRows, kTileBlocks)
    to_nhwc_kernel(const T* x, T* out, int64_t n, int64_t c, int64_t hw, const float* stats, const T* gamma,
                   const T* beta, int64_t channels_per_group, uint32_t w2, bool silu) {
    detail::dependent_launch_prologue();
    constexpr int kT = kTile * kVec;
    __shared__ float tile[kT][kT + 1];
    // The tile's channels' GroupNorm terms (mean, rstd, gamma, beta), found once per tile: a thread per value
    // would divide a 64-bit channel index by the group width for each row it reads (ncu: the kernel was
    // bound by instructions, not by memory).
    __shared__ float norm[kT][4];
    const int64_t p0 = int64_t(blockIdx.x) * kT, groups = stats ? c / channels_per_group : 0;
    const int flat = threadIdx.y * kTile + threadIdx.x;
    for (int64_t b = blockIdx.z; b < n; b += gridDim.z)
    for (int64_t c0 = int64_t(blockIdx.y) * kT; c0 < c; c0 += int64_t(gridDim.y) * kT) {
        const int64_t plane = kUp ? hw / 4 : hw;
        const T* src = x + b * c * plane;
        if (stats) {
            if (flat < kT && c0 + flat < c)
                norm_terms(norm[flat], b * groups + (c0 + flat) / channels_per_group, c0 + flat, stats, gamma, beta);
            __syncthreads();
        }
        for (int r = threadIdx.y; r < kT; r += kTileRows) {
            const int64_t ch = c0 + r, p = p0 + kVec * threadIdx.x;
            if (ch < c && p < hw) {
                detail::Vec<T, kVec> in;
                if (kUp) {  // a pair starts on an even column: both values come from one source pixel
                    const uint32_t yu = uint32_t(p) / w2, xu = uint32_t(p) - yu * w2;
                    const T v = src[ch * plane + int64_t(yu / 2) * (w2 / 2) + xu / 2];
                    for (int e = 0; e < kVec; ++e) in.v[e] = v;
                } else {
                    in = *reinterpret_cast<const detail::Vec<T, kVec>*>(src + ch * hw + p);
                }
                if (stats) {  // im2col's expression exactly (kernels_layout_cuda_test compares the two)
                    const float mean = norm[r][0], rstd = norm[r][1], scale = norm[r][2], shift = norm[r][3];
                    for (int e = 0; e < kVec; ++e) {
                        const float y = (detail::to_float(in.v[e]) - mean) * rstd * scale + shift;
                        tile[r][kVec * threadIdx.x + e] = silu ? detail::silu(y) : y;
                    }
                } else {
                    for (int e = 0; e < kVec; ++e) tile[r][kVec * threadIdx.x + e] = detail::to_float(in.v[e]);
                }
            }
        }
        __syncthreads();
        T* dst = out + b * hw * c;
        for (int r = threadIdx.y; r < kT; r += kTileRows) {
            const int64_t p = p0 + r, ch = c0 + kVec * threadIdx.x;
            if (p < hw && ch < c) {
                detail::Vec<T, kVec> o;
                for (int e = 0; e < kVec; ++e) o.v[e] = detail::from_float<T>(tile[kVec * threadIdx.x + e][r]);
                *reinterpret_cast<detail::Vec<T, kVec>*>(dst + p * c + ch) = o;
            }
        }
        __syncthreads();  // the tile (and the norm terms) are refilled for the next round
    }
}

// out [n][c][hw] = x [n][hw][c] + bias[c] (bias may be null), rounded, then + image_bias[n][c] (may be null; its
// rows image_bias_stride values apart) rounded again (add_channel_bias_'s bits); with `accumulate`, out += that
// instead (the sum of the rounded value, as add_ would make it), out first plus out_bias[c] where that is set
// (rounded, as add_channel_bias would). kVec 2 needs c and hw even.
template <class T, int kVec>
__global__ void __launch_bounds__(kTile * kTileRows, kTileBlocks)
    from_nhwc_kernel(const T* x, const T* bias, const T* image_bias, int64_t image_bias_stride, T* out, int64_t n,
                     int64_t hw, int64_t c, bool accumulate, const T* out_bias) {
    detail::dependent_launch_prologue();
    constexpr int kT = kTile * kVec;
    __shared__ float tile[kT][kT + 1];
    const int64_t c0 = int64_t(blockIdx.x) * kT;
    for (int64_t b = blockIdx.z; b < n; b += gridDim.z)
    for (int64_t p0 = int64_t(blockIdx.y) * kT; p0 < hw; p0 += int64_t(gridDim.y) * kT) {
        const T* src = x + b * hw * c;
        for (int r = threadIdx.y; r < kT; r += kTileRows) {
            const int64_t p = p0 + r, ch = c0 + kVec * threadIdx.x;
            if (p < hw && ch < c) {
                const detail::Vec<T, kVec> in = *reinterpret_cast<const detail::Vec<T, kVec>*>(src + p * c + ch);
                for (int e = 0; e < kVec; ++e) tile[r][kVec * threadIdx.x + e] = detail::to_float(in.v[e]);
            }
        }
        __syncthreads();
        T* dst = out + b * c * hw;
        for (int r = threadIdx.y; r < kT; r += kTileRows) {
            const int64_t ch = c0 + r, p = p0 + kVec * threadIdx.x;
            if (ch < c && p < hw) {
                const float add = bias ? detail::to_float(bias[ch]) : 0.0f;
                const float add_image = image_bias ? detail::to_float(image_bias[b * image_bias_stride + ch]) : 0.0f;
                detail::Vec<T, kVec> o;
                detail::Vec<T, kVec> old;
                if (accumulate) old = *reinterpret_cast<const detail::Vec<T, kVec>*>(dst + ch * hw + p);
                if (out_bias)  // add_channel_bias's rounding of out + out_bias, before the sum
                    for (int e = 0; e < kVec; ++e)
                        old.v[e] = detail::from_float<T>(detail::to_float(old.v[e]) + detail::to_float(out_bias[ch]));
                for (int e = 0; e < kVec; ++e) {
                    float v = tile[kVec * threadIdx.x + e][r];
                    if (bias) v += add;
                    o.v[e] = detail::from_float<T>(v);
                    if (image_bias) o.v[e] = detail::from_float<T>(detail::to_float(o.v[e]) + add_image);
                    if (accumulate) o.v[e] = detail::from_float<T>(detail::to_float(old.v[e]) + detail::to_float(o.v[e]));
                }
                *reinterpret_cast<detail::Vec<T, kVec>*>(dst + ch * hw + p) = o;
            }
        }
        __syncthreads();
    }
}

// The 16-bit fast path of both transposes, where both extents are multiples of 64 and both pointers are
// 16-byte aligned (every SD UNet and VAE layer but the 4-channel ends): a 64 x 64 tile of the storage type in
// shared memory, 16-byte loads and stores on both sides (a thread moves two 16-byte rows in and two out). The
// pair kernels above moved 4 bytes an access, and with few loads in flight per multiprocessor reached about
// 1.2 TB/s on SD 1.5's 64x64 level (ncu, H200). The tile holds each value already rounded to the storage type:
// the output is that rounding of the same float, so the bits are the pair kernels'.
constexpr int kFast = 64, kFastThreads = 256;
using Row16 = uint4;  // 8 16-bit values

// A tile element's slot: the 8-value chunks of each row are XOR-swizzled by the row's eighth, so that the
// column reads (8 values of one column from 8 rows) of a quarter warp fall in distinct banks.
__device__ __forceinline__ int fast_slot(int row, int col) {
    return row * kFast + ((((col >> 3) ^ (row >> 3)) & 7) << 3) + (col & 7);
}

template <class T>
bool fast_fits(int64_t a, int64_t b, const void* x, const void* out) {
    return sizeof(T) == 2 && a % kFast == 0 && b % kFast == 0 && detail::aligned16(x) && detail::aligned16(out);
}

dim3 fast_grid(int64_t n, int64_t rows, int64_t cols) {  // source [n][rows][cols], both multiples of kFast
    return dim3(unsigned(cols / kFast), unsigned(std::min<int64_t>(rows / kFast, 65535)),
                unsigned(std::min<int64_t>(n, 65535)));
}

// to_nhwc_kernel's work on 16-bit values in whole tiles (c and hw multiples of 64; no upsampled source).
template <class T>
__global__ void __launch_bounds__(kFastThreads)
    to_nhwc_fast_kernel(const T* x, T* out, int64_t c, int64_t hw, int64_t n, const float* stats, const T* gamma,
                        const T* beta, int64_t channels_per_group, bool silu) {
    detail::dependent_launch_prologue();
    // T's bits in 16-byte rows: aligned for the row accesses, and no constructor (a __shared__ T[] would need one).
    __shared__ Row16 tile_rows[kFast * kFast / 8];
    T* tile = reinterpret_cast<T*>(tile_rows);
    __shared__ float norm[kFast][4];
    const int t = threadIdx.x, row = t / 8, chunk = t % 8;  // rows row and row + 32, 8 values at 8 * chunk
    const int64_t p0 = int64_t(blockIdx.x) * kFast, groups = stats ? c / channels_per_group : 0;
    for (int64_t b = blockIdx.z; b < n; b += gridDim.z)
    for (int64_t c0 = int64_t(blockIdx.y) * kFast; c0 < c; c0 += int64_t(gridDim.y) * kFast) {
        const T* src = x + (b * c + c0) * hw + p0;
        Row16 in[2];
        for (int h = 0; h < 2; ++h) in[h] = *reinterpret_cast<const Row16*>(src + (row + 32 * h) * hw + 8 * chunk);
        if (stats) {
            if (t < kFast) norm_terms(norm[t], b * groups + (c0 + t) / channels_per_group, c0 + t, stats, gamma, beta);
            __syncthreads();
        }
        for (int h = 0; h < 2; ++h) {
            const int r = row + 32 * h;
            const T* v = reinterpret_cast<const T*>(&in[h]);
            Row16 o;
            T* ov = reinterpret_cast<T*>(&o);
            if (stats) {  // to_nhwc_kernel's expression
                const float mean = norm[r][0], rstd = norm[r][1], scale = norm[r][2], shift = norm[r][3];
                for (int e = 0; e < 8; ++e) {
                    const float y = (detail::to_float(v[e]) - mean) * rstd * scale + shift;
                    ov[e] = detail::from_float<T>(silu ? detail::silu(y) : y);
                }
            } else {
                o = in[h];
            }
            *reinterpret_cast<Row16*>(&tile[fast_slot(r, 8 * chunk)]) = o;
        }
        __syncthreads();
        T* dst = out + (b * hw + p0) * c + c0;
        for (int h = 0; h < 2; ++h) {  // pixel row + 32 h, channels 8 chunk ... 8 chunk + 7
            const int p = row + 32 * h;
            Row16 o;
            T* ov = reinterpret_cast<T*>(&o);
            for (int e = 0; e < 8; ++e) ov[e] = tile[fast_slot(8 * chunk + e, p)];
            *reinterpret_cast<Row16*>(dst + p * c + 8 * chunk) = o;
        }
        __syncthreads();  // the tile (and the norm terms) are refilled for the next round
    }
}

// from_nhwc_kernel's work on 16-bit values in whole tiles (hw and c multiples of 64).
template <class T>
__global__ void __launch_bounds__(kFastThreads)
    from_nhwc_fast_kernel(const T* x, const T* bias, const T* image_bias, int64_t image_bias_stride, T* out,
                          int64_t n, int64_t hw, int64_t c, bool accumulate, const T* out_bias) {
    detail::dependent_launch_prologue();
    __shared__ Row16 tile_rows[kFast * kFast / 8];
    T* tile = reinterpret_cast<T*>(tile_rows);
    const int t = threadIdx.x, row = t / 8, chunk = t % 8;
    const int64_t c0 = int64_t(blockIdx.x) * kFast;
    for (int64_t b = blockIdx.z; b < n; b += gridDim.z)
    for (int64_t p0 = int64_t(blockIdx.y) * kFast; p0 < hw; p0 += int64_t(gridDim.y) * kFast) {
        const T* src = x + (b * hw + p0) * c + c0;
        Row16 in[2];
        for (int h = 0; h < 2; ++h) in[h] = *reinterpret_cast<const Row16*>(src + (row + 32 * h) * c + 8 * chunk);
        for (int h = 0; h < 2; ++h) *reinterpret_cast<Row16*>(&tile[fast_slot(row + 32 * h, 8 * chunk)]) = in[h];
        __syncthreads();
        T* dst = out + (b * c + c0) * hw + p0;
        for (int h = 0; h < 2; ++h) {  // channel row + 32 h, pixels 8 chunk ... 8 chunk + 7
            const int r = row + 32 * h;
            const int64_t ch = c0 + r;
            const float add = bias ? detail::to_float(bias[ch]) : 0.0f;
            const float add_image = image_bias ? detail::to_float(image_bias[b * image_bias_stride + ch]) : 0.0f;
            Row16 old{}, o;
            if (accumulate) old = *reinterpret_cast<const Row16*>(dst + r * hw + 8 * chunk);
            if (out_bias) {  // add_channel_bias's rounding of out + out_bias, before the sum
                T* shifted = reinterpret_cast<T*>(&old);
                const float add_out = detail::to_float(out_bias[ch]);
                for (int e = 0; e < 8; ++e) shifted[e] = detail::from_float<T>(detail::to_float(shifted[e]) + add_out);
            }
            const T* ov_old = reinterpret_cast<const T*>(&old);
            T* ov = reinterpret_cast<T*>(&o);
            for (int e = 0; e < 8; ++e) {  // from_nhwc_kernel's arithmetic
                float v = detail::to_float(tile[fast_slot(8 * chunk + e, r)]);
                if (bias) v += add;
                ov[e] = detail::from_float<T>(v);
                if (image_bias) ov[e] = detail::from_float<T>(detail::to_float(ov[e]) + add_image);
                if (accumulate) ov[e] = detail::from_float<T>(detail::to_float(ov_old[e]) + detail::to_float(ov[e]));
            }
            *reinterpret_cast<Row16*>(dst + r * hw + 8 * chunk) = o;
        }
        __syncthreads();
    }
}

// Pairs where the type is 16-bit, both extents even and both pointers aligned to a pair.
template <class T>
bool pairs_fit(int64_t a, int64_t b, const void* x, const void* out) {
    return sizeof(T) == 2 && a % 2 == 0 && b % 2 == 0 && reinterpret_cast<uintptr_t>(x) % 4 == 0 &&
           reinterpret_cast<uintptr_t>(out) % 4 == 0;
}

// out [cout][taps][cin] = w [cout][cin][taps]. A block takes a slab of one output channel's filter, up to
// kSlab elements of whole input channels, which is contiguous in w: read at once into shared memory, written
// out as `taps` contiguous runs. 16-bit filters move in pairs where they align (4-byte reads of the slab;
// each thread writes two neighbouring input channels of a tap), and the input channels are split evenly
// between a filter's blocks: session 6's kernel moved 2 bytes per access in uneven slabs (455 + 57 input
// channels of a 3x3 filter), 0.28 TB/s on the H200.
constexpr int kSlab = 4096;

template <class W>
__global__ void filter_to_krsc_kernel(const W* w, W* out, int64_t cout, int64_t cin, int64_t taps, int64_t chunk) {
    __shared__ W slab[kSlab];
    const int64_t c0 = int64_t(blockIdx.x) * chunk;
    const int count = static_cast<int>(min(chunk, cin - c0)), values = count * static_cast<int>(taps);
    const int nt = static_cast<int>(taps);
    for (int64_t co = blockIdx.y; co < cout; co += gridDim.y) {
        const W* src = w + (co * cin + c0) * taps;
        W* dst = out + co * taps * cin + c0;
        const bool pairs_in = sizeof(W) == 2 && values % 2 == 0 && reinterpret_cast<uintptr_t>(src) % 4 == 0;
        const bool pairs_out =
            sizeof(W) == 2 && count % 2 == 0 && cin % 2 == 0 && reinterpret_cast<uintptr_t>(dst) % 4 == 0;
        if (pairs_in) {
            for (int i = threadIdx.x; i < values / 2; i += blockDim.x)
                reinterpret_cast<uint32_t*>(slab)[i] = reinterpret_cast<const uint32_t*>(src)[i];
        } else {
            for (int i = threadIdx.x; i < values; i += blockDim.x) slab[i] = src[i];
        }
        __syncthreads();
        if (pairs_out) {
            const int half = count / 2;
            for (int i = threadIdx.x; i < nt * half; i += blockDim.x) {
                const int tap = i / half, ci = 2 * (i - tap * half);
                detail::Vec<W, 2> o;
                o.v[0] = slab[ci * nt + tap];
                o.v[1] = slab[(ci + 1) * nt + tap];
                *reinterpret_cast<detail::Vec<W, 2>*>(dst + int64_t(tap) * cin + ci) = o;
            }
        } else {
            for (int i = threadIdx.x; i < values; i += blockDim.x) {
                const int tap = i / count, ci = i - tap * count;
                dst[int64_t(tap) * cin + ci] = slab[ci * nt + tap];
            }
        }
        __syncthreads();
    }
}

}  // namespace

void to_nhwc(const void* x, void* out, DType type, int64_t n, int64_t c, int64_t hw, const Im2colNorm* norm,
             cudaStream_t stream, int64_t upsampled_width) {
    const int64_t count = detail::checked_count("to_nhwc", {n, c, hw});
    const bool up = upsampled_width > 0;
    require(!up || (upsampled_width % 2 == 0 && hw % (2 * upsampled_width) == 0 && hw < (int64_t(1) << 31)),
            ErrorKind::InvalidArgument,
            "kiln::cuda::to_nhwc: " + std::to_string(hw) + " pixels are not a 2x upsampling of width " +
                std::to_string(upsampled_width) + " (or are 2^31 or more)");
    detail::dispatch("to_nhwc", type, [](auto) {});
    if (count == 0) return;
    detail::check_pointer("to_nhwc", "x", x);
    detail::check_pointer("to_nhwc", "out", out);
    if (norm) {
        require(norm->groups >= 1 && c % norm->groups == 0, ErrorKind::InvalidArgument,
                "kiln::cuda::to_nhwc: " + std::to_string(norm->groups) + " groups must divide the " +
                    std::to_string(c) + " channels");
        detail::check_pointer("to_nhwc", "stats", norm->stats);
        detail::check_pointer("to_nhwc", "gamma", norm->gamma);
        detail::check_pointer("to_nhwc", "beta", norm->beta);
    }
    detail::dispatch("to_nhwc", type, [&](auto t) {
        using T = typename decltype(t)::type;
        const T* xt = static_cast<const T*>(x);
        T* o = static_cast<T*>(out);
        const float* st = norm ? norm->stats : nullptr;
        const T* g = norm ? static_cast<const T*>(norm->gamma) : nullptr;
        const T* bt = norm ? static_cast<const T*>(norm->beta) : nullptr;
        const int64_t cpg = norm ? c / norm->groups : 1;
        const uint32_t w2 = uint32_t(upsampled_width);
        const bool sl = !norm || norm->silu;
        const dim3 threads(kTile, kTileRows);
        if constexpr (sizeof(T) == 2) {
            if (!up && fast_fits<T>(c, hw, x, out)) {
                detail::launch_dependent(to_nhwc_fast_kernel<T>, fast_grid(n, c, hw), kFastThreads, 0, stream, xt, o, c,
                                         hw, n, st, g, bt, cpg, sl);
                return;
            }
        }
        // An upsampled source is read value by value: only the output needs the pair alignment.
        if (pairs_fit<T>(c, hw, up ? out : x, out)) {
            if (up)
                detail::launch_dependent(to_nhwc_kernel<T, 2, true>, tile_grid<2>(n, c, hw), threads, 0,
                                         stream, xt, o, n, c, hw, st, g, bt, cpg, w2, sl);
            else
                detail::launch_dependent(to_nhwc_kernel<T, 2, false>, tile_grid<2>(n, c, hw), threads, 0,
                                         stream, xt, o, n, c, hw, st, g, bt, cpg, w2, sl);
        } else {
            if (up)
                detail::launch_dependent(to_nhwc_kernel<T, 1, true>, tile_grid<1>(n, c, hw), threads, 0,
                                         stream, xt, o, n, c, hw, st, g, bt, cpg, w2, sl);
            else
                detail::launch_dependent(to_nhwc_kernel<T, 1, false>, tile_grid<1>(n, c, hw), threads, 0,
                                         stream, xt, o, n, c, hw, st, g, bt, cpg, w2, sl);
        }
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

void from_nhwc(const void* x, const void* bias, void* out, DType type, int64_t n, int64_t hw, int64_t c,
               cudaStream_t stream, bool accumulate, const void* image_bias, int64_t image_bias_stride,
               const void* out_bias) {
    const int64_t count = detail::checked_count("from_nhwc", {n, hw, c});
    if (image_bias_stride == 0) image_bias_stride = c;
    require(image_bias_stride >= c, ErrorKind::InvalidArgument,
            "kiln::cuda::from_nhwc: image_bias rows of " + std::to_string(image_bias_stride) + " values for " +
                std::to_string(c) + " channels");
    require(!out_bias || accumulate, ErrorKind::InvalidArgument,
            "kiln::cuda::from_nhwc: out_bias is added to what out holds: accumulate only");
    detail::dispatch("from_nhwc", type, [](auto) {});
    if (count == 0) return;
    detail::check_pointer("from_nhwc", "x", x);
    detail::check_pointer("from_nhwc", "out", out);
    detail::dispatch("from_nhwc", type, [&](auto t) {
        using T = typename decltype(t)::type;
        const T* xt = static_cast<const T*>(x);
        const T* bt = static_cast<const T*>(bias);
        const T* ib = static_cast<const T*>(image_bias);
        const T* ob = static_cast<const T*>(out_bias);
        T* o = static_cast<T*>(out);
        if constexpr (sizeof(T) == 2) {
            if (fast_fits<T>(hw, c, x, out)) {
                detail::launch_dependent(from_nhwc_fast_kernel<T>, fast_grid(n, hw, c), kFastThreads, 0, stream, xt,
                                         bt, ib, image_bias_stride, o, n, hw, c, accumulate, ob);
                return;
            }
        }
        if (pairs_fit<T>(c, hw, x, out))
            detail::launch_dependent(from_nhwc_kernel<T, 2>, tile_grid<2>(n, hw, c), dim3(kTile, kTileRows), 0,
                                     stream, xt, bt, ib, image_bias_stride, o, n, hw, c, accumulate, ob);
        else
            detail::launch_dependent(from_nhwc_kernel<T, 1>, tile_grid<1>(n, hw, c), dim3(kTile, kTileRows), 0,
                                     stream, xt, bt, ib, image_bias_stride, o, n, hw, c, accumulate, ob);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

void filter_to_krsc(const void* w, void* out, DType type, int64_t cout, int64_t cin, int64_t taps,
                    cudaStream_t stream) {
    const int64_t count = detail::checked_count("filter_to_krsc", {cout, cin, taps});
    detail::dispatch_bits("filter_to_krsc", type, [](auto) {});
    if (count == 0) return;
    detail::check_pointer("filter_to_krsc", "w", w);
    detail::check_pointer("filter_to_krsc", "out", out);
    require(taps <= kSlab, ErrorKind::InvalidArgument, "kiln::cuda::filter_to_krsc: a kernel of more than 4096 taps");
    // The fewest slabs that hold the filter, with the input channels split evenly between them, an even count
    // where one fits (16-bit filters then move in pairs).
    const int64_t most = kSlab / taps, slabs = (cin + most - 1) / most;
    int64_t chunk = (cin + slabs - 1) / slabs;
    if (chunk % 2 && chunk < most) ++chunk;
    const int64_t chunks = (cin + chunk - 1) / chunk;
    const dim3 grid(unsigned(chunks), unsigned(std::min<int64_t>(cout, 65535)));
    detail::dispatch_bits("filter_to_krsc", type, [&](auto t) {
        using W = typename decltype(t)::type;
        filter_to_krsc_kernel<W><<<grid, detail::kThreads, 0, stream>>>(static_cast<const W*>(w), static_cast<W*>(out),
                                                                        cout, cin, taps, chunk);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
