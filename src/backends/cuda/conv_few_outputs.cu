// A direct 3x3 convolution for layers with at most four output channels (the VAE's last convolution: 128
// channels in, 3 out, at the image's full size). cuDNN's kernels and im2col's product tile the output
// channels by 64 or more, so such a layer ran at a few per cent of the GPU (SDXL's 1024x1024: 0.9 ms for 7
// GFLOP, most of it padding). Here a block takes a 32 x 16 tile of output pixels of one image, two rows a
// thread; for each run of 8 input channels it stages the tile's input (with its 1-pixel border) in shared
// memory, GroupNorm+SiLU applied as it reads where the convolution fuses them (im2col's expression exactly;
// the border outside the image stays 0, as the padding of the normalised input is), and the filter taps;
// every thread then adds its pixels' products in float. One rounding on the store, after the bias.
// Where the image has too few tiles to fill the GPU (the UNet's last convolution: 320 channels at 64x64, 16
// tiles), the channel runs are split over `splits` blocks per tile: each writes its float partial sums to a
// workspace, and a second kernel adds the splits in order, adds the bias and rounds (a fixed order: the same
// result every run).
#include "backends/cuda/activation_math.cuh"
#include "backends/cuda/kernel_common.cuh"
#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

constexpr int kTileW = 32, kTileRows = 8, kRowsPerThread = 2, kTileH = kTileRows * kRowsPerThread;
constexpr int kChanBlock = 8, kTaps = 9;
constexpr int kInW = kTileW + 2, kInH = kTileH + 2;

