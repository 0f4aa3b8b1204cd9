// The CUDA backend's plain kernels (no tensor cores: HIP compiles them too), on raw device pointers.
// Each enqueues on `stream` and returns; a launch failure throws kiln::Error. Element types are kiln's
// storage dtypes (F32, F16, BF16); values are read into float, computed in float and rounded once when
// stored, and every sum or statistic (norms, softmax) is accumulated in float. Shapes follow the CPU ops of
// the same name in ops/ops.h, which are the reference each kernel is tested against (tests/cuda).
// n == 0 (or any zero extent) is a no-op.
#pragma once
#include <cstdint>

#include "backends/cuda/gpu_runtime.h"
#include "core/dtype.h"

namespace kiln::cuda {

// dst[i] = src[i] rounded to dst_type (round to nearest even); src and dst must not overlap unless equal types.
// A block-format src (Q8_0 ... Q6_K, n whole blocks' values) is dequantized: see dequantize below.
void convert(const void* src, DType src_type, void* dst, DType dst_type, int64_t n, cudaStream_t stream);
// dst (F32, F16 or BF16) = the n values of the blocks at src (is_block_quantized(src_type)), each as the host's
// decoder computes it in float32 (bit for bit), rounded once to dst_type (dequantize.cu).
void dequantize(const void* src, DType src_type, void* dst, DType dst_type, int64_t n, cudaStream_t stream);
// A block-format filter [cout, cin, taps] dequantized into [cout, taps, cin] (channels-last), as dequantize does
// each value; where dequantize_krsc_supported(cin, taps): cin a multiple of 32, at most kMaxKrscTaps taps (the
// decoded run of channels is staged in shared memory).
constexpr int64_t kMaxKrscTaps = 25;
bool dequantize_krsc_supported(int64_t cin, int64_t taps);
void dequantize_krsc(const void* src, DType src_type, void* dst, DType dst_type, int64_t cout, int64_t cin,
                     int64_t taps, cudaStream_t stream);

// In place, x[i] = f(x[i]).
enum class Activation { Silu, Gelu, GeluTanh, QuickGelu };
void activation(void* x, DType type, int64_t n, Activation f, cudaStream_t stream);

void add(void* a, const void* b, DType type, int64_t n, cudaStream_t stream);  // a += b
// For each of `planes` runs of `length` values `stride` apart from x: their sum and sum of squares, accumulated
// in double, into sums[2p] and sums[2p + 1] (device memory, 2 * planes doubles).
void plane_sums(const void* x, DType type, int64_t planes, int64_t stride, int64_t length, double* sums,
                cudaStream_t stream);
void scale(void* x, DType type, int64_t n, float s, cudaStream_t stream);      // x *= s
// x [n, c, inner] += bias [n, c] broadcast over inner; with per_channel, bias [c] for every image.
void add_channel_bias(void* x, const void* bias, DType type, int64_t n, int64_t c, int64_t inner,
                      cudaStream_t stream, bool per_channel = false);

// x [rows, 2*half] -> out [rows, half]: out = a * gelu(g) with a = x[:, :half], g = x[:, half:] (diffusers' GEGLU).
void geglu(const void* x, void* out, DType type, int64_t rows, int64_t half, cudaStream_t stream);

// x [planes, h, w] -> out [planes, 2h, 2w].
void upsample_nearest2x(const void* x, void* out, DType type, int64_t planes, int64_t h, int64_t w,
                        cudaStream_t stream);
// a [n, ca, inner], b [n, cb, inner] -> out [n, ca + cb, inner].
void concat_channels(const void* a, const void* b, void* out, DType type, int64_t n, int64_t ca, int64_t cb,
                     int64_t inner, cudaStream_t stream);
// [n, c, hw] <-> [n, hw, c] (to_nhwc and from_nhwc below, without their options).
void nchw_to_nlc(const void* x, void* out, DType type, int64_t n, int64_t c, int64_t hw, cudaStream_t stream);
void nlc_to_nchw(const void* x, void* out, DType type, int64_t n, int64_t hw, int64_t c, cudaStream_t stream);

// Row-wise over the last dim of [rows, cols]. gamma/beta [cols] have the storage type of x.
void softmax_lastdim(const void* x, void* out, DType type, int64_t rows, int64_t cols, cudaStream_t stream);
// The same over float32 rows, the result stored as out_type (attention's probabilities for its second product).
void softmax_f32_rows_to(const float* x, void* out, DType out_type, int64_t rows, int64_t cols, cudaStream_t stream);
void layer_norm(const void* x, const void* gamma, const void* beta, void* out, DType type, int64_t rows,
                int64_t cols, float eps, cudaStream_t stream);

// GroupNorm as statistics then an affine per (image, channel):
// stats [n * groups * 2] = (mean, 1/sqrt(var + eps)) of each group, biased variance, in float.
// With a workspace of group_norm_stats_workspace(...) floats (0: none is needed), groups of more than
// 8192 values are reduced in chunks of 512 by many warps (the same sums, split: within the same error bound);
// without one, one block per group.
void group_norm_stats(const void* x, DType type, int64_t n, int64_t c, int64_t hw, int groups, float eps,
                      float* stats, cudaStream_t stream, float* workspace = nullptr);
int64_t group_norm_stats_workspace(int64_t n, int64_t c, int64_t hw, int groups);
// out = (x - mean) * rstd * gamma + beta, then SiLU if silu; out may equal x. gamma/beta [c] in x's type.
void group_norm_apply(const void* x, const float* stats, const void* gamma, const void* beta, void* out, DType type,
                      int64_t n, int64_t c, int64_t hw, int groups, bool silu, cudaStream_t stream);

// The column matrix of one image for a k x k convolution: x [c, h, w] -> col [c * k * k, count], holding
// output pixels first .. first + count - 1 of the oh x ow output (row-major), zero where the window falls in
// the padding. With norm (stats and gamma/beta as for group_norm_apply, for this one image: stats points at
// its groups), each value read from x is normalised and passed through SiLU first (the padding stays 0),
// which fuses GroupNorm+SiLU into the convolution as the CPU op conv2d_group_norm_silu does.
struct Im2colNorm {
    const float* stats = nullptr;  // [groups * 2] for this image
    const void* gamma = nullptr;
    const void* beta = nullptr;
    int groups = 0;
    bool silu = true;  // false (to_nhwc only): GroupNorm alone, for a transformer's way in (group_norm_to_nlc)
};
void im2col(const void* x, void* col, DType type, int64_t c, int64_t h, int64_t w, int k, int stride, int padding,
            int64_t oh, int64_t ow, int64_t first, int64_t count, const Im2colNorm* norm, cudaStream_t stream);

// Around a channels-last convolution (the cuDNN NHWC route): x [n, c, hw] -> out [n, hw, c], with GroupNorm+SiLU
// applied to each value read when norm is given (norm->stats then covers all n images: [n * groups * 2]); with
// upsampled_width > 0, x is [n, c, hw / 4] and is read as its nearest-2x upsampling of that width (hw its
// pixels). x [n, hw, c] -> out [n, c, hw] plus bias [c] (null: none) then, rounded again, image_bias [n, c]
// (null: none, as add_channel_bias; its rows image_bias_stride values apart, 0 meaning c), or with accumulate,
// out += that (the rounded value added and rounded again, as add_; out_bias [c], if set, added to out first and
// rounded, as add_channel_bias). A filter [cout, cin, taps] -> [cout, taps, cin].
void to_nhwc(const void* x, void* out, DType type, int64_t n, int64_t c, int64_t hw, const Im2colNorm* norm,
             cudaStream_t stream, int64_t upsampled_width = 0);
void from_nhwc(const void* x, const void* bias, void* out, DType type, int64_t n, int64_t hw, int64_t c,
               cudaStream_t stream, bool accumulate = false, const void* image_bias = nullptr,
               int64_t image_bias_stride = 0, const void* out_bias = nullptr);
void filter_to_krsc(const void* w, void* out, DType type, int64_t cout, int64_t cin, int64_t taps,
                    cudaStream_t stream);

// A 3x3 convolution of stride 1 with 1 to 4 output channels (conv_few_outputs.cu): y [n, cout, oh, ow] =
// conv(x [n, cin, h, w], w [cout, cin, 3, 3]) + bias (may be null), float sums, one rounding; with `norm`,
// of GroupNorm+SiLU(x), norm->stats then holding [n * groups * 2] (every image's, as to_nhwc's).
// conv_few_outputs_fits says whether a shape is one it takes (padding up to 2, sides within its grid).
// With splits > 1 (conv_few_outputs_splits: enough blocks for the GPU), the input channels are split over that
// many blocks per tile, through a float workspace of splits * n * cout * oh * ow values.
bool conv_few_outputs_fits(int64_t cout, int64_t k, int64_t stride, int64_t padding, int64_t h, int64_t w,
                           int64_t cin);
int conv_few_outputs_splits(int64_t n, int64_t cin, int64_t h, int64_t wd, int padding, int multiprocessors);
void conv_few_outputs(const void* x, const void* w, const void* bias, void* out, DType type, int64_t n, int64_t cin,
                      int64_t h, int64_t wd, int64_t cout, int padding, const Im2colNorm* norm, cudaStream_t stream,
                      int splits = 1, float* workspace = nullptr);

// out [n, dim]: diffusers' get_timestep_embedding of the float32 timesteps [n] (a device array), as the CPU op
// ops::timestep_embedding computes it (same argument order of sin/cos, same float arithmetic).
void timestep_embedding(const float* timesteps, void* out, DType type, int64_t n, int dim, bool flip_sin_to_cos,
                        float freq_shift, cudaStream_t stream);

// Sets *flag (device int) to 1 if any of x's n values is NaN or infinite; leaves it alone otherwise.
void find_nonfinite(const void* x, DType type, int64_t n, int* flag, cudaStream_t stream);

}  // namespace kiln::cuda
