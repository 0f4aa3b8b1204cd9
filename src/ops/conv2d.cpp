// conv2d: a 1x1 stride-1 convolution is one sgemm per image; any other goes through im2col in tiles
// of output pixels, so the column buffer stays under detail::kIm2colBudgetBytes whatever the image size.
// An F16/BF16 weight is converted in tiles of output channels (weight_rows.h), the outermost loop, so
// the columns are rebuilt once per weight tile: only for weights over the tile budget. A block weight
// (q8_0, the 4- and 5-bit formats) is multiplied by int8 products instead (int8_dot.h; cpu_q8_products.h).
// The output is a new tensor, or goes tile by tile to a sink (conv2d_impl.h; conv2d_inplace.cpp).
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ops/blas.h"
#include "ops/checks.h"
#include "ops/conv2d_impl.h"
#include "ops/cpu_q8_products.h"
#include "ops/im2col.h"
#include "ops/device_ops.h"
#include "ops/device_weight.h"
#include "ops/int8_dot.h"
#include "ops/ops.h"
#include "ops/parallel.h"
#include "ops/tuning.h"
#include "ops/weight_rows.h"

namespace kiln::ops {

namespace {

// Where each sgemm call writes: straight into the new output (whose planes hold the bias already), or
// into one scratch tile that gets the bias first and goes to the sink after the call.
class Destination {
public:
    Destination(float* y, detail::ConvTileSink* sink, const Tensor* b, int64_t cout, int64_t pixels,
                int64_t tile_floats, const char* op)
        : y_(y), sink_(sink), bias_(b ? b->data() : nullptr), cout_(cout), pixels_(pixels) {
        if (sink_) tile_ = detail::scratch_floats(tile_floats, op);
    }