template <class T>
__global__ void __launch_bounds__(kTileW * kTileRows)
    conv_few_outputs_kernel(const T* x, const T* w, const T* bias, T* out, int64_t n, int cin, int h, int wd,
                            int cout, int padding, int oh, int ow, const float* stats, const T* gamma, const T* beta,
                            int channels_per_group, int splits, int runs_per_split, float* partial) {
    __shared__ float in[kChanBlock][kInH][kInW + 1];
    __shared__ float4 taps[kChanBlock][kTaps];  // the 4 output channels' weights of one input channel and tap
    __shared__ float norm[kChanBlock][4];       // mean, rstd, gamma, beta of the run's channels
    const int tx = threadIdx.x, ty = threadIdx.y, flat = ty * kTileW + tx;
    const int ox = blockIdx.x * kTileW + tx, oy0 = blockIdx.y * kTileH + ty * kRowsPerThread;
    const int ix0 = blockIdx.x * kTileW - padding, iy0 = blockIdx.y * kTileH - padding;
    const int groups = stats ? cin / channels_per_group : 0;
    for (int64_t zb = blockIdx.z; zb < n * splits; zb += gridDim.z) {
        const int64_t b = zb / splits;
        const int split = int(zb - b * splits);
        const T* src = x + b * cin * int64_t(h) * wd;
        float acc[kRowsPerThread][4] = {};
        const int c_end = min(cin, (split + 1) * runs_per_split * kChanBlock);
        for (int c0 = split * runs_per_split * kChanBlock; c0 < c_end; c0 += kChanBlock) {
            if (stats && flat < kChanBlock && c0 + flat < cin) {
                const int ch = c0 + flat;
                const int64_t g = b * groups + ch / channels_per_group;
                norm[flat][0] = stats[2 * g];
                norm[flat][1] = stats[2 * g + 1];
                norm[flat][2] = detail::to_float(gamma[ch]);
                norm[flat][3] = detail::to_float(beta[ch]);
            }
            if (flat < kChanBlock * kTaps) {
                const int cc = flat / kTaps, tap = flat - cc * kTaps, ch = c0 + cc;
                float v[4];
#pragma unroll
                for (int o = 0; o < 4; ++o)  // unrolled: v stays in registers
                    v[o] = o < cout && ch < cin ? detail::to_float(w[(int64_t(o) * cin + ch) * kTaps + tap]) : 0.0f;
                taps[cc][tap] = make_float4(v[0], v[1], v[2], v[3]);
            }
            __syncthreads();  // norm[] is read below
            for (int i = flat; i < kChanBlock * kInH * kInW; i += kTileW * kTileRows) {
                const int cc = i / (kInH * kInW), r = i / kInW - cc * kInH, col = i - (cc * kInH + r) * kInW;
                const int ch = c0 + cc, iy = iy0 + r, ix = ix0 + col;
                float v = 0.0f;  // outside the image, or past the last channel
                if (ch < cin && iy >= 0 && iy < h && ix >= 0 && ix < wd) {
                    v = detail::to_float(src[(int64_t(ch) * h + iy) * wd + ix]);
                    if (stats) v = detail::silu((v - norm[cc][0]) * norm[cc][1] * norm[cc][2] + norm[cc][3]);
                }
                in[cc][r][col] = v;
            }
            __syncthreads();
#pragma unroll
            for (int cc = 0; cc < kChanBlock; ++cc)
#pragma unroll
                for (int ky = 0; ky < 3; ++ky)
#pragma unroll
                    for (int kx = 0; kx < 3; ++kx) {
                        const float4 t = taps[cc][ky * 3 + kx];
#pragma unroll
                        for (int rr = 0; rr < kRowsPerThread; ++rr) {
                            const float v = in[cc][ty * kRowsPerThread + rr + ky][tx + kx];
                            acc[rr][0] += v * t.x;
                            acc[rr][1] += v * t.y;
                            acc[rr][2] += v * t.z;
                            acc[rr][3] += v * t.w;
                        }
                    }
            __syncthreads();  // in[], taps[] and norm[] are refilled for the next run
        }
#pragma unroll
        for (int rr = 0; rr < kRowsPerThread; ++rr) {
            const int oy = oy0 + rr;
#pragma unroll
            for (int o = 0; o < 4; ++o)  // unrolled: acc stays in registers
                if (o < cout && ox < ow && oy < oh) {
                    const int64_t at = ((b * cout + o) * oh + oy) * int64_t(ow) + ox;
                    if (partial) {
                        partial[split * n * cout * oh * int64_t(ow) + at] = acc[rr][o];
                    } else {
                        const float add = bias ? detail::to_float(bias[o]) : 0.0f;
                        out[at] = detail::from_float<T>(acc[rr][o] + add);
                    }
                }
        }
    }
}

// out [n, cout, plane] = the splits' partial sums added in order, plus the bias, rounded once.
template <class T>
__global__ void add_splits_kernel(const float* partial, const T* bias, T* out, int64_t n, int64_t cout, int64_t plane,
                                  int splits) {
    const int64_t count = n * cout * plane;
    for (int64_t i = detail::grid_first(); i < count; i += detail::grid_step()) {
        float sum = partial[i];
        for (int s = 1; s < splits; ++s) sum += partial[s * count + i];
        const float add = bias ? detail::to_float(bias[i / plane % cout]) : 0.0f;
        out[i] = detail::from_float<T>(sum + add);
    }
}

}  // namespace

int conv_few_outputs_splits(int64_t n, int64_t cin, int64_t h, int64_t wd, int padding, int multiprocessors) {
    const int64_t oh = h + 2 * padding - 2, ow = wd + 2 * padding - 2;
    if (oh <= 0 || ow <= 0 || cin <= 0) return 1;
    const int64_t tiles = (ow + kTileW - 1) / kTileW * ((oh + kTileH - 1) / kTileH) * n;
    const int64_t runs = (cin + kChanBlock - 1) / kChanBlock;
    // Two blocks a multiprocessor, then whole runs per split (the last split may take fewer).
    const int64_t want = std::clamp<int64_t>((2 * int64_t(multiprocessors) + tiles - 1) / tiles, 1, runs);
    const int64_t per = (runs + want - 1) / want;
    return int((runs + per - 1) / per);
}

