// Nearest-neighbour 2x upsampling (the UNet and VAE Upsample2D before their conv).
#include "ops/checks.h"
#include "ops/device_ops.h"
#include "ops/ops.h"
#include "ops/parallel.h"

namespace kiln::ops {

Tensor upsample_nearest2x(const Tensor& x) {
    if (x.on_device()) return device_ops(x).upsample_nearest2x(x);
    detail::check(x.rank() == 4, "upsample_nearest2x", detail::desc("x", x) + " must be [N, C, H, W]");
    const int64_t planes = x.dim(0) * x.dim(1), h = x.dim(2), w = x.dim(3);
    Tensor y({x.dim(0), x.dim(1), 2 * h, 2 * w});
    OpScope scope(OpKind::UpsampleNearest2x);
    const float* xp = x.data();
    float* yp = y.data();
    // One item per input row: it writes two identical output rows.
    detail::parallel_for(planes * h, 5 * w, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const float* src = xp + r * w;
            float* dst = yp + r * 4 * w;
            for (int64_t j = 0; j < w; ++j) dst[2 * j] = dst[2 * j + 1] = src[j];
            for (int64_t j = 0; j < 2 * w; ++j) dst[2 * w + j] = dst[j];
        }
    });
    return y;
}

}  // namespace kiln::ops
