// The kernels a GPU backend gives the ops layer: one method per op of ops.h, same arguments and meaning.
// The public functions in ops.h send a call here when its first tensor is on a device (one line at the top
// of each), so model code calls the same ops wherever its weights live. Tensors on a device carry the
// dtype the backend computes in (F16, BF16 or F32); outputs have their input's dtype. An operand on another
// device than the first is an InvalidArgument error naming both.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace kiln::ops {

enum class DeviceActivation { Silu, Gelu, GeluTanh, QuickGelu };

class DeviceOps {
public:
    virtual ~DeviceOps() = default;
    // Whether linear, conv2d and the fused convolutions here read weights of block format `weight` as they are;
    // otherwise the ops layer hands them a transient dequantized copy (ops/device_weight.h).
    virtual bool reads_blocks(DType weight) const {
        (void)weight;
        return false;
    }
    // The transient a product reads in place of the block-format weight w (ops/device_weight.h): w's values
    // dequantized to `dtype` on the device. A backend may lay them out as its products read them.
    virtual Tensor widen_weight(const Tensor& w, DType dtype) const { return w.to_device(w.backend(), dtype); }
    virtual Tensor linear(const Tensor& x, const Tensor& w, const Tensor* b) const = 0;
    // acc += linear(x, w, b); a backend without a fused form composes the two.
    virtual void linear_add_(Tensor& acc, const Tensor& x, const Tensor& w, const Tensor* b) const {
        add_(acc, linear(x, w, b));
    }
    virtual Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding) const = 0;
    virtual Tensor conv2d_group_norm_silu(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                          float eps, const Tensor& w, const Tensor* b, int stride,
                                          int padding) const = 0;
    // ops::conv2d_affine_silu: the affine as a 1x1 convolution with a diagonal filter (one product a pixel), then
    // SiLU and the convolution, where the backend has no fused form.
    virtual Tensor conv2d_affine_silu(const Tensor& x, const std::vector<float>& scale, const std::vector<float>& shift,
                                      const Tensor& w, const Tensor* b, int stride, int padding) const {
        const int64_t c = x.dim(1);
        Tensor diagonal({c, c, 1, 1});
        for (int64_t i = 0; i < c; ++i) diagonal[i * c + i] = scale[i];
        const Tensor shift_on_device = Tensor({c}, shift).to_device(x.backend(), x.dtype());
        Tensor y = conv2d(x, diagonal.to_device(x.backend(), x.dtype()), &shift_on_device, 1, 0);
        activation_(y, DeviceActivation::Silu);
        return conv2d(y, w, b, stride, padding);
    }
    // Per channel c of x [1, C, H, W], over its rows [row, row + rows): adds the sum and the sum of squares of
    // the values to sum[c] and sum_sq[c] (GroupNorm statistics gathered band by band,
    // models/vae/vae_tiled_decode.cpp), in double (CUDA, and here) or in float32 within chunks of at most 1024
    // values added in double (Vulkan). Where the backend has no kernel, the values come to the host for it.
    virtual void add_channel_sums(const Tensor& x, int64_t row, int64_t rows, std::vector<double>& sum,
                                  std::vector<double>& sum_sq) const {
        const Tensor host = x.to_host();
        const int64_t c = x.dim(1), plane = x.dim(2) * x.dim(3), w = x.dim(3);
        for (int64_t ch = 0; ch < c; ++ch) {
            const float* v = host.data() + ch * plane + row * w;
            double s = 0.0, q = 0.0;
            for (int64_t i = 0; i < rows * w; ++i) {
                s += v[i];
                q += double(v[i]) * v[i];
            }
            sum[ch] += s;
            sum_sq[ch] += q;
        }
    }
    // y += y_bias (per channel, may be null), then y += conv2d_group_norm_silu(x, ...); and the convolution of x's
    // nearest-2x upsampling. A backend without a fused form composes them.
    virtual void conv2d_group_norm_silu_add_(Tensor& y, const Tensor& x, int groups, const Tensor& gamma,
                                             const Tensor& beta, float eps, const Tensor& w, const Tensor* b,
                                             int stride, int padding, const Tensor* y_bias) const {
        if (y_bias) add_channel_bias_(y, per_image(*y_bias, y.dim(0)));
        add_(y, conv2d_group_norm_silu(x, groups, gamma, beta, eps, w, b, stride, padding));
    }
    // conv2d_group_norm_silu then add_channel_bias_(y, image_bias's columns [at, at + Cout)); composed where
    // there is no fused form.
    virtual Tensor conv2d_group_norm_silu_plus(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                               float eps, const Tensor& w, const Tensor* b, const Tensor& image_bias,
                                               int64_t at, int stride, int padding) const {
        Tensor y = conv2d_group_norm_silu(x, groups, gamma, beta, eps, w, b, stride, padding);
        add_channel_bias_(y, image_bias_columns(image_bias, at, y.dim(1)));
        return y;
    }
    virtual Tensor conv2d_upsample2x(const Tensor& x, const Tensor& w, const Tensor* b, int stride,
                                     int padding) const {
        return conv2d(upsample_nearest2x(x), w, b, stride, padding);
    }
    virtual Tensor group_norm(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                              float eps) const = 0;
    virtual Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) const = 0;
    virtual Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int heads, bool causal) const = 0;
    // attention() of the parts, split off with columns() where the backend has no kernel reading them in place.
    virtual Tensor attention_qkv(const Tensor& qkv, int heads) const {
        const int64_t c = qkv.dim(2) / 3;
        return attention(columns(qkv, 0, c), columns(qkv, c, c), columns(qkv, 2 * c, c), heads, false);
    }
    virtual Tensor attention_kv(const Tensor& q, const Tensor& kv, int heads, int64_t at) const {
        const int64_t c = q.dim(2);
        return attention(q, columns(kv, at, c), columns(kv, at + c, c), heads, false);
    }
    virtual Tensor columns(const Tensor& x, int64_t begin, int64_t count) const = 0;
    virtual void activation_(Tensor& x, DeviceActivation f) const = 0;
    virtual Tensor geglu(const Tensor& x) const = 0;
    virtual Tensor upsample_nearest2x(const Tensor& x) const = 0;
    virtual Tensor concat_channels(const Tensor& a, const Tensor& b) const = 0;
    virtual void add_(Tensor& a, const Tensor& b) const = 0;
    virtual void add_channel_bias_(Tensor& x, const Tensor& bias_nc) const = 0;
    virtual void scale_(Tensor& x, float s) const = 0;
    virtual Tensor nchw_to_nlc(const Tensor& x) const = 0;
    virtual Tensor nlc_to_nchw(const Tensor& x, int64_t h, int64_t w) const = 0;
    // nchw_to_nlc(group_norm(x, ...)) and y += nlc_to_nchw(tokens); a backend without a fused form composes them.
    virtual Tensor group_norm_to_nlc(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                     float eps) const {
        return nchw_to_nlc(group_norm(x, groups, gamma, beta, eps));
    }
    virtual void add_nlc_(Tensor& y, const Tensor& tokens) const { add_(y, nlc_to_nchw(tokens, y.dim(2), y.dim(3))); }
    virtual Tensor softmax_lastdim(const Tensor& x) const = 0;
    // timesteps: float32 [n] on the device.
    virtual Tensor timestep_embedding(const Tensor& timesteps, int dim, bool flip_sin_to_cos,
                                      float downscale_freq_shift, float max_period, DType out_type) const = 0;

protected:
    // bias [C] as add_channel_bias_'s [n, C]: the same row for every image.
    Tensor per_image(const Tensor& bias, int64_t n) const {
        const int64_t c = bias.numel();
        Tensor rows = bias.reshaped({1, c, 1});
        for (int64_t i = 1; i < n; ++i) rows = concat_channels(rows, bias.reshaped({1, c, 1}));
        return rows.reshaped({n, c});
    }
    // image_bias [N, W]'s columns [at, at + count) as a tensor of their own (image_bias itself where they are all
    // of it): what conv2d_group_norm_silu_plus adds where it is composed.
    Tensor image_bias_columns(const Tensor& image_bias, int64_t at, int64_t count) const {
        return at == 0 && count == image_bias.dim(1) ? image_bias : columns(image_bias, at, count);
    }
};

inline const DeviceOps& device_ops(const Tensor& t) { return t.backend().ops(); }

}  // namespace kiln::ops