bool conv_few_outputs_fits(int64_t cout, int64_t k, int64_t stride, int64_t padding, int64_t h, int64_t w,
                           int64_t cin) {
    constexpr int64_t kInt = int64_t(1) << 30;
    // Output rows fill at most the grid's 65535 tiles of 16.
    return cout >= 1 && cout <= 4 && k == 3 && stride == 1 && padding >= 0 && padding <= 2 && h <= 65535 * 16 - 4 &&
           w < kInt && cin < kInt;
}

void conv_few_outputs(const void* x, const void* w, const void* bias, void* out, DType type, int64_t n, int64_t cin,
                      int64_t h, int64_t wd, int64_t cout, int padding, const Im2colNorm* norm, cudaStream_t stream,
                      int splits, float* workspace) {
    require(conv_few_outputs_fits(cout, 3, 1, padding, h, wd, cin), ErrorKind::InvalidArgument,
            "kiln::cuda::conv_few_outputs: " + std::to_string(cout) + " outputs, padding " + std::to_string(padding) +
                ": only 3x3 filters of stride 1 with 1 to 4 outputs and padding up to 2");
    const int64_t oh = h + 2 * padding - 2, ow = wd + 2 * padding - 2;
    const int64_t count = detail::checked_count("conv_few_outputs", {n, cin, h, wd});
    detail::dispatch("conv_few_outputs", type, [](auto) {});
    if (count == 0 || oh <= 0 || ow <= 0) return;
    detail::check_pointer("conv_few_outputs", "x", x);
    detail::check_pointer("conv_few_outputs", "w", w);
    detail::check_pointer("conv_few_outputs", "out", out);
    if (norm) {
        require(norm->groups >= 1 && cin % norm->groups == 0, ErrorKind::InvalidArgument,
                "kiln::cuda::conv_few_outputs: " + std::to_string(norm->groups) + " groups must divide the " +
                    std::to_string(cin) + " channels");
        require(norm->silu, ErrorKind::InvalidArgument,
                "kiln::cuda::conv_few_outputs: applies GroupNorm+SiLU only (silu unset)");
        detail::check_pointer("conv_few_outputs", "stats", norm->stats);
        detail::check_pointer("conv_few_outputs", "gamma", norm->gamma);
        detail::check_pointer("conv_few_outputs", "beta", norm->beta);
    }
    const int64_t runs = (cin + kChanBlock - 1) / kChanBlock;
    require(splits >= 1 && splits <= runs && (splits == 1 || workspace), ErrorKind::InvalidArgument,
            "kiln::cuda::conv_few_outputs: " + std::to_string(splits) + " splits of " + std::to_string(runs) +
                " channel runs" + (splits > 1 && !workspace ? " without a workspace" : ""));
    const int per = int((runs + splits - 1) / splits);
    const dim3 grid(unsigned((ow + kTileW - 1) / kTileW), unsigned((oh + kTileH - 1) / kTileH),
                    unsigned(std::min<int64_t>(n * splits, 65535)));
    detail::dispatch("conv_few_outputs", type, [&](auto t) {
        using T = typename decltype(t)::type;
        conv_few_outputs_kernel<T><<<grid, dim3(kTileW, kTileRows), 0, stream>>>(
            static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias), static_cast<T*>(out), n,
            int(cin), int(h), int(wd), int(cout), padding, int(oh), int(ow), norm ? norm->stats : nullptr,
            norm ? static_cast<const T*>(norm->gamma) : nullptr, norm ? static_cast<const T*>(norm->beta) : nullptr,
            norm ? int(cin / norm->groups) : 1, splits, per, splits > 1 ? workspace : nullptr);
        if (splits > 1)
            add_splits_kernel<T><<<detail::blocks_for(n * cout * oh * ow), detail::kThreads, 0, stream>>>(
                workspace, static_cast<const T*>(bias), static_cast<T*>(out), n, cout, oh * ow, splits);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
