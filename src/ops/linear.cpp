// linear: y = x W^T + b as one sgemm over all leading dims of x (per tile of output features when W
// is F16/BF16 and must be converted first, see weight_rows.h); block weights
// (q8_0, 4- and 5-bit formats) by int8 products (int8_dot.h).
#include <algorithm>

#include "ops/blas.h"
#include "ops/checks.h"
#include "ops/cpu_q8_products.h"
#include "ops/device_ops.h"
#include "ops/device_weight.h"
#include "ops/int8_dot.h"
#include "ops/ops.h"
#include "ops/parallel.h"
#include "ops/tuning.h"
#include "ops/weight_rows.h"

namespace kiln::ops {

Tensor linear(const Tensor& x, const Tensor& w, const Tensor* b) {
    if (x.on_device()) return device_ops(x).linear(x, *DeviceWeight(x, w), b);
    return detail::linear_tiled(x, w, b, detail::kWeightTileBudgetBytes);
}

void linear_add_(Tensor& acc, const Tensor& x, const Tensor& w, const Tensor* b) {
    if (x.on_device()) return device_ops(x).linear_add_(acc, x, *DeviceWeight(x, w), b);
    add_(acc, linear(x, w, b));
}

Tensor detail::linear_tiled(const Tensor& x, const Tensor& w, const Tensor* b, int64_t weight_budget_bytes) {
    using detail::check;
    using detail::desc;
    check(x.rank() >= 1, "linear", desc("x", x) + " must have at least one dim");
    check(w.rank() == 2, "linear", desc("w", w) + " must be [out, in]");
    const int64_t in = x.dim(-1), out = w.dim(0);
    check(w.dim(1) == in, "linear",
          desc("x", x) + " and " + desc("w", w) + ": x's last dim must equal w's in-features");
    if (b)
        check(b->rank() == 1 && b->dim(0) == out, "linear",
              desc("b", *b) + " must be [" + std::to_string(out) + "] for " + desc("w", w));

    int64_t rows = 1;
    for (int d = 0; d + 1 < x.rank(); ++d) rows *= x.dim(d);
    Shape out_shape = x.shape();
    out_shape.back() = out;
    Tensor y(out_shape);

    OpScope scope(OpKind::Linear, 2.0 * static_cast<double>(rows) * static_cast<double>(out) * in);
    float* yp = y.data();
    float beta = 0.0f;
    if (b) {  // start from the bias and let sgemm accumulate onto it (beta = 1): no second pass over y
        const float* bp = b->data();
        detail::parallel_for(rows, out, [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) std::copy(bp, bp + out, yp + r * out);
        });
        beta = 1.0f;
    }
    if (detail::int8_products_take(w.dtype()) && cpu_q8_products() == CpuQ8Products::Int8 && rows > 0) {
        const detail::Int8Weights weight(w, "linear");  // int8 products (int8_dot.h)
        detail::Q8Activations xq(in, rows, "linear");
        xq.quantize(x.data(), in, 1);
        detail::int8_gemm(weight, xq, yp, out, detail::Q8Output::ColumnsByRows, b != nullptr);
        return y;
    }
    detail::WeightRows weight(w, "linear", weight_budget_bytes);
    for (int64_t o0 = 0; o0 < out; o0 += weight.tile_rows()) {
        const int64_t n = std::min(weight.tile_rows(), out - o0);
        blas::gemm(false, true, rows, n, in, 1.0f, x.data(), in, weight.rows(o0, n), in, beta, yp + o0, out);
    }
    return y;
}

}  // namespace kiln::ops
