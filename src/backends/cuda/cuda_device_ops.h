// The ops of ops.h on the CUDA backend: checks the operands, allocates outputs from the backend and runs
// the kernels (kernels.h, attention.h) and cuBLASLt products (gemm.h). Compositions live here:
// linear = product + bias, conv2d = cuDNN on channels-last copies, cuDNN on NCHW, or im2col + product + bias
// (whichever its first call measures fastest; GroupNorm+SiLU fused into the transpose or the im2col),
// attention = flash kernel (F16, head dim <= 256) or products + softmax in blocks of queries.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
#include <vector>

#include "backends/cuda/attention.h"
#include "backends/cuda/cudnn_attention.h"
#include "backends/cuda/cudnn_conv.h"
#include "ops/device_ops.h"

namespace kiln::cuda {

class CudaBackend;

class CudaDeviceOps final : public ops::DeviceOps {
public:
    explicit CudaDeviceOps(CudaBackend& backend) : backend_(backend) {}
    Tensor widen_weight(const Tensor& w, DType dtype) const override;
    Tensor linear(const Tensor& x, const Tensor& w, const Tensor* b) const override;
    void linear_add_(Tensor& acc, const Tensor& x, const Tensor& w, const Tensor* b) const override;
    Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding) const override;
    Tensor conv2d_group_norm_silu(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps,
                                  const Tensor& w, const Tensor* b, int stride, int padding) const override;
    // Fused on the channels-last route, once a shape's first call has chosen it (the transposes read the small
    // image, or add onto y); the composition otherwise.
    Tensor conv2d_group_norm_silu_plus(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                       float eps, const Tensor& w, const Tensor* b, const Tensor& image_bias,
                                       int64_t at, int stride, int padding) const override;
    void conv2d_group_norm_silu_add_(Tensor& y, const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                     float eps, const Tensor& w, const Tensor* b, int stride, int padding,
                                     const Tensor* y_bias) const override;
    Tensor conv2d_upsample2x(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding) const override;
    Tensor group_norm(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps) const override;
    Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) const override;
    Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int heads, bool causal) const override;
    void activation_(Tensor& x, ops::DeviceActivation f) const override;
    Tensor geglu(const Tensor& x) const override;
    Tensor upsample_nearest2x(const Tensor& x) const override;
    Tensor concat_channels(const Tensor& a, const Tensor& b) const override;
    void add_(Tensor& a, const Tensor& b) const override;
    void add_channel_bias_(Tensor& x, const Tensor& bias_nc) const override;
    void scale_(Tensor& x, float s) const override;
    void add_channel_sums(const Tensor& x, int64_t row, int64_t rows, std::vector<double>& sum,
                          std::vector<double>& sum_sq) const override;
    Tensor nchw_to_nlc(const Tensor& x) const override;
    Tensor nlc_to_nchw(const Tensor& x, int64_t h, int64_t w) const override;
    Tensor attention_qkv(const Tensor& qkv, int heads) const override;
    Tensor attention_kv(const Tensor& q, const Tensor& kv, int heads, int64_t at) const override;
    Tensor columns(const Tensor& x, int64_t begin, int64_t count) const override;
    Tensor group_norm_to_nlc(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                             float eps) const override;
    void add_nlc_(Tensor& y, const Tensor& tokens) const override;
    Tensor softmax_lastdim(const Tensor& x) const override;
    Tensor timestep_embedding(const Tensor& timesteps, int dim, bool flip_sin_to_cos, float downscale_freq_shift,
                              float max_period, DType out_type) const override;

    // The convolution routes (conv_routed in the .cpp), and how many convolutions each has run: for tests and
    // diagnostics, since a route with no kernel for a shape falls back to im2col.
    enum class ConvRoute { Im2col, Cudnn, CudnnNhwc, FewOutputs };
    int64_t convolutions_on(ConvRoute route) const { return route_calls_[static_cast<size_t>(route)]; }

