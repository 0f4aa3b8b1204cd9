#include "pipeline/composable_guidance.h"

#include "kiln/error.h"

namespace kiln {

Tensor combine_composable_guidance(const Tensor& out, int64_t batch, const std::vector<double>& weights,
                                   double scale) {
    const int64_t rows = static_cast<int64_t>(1 + weights.size()) * batch;
    require(batch >= 1 && !weights.empty() && out.rank() >= 1 && out.dim(0) == rows, ErrorKind::InvalidArgument,
            "guidance: " + std::to_string(out.rank() >= 1 ? out.dim(0) : 0) + " rows of UNet output for " +
                std::to_string(weights.size()) + " parts of " + std::to_string(batch) + " images");
    Shape shape = out.shape();
    shape[0] = batch;
    const int64_t n = out.numel() / rows * batch;  // the values of one block of `batch` rows
    const float* negative = out.data();
    Tensor guided(shape, std::vector<float>(negative, negative + n));
    float* g = guided.data();
    for (size_t k = 0; k < weights.size(); ++k) {
        const float factor = static_cast<float>(weights[k] * scale);
        const float* part = negative + static_cast<int64_t>(k + 1) * n;
        for (int64_t i = 0; i < n; ++i) g[i] += (part[i] - negative[i]) * factor;
    }
    return guided;
}

Tensor repeat_batch(const Tensor& x, int copies) {
    Shape s = x.shape();
    s[0] *= copies;
    std::vector<float> v;
    v.reserve(static_cast<size_t>(x.numel() * copies));
    for (int c = 0; c < copies; ++c) v.insert(v.end(), x.data(), x.data() + x.numel());
    return Tensor(s, std::move(v));
}

}  // namespace kiln
