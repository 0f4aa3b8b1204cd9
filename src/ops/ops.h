// CPU ops on float32 tensors with PyTorch's semantics (NCHW, row-major, linear(x) = x W^T + b).
// Matrix products go to OpenBLAS sgemm, everything else runs in OpenMP loops the compiler vectorises.
// Every shape problem throws kiln::Error (InvalidArgument) naming the op and the shapes.
// src/ops/ref/ holds plain reference versions of every op, used by the tests.
//
// Threads: linear and conv2d run sgemm on OpenBLAS's pool; everything else, attention included (whose
// blocks call sgemm with OpenBLAS set to one thread), runs on OpenMP's (OMP_NUM_THREADS). The two never
// run at once. Call the ops from one thread at a time. On virtual machines whose host deschedules
// spinning vCPUs, libgomp's default spin-then-sleep wait can cost a scheduler tick (~4 ms) per parallel
// region; OMP_WAIT_POLICY=passive avoids that (measured on the 2-core development VM).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/op_list.h"
#include "ops/op_observer.h"

namespace kiln::ops {

// x [..., in], w [out, in], b [out] or nullptr -> [..., out].
Tensor linear(const Tensor& x, const Tensor& w, const Tensor* b);
// acc += linear(x, w, b): a residual connection after a projection. On the CPU exactly linear then add_; a GPU
// may add acc in the product's epilogue (CUDA: one rounding of product + bias + acc, no pass of its own).
void linear_add_(Tensor& acc, const Tensor& x, const Tensor& w, const Tensor* b);

// x [N,C,H,W], w [O,C,kh,kw], b [O] or nullptr; zero padding on all four sides -> [N,O,Ho,Wo] with
// Ho = (H + 2*padding - kh) / stride + 1.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride = 1, int padding = 0);

// conv2d(silu(group_norm(x, groups, gamma, beta, eps)), w, b, ...) with exactly that result, without the
// normalised copy of x: im2col applies the norm and SiLU as it reads (a ResNet block's memory peak).
// Timed as conv2d (plus the statistics pass, as group_norm).
Tensor conv2d_group_norm_silu(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps,
                              const Tensor& w, const Tensor* b, int stride = 1, int padding = 0);

// conv2d(silu(x * scale[c] + shift[c]), w, b, ...) per channel c (scale and shift hold x's C values, the same for
// every image): a GroupNorm whose statistics were gathered elsewhere (a tiled VAE decode normalises each tile
// with the whole image's), as group_norm's scale and shift (detail::group_norm_scale_shift). On the CPU im2col
// applies them as it reads, as conv2d_group_norm_silu; a GPU without a fused form composes a 1x1 convolution with
// a diagonal filter (the affine, rounded to its dtype), SiLU and the convolution.
Tensor conv2d_affine_silu(const Tensor& x, const std::vector<float>& scale, const std::vector<float>& shift,
                          const Tensor& w, const Tensor* b, int stride = 1, int padding = 0);

// conv2d_group_norm_silu(x, ...) then add_channel_bias_(y, image_bias [N, Cout]) with exactly those bits: a
// ResnetBlock's first convolution with its time embedding, which a GPU adds as the convolution's output is
// written rather than in a pass of its own. image_bias may be wider, [N, W]: its columns [at, at + Cout) are
// added (the UNet makes every block's time projection in one product, and a copy of a block's columns would be
// a pass, and on CUDA a graph node, of its own).
Tensor conv2d_group_norm_silu_plus(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps,
                                   const Tensor& w, const Tensor* b, const Tensor& image_bias, int64_t at = 0,
                                   int stride = 1, int padding = 0);

// y += conv2d_group_norm_silu(x, ...) with exactly add_'s bits, without the convolution's output: each tile
// of it is added as soon as it is made (a ResNet block's residual sum). y is [N, O, Ho, Wo] and not x. With
// y_bias [O], y's channels get it added first, as conv2d's bias would have (a ResNet's shortcut convolution made
// without its bias, which a GPU then adds as it sums conv2's output onto it rather than in a pass of its own).
void conv2d_group_norm_silu_add_(Tensor& y, const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                 float eps, const Tensor& w, const Tensor* b, int stride = 1, int padding = 0,
                                 const Tensor* y_bias = nullptr);

// conv2d_group_norm_silu(x, ...) with exactly its bits, written over x (move it in): each output tile
// goes into x's storage once no later tile reads the input under it, so input and output never both
// exist whole. The result keeps all of x's storage until it is freed. Applies to one image [1, C, H, W],
// stride 1, a kernel of 2 * padding + 1 (the output the input's size), O <= C, and a weight converted in
// one tile (tuning.h); anything else is computed into a new tensor, as conv2d_group_norm_silu.
Tensor conv2d_group_norm_silu_inplace(Tensor x, int groups, const Tensor& gamma, const Tensor& beta, float eps,
                                      const Tensor& w, const Tensor* b, int stride = 1, int padding = 0);

// conv2d(upsample_nearest2x(x), w, b, ...) with exactly that result, without the upsampled copy of x (4x
// its size): im2col reads each pixel of x for its 2x2 block (the VAE decoder's memory peak). Timed as conv2d.
Tensor conv2d_upsample2x(const Tensor& x, const Tensor& w, const Tensor* b, int stride = 1, int padding = 0);

// x [N,C,...]; statistics over each group of C/groups channels (and all trailing dims); gamma, beta [C].
Tensor group_norm(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps);

// Normalises over the last dim D; gamma, beta [D].
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps);