private:
    class Timed;
    void check_linear(const char* op, const Tensor& x, const Tensor& w, const Tensor* b) const;
    void project(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, bool accumulate) const;
    // group_norm_stats into stats [n, groups, 2], in chunks through a pooled workspace where groups are large.
    void stats_of_groups(const Tensor& x, int64_t n, int64_t c, int64_t hw, int groups, float eps, Tensor& stats) const;
    Tensor stats_for_conv(const char* op, const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                          float eps) const;
    struct ConvCall {
        const Tensor& x;
        const Tensor& w;
        const Tensor* b;
        const Tensor *stats, *gamma, *beta;  // set for a fused GroupNorm+SiLU
        int groups;
        ConvShape shape;
        bool upsampled = false;   // x is half the shape's size: read as its nearest-2x upsampling (NHWC route)
        bool accumulate = false;  // y += the convolution (NHWC route)
        const Tensor* image_bias = nullptr;  // [n, >= cout] added after the bias (NHWC route)
        int64_t image_bias_at = 0;           // from this column
        const Tensor* accumulate_bias = nullptr;  // [cout], added to y before the sum (NHWC route)
    };
    void conv_routed(const ConvCall& c, Tensor& y) const;
    void run_conv_route(ConvRoute route, const ConvCall& c, Tensor& y) const;
    std::function<void*(size_t)> scratch_in(std::vector<Tensor>& keep) const;
    void conv_cudnn(const ConvCall& c, Tensor& y) const;
    void conv_cudnn_nhwc(const ConvCall& c, Tensor& y) const;
    using RouteKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, bool, bool>;
    static RouteKey route_key(const ConvShape& sh, bool fused_norm);
    // The shape's route is known to be the NHWC one (its first call has measured it).
    bool on_nhwc_route(const ConvShape& sh, bool fused_norm) const;
    ConvShape conv_shape(int64_t n, int64_t cin, int64_t h, int64_t w, const Tensor& weight, int stride, int padding,
                         DType type) const;
    void conv_im2col(const ConvCall& c, Tensor& y) const;
    // A convolution filter in the layout a route reads (channels-last for the NHWC route, PyTorch's for the
    // others), its storage or a copy kept alive in `keep` for the call.
    const void* channels_last_filter(const Tensor& w, Tensor& keep) const;
    const void* pytorch_filter(const Tensor& w, Tensor& keep) const;
    void conv_few_outputs(const ConvCall& c, Tensor& y) const;
    struct ConvFusion {  // {} (value-initialised): neither
        bool upsampled;      // convolve x's nearest-2x upsampling
        Tensor* accumulate;  // add the result onto this instead of returning it
        const Tensor* image_bias;  // [n, W]: add_channel_bias_ of its columns [at, at + cout) onto the result
        int64_t image_bias_at;
        const Tensor* accumulate_bias;  // [cout]: added to *accumulate per channel before the result is summed on
    };
    Tensor conv(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding, const Tensor* norm_stats,
                const Tensor* gamma, const Tensor* beta, int groups, ConvFusion fusion = {}) const;
    Tensor attention_by_products(const Tensor& q, const Tensor& k, const Tensor& v, int heads, bool causal) const;
    bool flash_fits(DType type, int64_t c, int heads, int64_t lk) const;
    Tensor flash(DType type, const void* q, const void* k, const void* v, int64_t b, int64_t lq, int64_t lk, int64_t c,
                 int heads, bool causal, AttentionStrides strides) const;

    CudaBackend& backend_;
    mutable std::map<RouteKey, ConvRoute> routes_;
    mutable std::array<int64_t, 4> route_calls_{};
    // Per attention shape (non-causal, fp16): whether cuDNN's attention won its first call.
    mutable std::map<CudnnAttentionShape, bool> attention_on_cudnn_;
};

}  // namespace kiln::cuda
