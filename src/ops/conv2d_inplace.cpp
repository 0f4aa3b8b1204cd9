// The fused GroupNorm+SiLU convolution with its output going somewhere other than a new tensor
// (conv2d_impl.h, ConvTileSink), for the VAE's ResNet blocks at full resolution, where each
// activation is 128-256 MiB:
//  - conv2d_group_norm_silu_add_: y += conv(x), each output tile added as soon as it is made, so the
//    block's second convolution never exists whole next to its residual;
//  - conv2d_group_norm_silu_inplace: the output written over its own input, each tile as soon as no
//    later tile reads what it covers, so a block's first convolution needs no second buffer.
// Both make conv2d_group_norm_silu's sgemm calls with C moved to scratch, so the values are its bits.
#include <algorithm>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "ops/checks.h"
#include "ops/conv2d_impl.h"
#include "ops/device_ops.h"
#include "ops/device_weight.h"
#include "ops/ops.h"
#include "ops/parallel.h"
#include "ops/tuning.h"
#include "ops/weight_rows.h"

namespace kiln::ops {

namespace {

detail::InputNorm input_norm(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps) {
    detail::InputNorm norm;
    OpScope stats(OpKind::GroupNorm);
    detail::group_norm_affine(x, groups, gamma, beta, eps, norm.scale, norm.shift);
    return norm;
}

// y[n, o, p] = y[n, o, p] + tile value: add_'s one rounding, the operands in the other order (exact).
class AddInto final : public detail::ConvTileSink {
public:
    explicit AddInto(Tensor& y) : y_(y.data()), channels_(y.dim(1)), pixels_(y.dim(2) * y.dim(3)) {}
    void take(int64_t n, int64_t o0, int64_t oc, int64_t p0, int64_t p1, const float* tile) override {
        const int64_t cols = p1 - p0;
        detail::parallel_for(oc, cols, [&](int64_t begin, int64_t end) {
            for (int64_t c = begin; c < end; ++c) {
                float* dst = y_ + (n * channels_ + o0 + c) * pixels_ + p0;
                const float* src = tile + c * cols;
                for (int64_t j = 0; j < cols; ++j) dst[j] = dst[j] + src[j];
            }
        });
    }

private:
    float* y_;
    int64_t channels_, pixels_;
};

// Writes the output [O, P] of a stride-1 size-preserving convolution of one image over the front of
// its input [C, P] (O <= C): output pixel q of channel o replaces input pixel q of channel o. Tiles
// arrive in pixel order; tiles after [p0, p1) read input rows from p1's row minus the padding on, so
// pixels before that row are free to overwrite. The rest waits in copies (a few rows).
class OverInput final : public detail::ConvTileSink {
public:
    OverInput(float* x, int64_t out_channels, int64_t width, int64_t pixels, int64_t padding)
        : x_(x), channels_(out_channels), width_(width), pixels_(pixels), padding_(padding) {}

    void take(int64_t, int64_t, int64_t, int64_t p0, int64_t p1, const float* tile) override {
        Pending t{p0, p1, detail::scratch_floats(channels_ * (p1 - p0), "conv2d_group_norm_silu_inplace")};
        std::copy(tile, tile + channels_ * (p1 - p0), t.values.get());
        pending_.push_back(std::move(t));
        const int64_t free_rows = p1 / width_ - padding_;
        flush(p1 == pixels_ ? pixels_ : std::max<int64_t>(free_rows, 0) * width_);
    }

private:
    struct Pending {
        int64_t p0, p1;
        detail::Scratch values;  // [output channels, p1 - p0]
    };

    // Writes every pending output pixel before `end`.
    void flush(int64_t end) {
        while (!pending_.empty() && written_ < end) {
            Pending& t = pending_.front();
            const int64_t a = written_, b = std::min(end, t.p1), cols = t.p1 - t.p0;
            detail::parallel_for(channels_, b - a, [&](int64_t begin, int64_t stop) {
                for (int64_t c = begin; c < stop; ++c)
                    std::copy(t.values.get() + c * cols + (a - t.p0), t.values.get() + c * cols + (b - t.p0),
                              x_ + c * pixels_ + a);
            });
            written_ = b;
            if (b == t.p1) pending_.pop_front();
        }
    }