    // C and its leading dimension for output channels [o0, o0 + oc), pixels [p0, p1) of image n.
    std::pair<float*, int64_t> begin(int64_t n, int64_t o0, int64_t oc, int64_t p0, int64_t p1) {
        if (!sink_) return {y_ + (n * cout_ + o0) * pixels_ + p0, pixels_};
        const int64_t cols = p1 - p0;  // as in the new output: the bias, or zeros (beta = 0)
        for (int64_t c = 0; c < oc; ++c)
            std::fill(tile_.get() + c * cols, tile_.get() + (c + 1) * cols, bias_ ? bias_[o0 + c] : 0.0f);
        return {tile_.get(), cols};
    }
    void end(int64_t n, int64_t o0, int64_t oc, int64_t p0, int64_t p1) {
        if (sink_) sink_->take(n, o0, oc, p0, p1, tile_.get());
    }

private:
    float* y_;
    detail::ConvTileSink* sink_;
    const float* bias_;
    int64_t cout_, pixels_;
    detail::Scratch tile_;
};

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding) {
    if (x.on_device()) return device_ops(x).conv2d(x, *DeviceWeight(x, w), b, stride, padding);
    return detail::conv2d_tiled(x, w, b, stride, padding, detail::kIm2colBudgetBytes);
}

Tensor detail::conv2d_tiled(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding,
                            int64_t im2col_budget_bytes, int64_t weight_budget_bytes) {
    return detail::conv2d_impl(x, w, b, stride, padding, im2col_budget_bytes, weight_budget_bytes, {});
}

Tensor conv2d_group_norm_silu(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps,
                              const Tensor& w, const Tensor* b, int stride, int padding) {
    if (x.on_device())
        return device_ops(x).conv2d_group_norm_silu(x, groups, gamma, beta, eps, *DeviceWeight(x, w), b, stride,
                                                    padding);
    return detail::conv2d_group_norm_silu_tiled(x, groups, gamma, beta, eps, w, b, stride, padding,
                                                detail::kIm2colBudgetBytes);
}

Tensor conv2d_affine_silu(const Tensor& x, const std::vector<float>& scale, const std::vector<float>& shift,
                          const Tensor& w, const Tensor* b, int stride, int padding) {
    const int64_t channels = x.rank() == 4 ? x.dim(1) : -1;
    require(channels >= 0 && int64_t(scale.size()) == channels && int64_t(shift.size()) == channels,
            ErrorKind::InvalidArgument,
            "conv2d_affine_silu: x " + shape_str(x.shape()) + " must be [N, C, H, W] with " +
                std::to_string(scale.size()) + " scales and " + std::to_string(shift.size()) + " shifts, one a channel");
    if (x.on_device())
        return device_ops(x).conv2d_affine_silu(x, scale, shift, *DeviceWeight(x, w), b, stride, padding);
    detail::InputNorm norm;  // per (image, channel) plane
    for (int64_t n = 0; n < x.dim(0); ++n) {
        norm.scale.insert(norm.scale.end(), scale.begin(), scale.end());
        norm.shift.insert(norm.shift.end(), shift.begin(), shift.end());
    }
    return detail::conv2d_impl(x, w, b, stride, padding, detail::kIm2colBudgetBytes, detail::kWeightTileBudgetBytes,
                               {&norm, false, "conv2d_affine_silu"});
}

Tensor conv2d_group_norm_silu_plus(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps,
                                   const Tensor& w, const Tensor* b, const Tensor& image_bias, int64_t at, int stride,
                                   int padding) {
    const int64_t count = w.rank() == 4 ? w.dim(0) : 0;  // conv2d names a filter of another rank
    require(image_bias.rank() == 2 && at >= 0 && at + count <= image_bias.dim(1), ErrorKind::InvalidArgument,
            "conv2d_group_norm_silu_plus: image_bias " + shape_str(image_bias.shape()) + " has no columns [" +
                std::to_string(at) + ", " + std::to_string(at + count) + ")");
    if (x.on_device())
        return device_ops(x).conv2d_group_norm_silu_plus(x, groups, gamma, beta, eps, *DeviceWeight(x, w), b,
                                                         image_bias, at, stride, padding);
    Tensor y = conv2d_group_norm_silu(x, groups, gamma, beta, eps, w, b, stride, padding);
    add_channel_bias_(y, at == 0 && count == image_bias.dim(1) ? image_bias : columns(image_bias, at, count));
    return y;
}

Tensor detail::conv2d_group_norm_silu_tiled(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                            float eps, const Tensor& w, const Tensor* b, int stride, int padding,
                                            int64_t im2col_budget_bytes, int64_t weight_budget_bytes) {
    detail::InputNorm norm;
    {
        OpScope stats(OpKind::GroupNorm);
        detail::group_norm_affine(x, groups, gamma, beta, eps, norm.scale, norm.shift);
    }
    return detail::conv2d_impl(x, w, b, stride, padding, im2col_budget_bytes, weight_budget_bytes,
                               {&norm, false, "conv2d_group_norm_silu"});
}

Tensor detail::conv2d_impl(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding,
                           int64_t im2col_budget_bytes, int64_t weight_budget_bytes, const ConvInput& input,
                           ConvTileSink* sink) {
    const char* op = input.op;
    const InputNorm* norm = input.norm;
    const int64_t up = input.upsample2x ? 2 : 1;  // the convolution sees x's height and width times up
    check(x.rank() == 4, op, desc("x", x) + " must be [N, C, H, W]");
    check(w.rank() == 4, op, desc("w", w) + " must be [O, C, kh, kw]");
    check(w.dim(1) == x.dim(1), op,
          desc("x", x) + " and " + desc("w", w) + ": x's channels must equal w's in-channels (dim 1)");
    check(stride >= 1, op, "stride " + std::to_string(stride) + " must be >= 1");
    check(padding >= 0, op, "padding " + std::to_string(padding) + " must be >= 0");
    check(w.dim(2) >= 1 && w.dim(3) >= 1, op, desc("w", w) + " has an empty kernel");
    const int64_t n_img = x.dim(0), cin = x.dim(1), h = up * x.dim(2), wd = up * x.dim(3);
    const int64_t cout = w.dim(0), kh = w.dim(2), kw = w.dim(3), pad = padding;
    check(h + 2 * pad >= kh && wd + 2 * pad >= kw, op,
          desc("x", x) + (up > 1 ? " upsampled 2x" : "") + " padded by " + std::to_string(padding) +
              " is smaller than the kernel of " + desc("w", w));
    if (b)
        check(b->rank() == 1 && b->dim(0) == cout, op,
              desc("b", *b) + " must be [" + std::to_string(cout) + "] for " + desc("w", w));

    const int64_t ho = (h + 2 * pad - kh) / stride + 1, wo = (wd + 2 * pad - kw) / stride + 1;
    const int64_t pixels = ho * wo, k = cin * kh * kw;
    Tensor y = sink ? Tensor() : Tensor({n_img, cout, ho, wo});
    OpScope scope(OpKind::Conv2d, 2.0 * static_cast<double>(n_img * cout) * static_cast<double>(pixels) * k);
    if (n_img * cout * pixels == 0) return y;

    float* yp = sink ? nullptr : y.data();
    const float beta = b ? 1.0f : 0.0f;  // sgemm accumulates onto the bias
    if (b && !sink) {  // (with a sink, Destination puts it in each tile)
        const float* bp = b->data();
        detail::parallel_for(n_img * cout, pixels, [&](int64_t begin, int64_t end) {
            for (int64_t plane = begin; plane < end; ++plane)
                std::fill(yp + plane * pixels, yp + (plane + 1) * pixels, bp[plane % cout]);
        });
    }

    const float* xp = x.data();
    // A 1x1 convolution reads x directly, unless x is normalised or upsampled on the way (im2col does it).
    const bool pointwise = kh == 1 && kw == 1 && stride == 1 && padding == 0 && !norm && up == 1;
    const detail::ConvGeometry g{cin, h, wd, kh, kw, stride, padding, ho, wo, up > 1};
    const int64_t tile =
        std::clamp<int64_t>(im2col_budget_bytes / (std::max<int64_t>(k, 1) * int64_t(sizeof(float))), 1, pixels);
    const detail::Scratch col = pointwise ? detail::Scratch{} : detail::scratch_floats(k * tile, op);
    const auto affine_of = [&](int64_t n) {  // image n's norm, as im2col applies it
        return norm ? detail::ChannelAffine{norm->scale.data() + n * cin, norm->shift.data() + n * cin}
                    : detail::ChannelAffine{nullptr, nullptr};
    };
    if (detail::int8_products_take(w.dtype()) && cpu_q8_products() == CpuQ8Products::Int8) {
        // int8 products (int8_dot.h): all output channels at once (the weight is read in
        // place, or widened a tile of rows at a time: int8_dot_weights.h).
        const detail::Int8Weights weight(w, op);
        Destination out(yp, sink, b, cout, pixels, cout * (pointwise ? pixels : tile), op);
        for (int64_t n = 0; n < n_img; ++n) {
            const float* xn = xp + n * cin * x.dim(2) * x.dim(3);
            const detail::ChannelAffine affine = affine_of(n);
            for (int64_t p0 = 0; p0 < pixels; p0 += pointwise ? pixels : tile) {
                const int64_t p1 = pointwise ? pixels : std::min(pixels, p0 + tile);
                if (!pointwise) detail::im2col_tile(xn, g, p0, p1, col.get(), norm ? &affine : nullptr);
                detail::Q8Activations columns(k, p1 - p0, op);
                columns.quantize(pointwise ? xn : col.get(), 1, p1 - p0);
                const auto [c, ldc] = out.begin(n, 0, cout, p0, p1);
                detail::int8_gemm(weight, columns, c, ldc, detail::Q8Output::RowsByColumns, b != nullptr);
                out.end(n, 0, cout, p0, p1);
            }
        }
        return y;
    }
    detail::WeightRows weight(w, op, weight_budget_bytes);
    Destination out(yp, sink, b, cout, pixels, std::min(weight.tile_rows(), cout) * (pointwise ? pixels : tile),
                    op);
    for (int64_t o0 = 0; o0 < cout; o0 += weight.tile_rows()) {
        const int64_t oc = std::min(weight.tile_rows(), cout - o0);
        const float* wp = weight.rows(o0, oc);
        for (int64_t n = 0; n < n_img; ++n) {
            const float* xn = xp + n * cin * x.dim(2) * x.dim(3);
            if (pointwise) {  // one sgemm per image, no columns
                const auto [c, ldc] = out.begin(n, o0, oc, 0, pixels);
                blas::gemm(false, false, oc, pixels, cin, 1.0f, wp, cin, xn, pixels, beta, c, ldc);
                out.end(n, o0, oc, 0, pixels);
                continue;
            }
            const detail::ChannelAffine affine = affine_of(n);
            for (int64_t p0 = 0; p0 < pixels; p0 += tile) {
                const int64_t p1 = std::min(pixels, p0 + tile);
                detail::im2col_tile(xn, g, p0, p1, col.get(), norm ? &affine : nullptr);
                const auto [c, ldc] = out.begin(n, o0, oc, p0, p1);
                blas::gemm(false, false, oc, p1 - p0, k, 1.0f, wp, k, col.get(), p1 - p0, beta, c, ldc);
                out.end(n, o0, oc, p0, p1);
            }
        }
    }
    return y;
}

}  // namespace kiln::ops