// q [B,Lq,H*D], k and v [B,Lk,H*D] -> [B,Lq,H*D]: softmax(q k^T / sqrt(D)) v per head, in float32.
// causal masks key j for query i when j > i (top-left aligned, as torch's is_causal).
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int heads, bool causal = false);
// Attention over projections that one product made side by side: qkv [B, L, 3C] holds q | k | v of each token
// (self-attention); kv [B, Lk, W] holds k | v at columns [at, at + 2C) (cross-attention, with q [B, Lq, C]:
// W = 2C, or the k | v of several attentions made by one product). Exactly attention() of the parts (columns
// below); a GPU reads them where they are.
Tensor attention_qkv(const Tensor& qkv, int heads);
Tensor attention_kv(const Tensor& q, const Tensor& kv, int heads, int64_t at = 0);
// Columns [begin, begin + count) of x's last dim: [..., W] -> [..., count], a copy.
Tensor columns(const Tensor& x, int64_t begin, int64_t count);

// In-place activations.
void silu_(Tensor& x);        // x * sigmoid(x)
void gelu_(Tensor& x);        // x * Phi(x), the exact (erf) form
void gelu_tanh_(Tensor& x);   // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void quick_gelu_(Tensor& x);  // x * sigmoid(1.702 x), OpenAI CLIP's

// x [..., 2n] -> x[..., :n] * gelu(x[..., n:]) (diffusers' GEGLU after its projection).
Tensor geglu(const Tensor& x);

// [N,C,H,W] -> [N,C,2H,2W], each pixel repeated 2x2.
Tensor upsample_nearest2x(const Tensor& x);

// Concatenates along dim 1; a [N,Ca,...] and b [N,Cb,...] agree in every other dim (rank >= 2).
Tensor concat_channels(const Tensor& a, const Tensor& b);

void add_(Tensor& a, const Tensor& b);                       // a += b, same shape
void add_channel_bias_(Tensor& x, const Tensor& bias_nc);    // x [N,C,...] += bias [N,C] over the rest
void scale_(Tensor& x, float s);                             // x *= s

Tensor nchw_to_nlc(const Tensor& x);                         // [N,C,H,W] -> [N,H*W,C]
Tensor nlc_to_nchw(const Tensor& x, int64_t h, int64_t w);   // [N,h*w,C] -> [N,C,h,w]
// A transformer's way in and out of the conv world: nchw_to_nlc(group_norm(x, ...)), and y [N,C,H,W] +=
// nlc_to_nchw(tokens [N,H*W,C]), each with exactly the composition's bits; a GPU does each as one pass.
Tensor group_norm_to_nlc(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps);
void add_nlc_(Tensor& y, const Tensor& tokens);

Tensor softmax_lastdim(const Tensor& x);

// diffusers' get_timestep_embedding (scale 1): [len(timesteps), dim], float32 arithmetic in torch's order.
Tensor timestep_embedding(const std::vector<float>& timesteps, int dim, bool flip_sin_to_cos,
                          float downscale_freq_shift, float max_period = 10000);
// The same for a float32 tensor of timesteps (any shape, read flat); on a device the embedding is made there,
// stored as out_type. On the host out_type must be F32.
Tensor timestep_embedding(const Tensor& timesteps, int dim, bool flip_sin_to_cos, float downscale_freq_shift,
                          DType out_type, float max_period = 10000);

// x moved to where `like` lives, in the dtype ops compute in there: like's dtype on a device, float32 on the
// host (a host float32 x comes back as it is). Model code calls this on its inputs, so that it runs wherever
// its weights were loaded without naming a device.
Tensor on_device_of(Tensor x, const Tensor& like);

}  // namespace kiln::ops