    float* x_;
    int64_t channels_, width_, pixels_, padding_;  // channels_: the output's
    int64_t written_ = 0;  // output pixels [0, written_) are in place
    std::deque<Pending> pending_;
};

}  // namespace

void conv2d_group_norm_silu_add_(Tensor& y, const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                 float eps, const Tensor& w, const Tensor* b, int stride, int padding,
                                 const Tensor* y_bias) {
    if (y_bias) {
        require(y.rank() >= 2 && y_bias->numel() == y.dim(1) && y_bias->on_device() == y.on_device(),
                ErrorKind::InvalidArgument,
                "conv2d_group_norm_silu_add_: y_bias " + shape_str(y_bias->shape()) + " for y " + shape_str(y.shape()) +
                    (y_bias->on_device() == y.on_device() ? "" : " in another place"));
    }
    if (y.on_device())
        return device_ops(y).conv2d_group_norm_silu_add_(y, x, groups, gamma, beta, eps, *DeviceWeight(x, w), b,
                                                         stride, padding, y_bias);
    if (y_bias) {  // the same row of bias for every image: add_channel_bias_'s float sums
        const Tensor bias = y_bias->to_f32();
        std::vector<float> rows;
        for (int64_t i = 0; i < y.dim(0); ++i) rows.insert(rows.end(), bias.values().begin(), bias.values().end());
        add_channel_bias_(y, Tensor({y.dim(0), y.dim(1)}, std::move(rows)));
    }
    detail::conv2d_group_norm_silu_add_tiled(y, x, groups, gamma, beta, eps, w, b, stride, padding,
                                             detail::kIm2colBudgetBytes);
}

void detail::conv2d_group_norm_silu_add_tiled(Tensor& y, const Tensor& x, int groups, const Tensor& gamma,
                                              const Tensor& beta, float eps, const Tensor& w, const Tensor* b,
                                              int stride, int padding, int64_t im2col_budget_bytes,
                                              int64_t weight_budget_bytes) {
    const char* op = "conv2d_group_norm_silu_add_";
    if (x.rank() == 4 && w.rank() == 4 && stride >= 1 && padding >= 0) {  // else conv2d_impl says what is wrong
        const Shape out{x.dim(0), w.dim(0), (x.dim(2) + 2 * padding - w.dim(2)) / stride + 1,
                        (x.dim(3) + 2 * padding - w.dim(3)) / stride + 1};
        check(y.shape() == out, op, desc("y", y) + " must be the convolution's output " + shape_str(out) + " of " +
                                        desc("x", x) + " and " + desc("w", w));
        check(y.empty() || y.data() != x.data(), op, "y must not be x: x is read while y is written");
    }
    const InputNorm norm = input_norm(x, groups, gamma, beta, eps);
    AddInto sink(y);
    conv2d_impl(x, w, b, stride, padding, im2col_budget_bytes, weight_budget_bytes, {&norm, false, op}, &sink);
}

Tensor conv2d_group_norm_silu_inplace(Tensor x, int groups, const Tensor& gamma, const Tensor& beta, float eps,
                                      const Tensor& w, const Tensor* b, int stride, int padding) {
    if (x.on_device())
        return device_ops(x).conv2d_group_norm_silu(x, groups, gamma, beta, eps, *DeviceWeight(x, w), b, stride,
                                                    padding);
    return detail::conv2d_group_norm_silu_inplace_tiled(std::move(x), groups, gamma, beta, eps, w, b, stride,
                                                        padding, detail::kIm2colBudgetBytes);
}

Tensor detail::conv2d_group_norm_silu_inplace_tiled(Tensor x, int groups, const Tensor& gamma, const Tensor& beta,
                                                    float eps, const Tensor& w, const Tensor* b, int stride,
                                                    int padding, int64_t im2col_budget_bytes,
                                                    int64_t weight_budget_bytes) {
    // One image, the output the input's size, no more output channels than input ones, and the weight
    // converted once (a second weight tile would read input already overwritten).
    const bool over_input = x.rank() == 4 && x.dim(0) == 1 && !x.empty() && w.rank() == 4 && stride == 1 &&
                            padding >= 0 && w.dim(2) == 2 * padding + 1 && w.dim(3) == 2 * padding + 1 &&
                            w.dim(0) <= x.dim(1) && WeightRows::tile_rows_for(w, weight_budget_bytes) >= w.dim(0);
    const InputNorm norm = input_norm(x, groups, gamma, beta, eps);
    const ConvInput input{&norm, false, "conv2d_group_norm_silu_inplace"};
    if (!over_input) return conv2d_impl(x, w, b, stride, padding, im2col_budget_bytes, weight_budget_bytes, input);
    const int64_t out_channels = w.dim(0), h = x.dim(2), width = x.dim(3);
    OverInput sink(x.data(), out_channels, width, h * width, padding);
    conv2d_impl(x, w, b, stride, padding, im2col_budget_bytes, weight_budget_bytes, input, &sink);
    return std::move(x).first_values({1, out_channels, h, width});
}

}  // namespace kiln::ops
