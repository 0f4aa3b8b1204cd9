// Layout changes between the conv world (NCHW) and the transformer world (N, L, C), and channel
// concatenation. Pure data movement: results are bit-exact copies.
#include <algorithm>
#include <cstring>

#include "ops/checks.h"
#include "ops/device_ops.h"
#include "ops/ops.h"
#include "ops/parallel.h"

namespace kiln::ops {

namespace {

// dst[n][j][i] = src[n][i][j] for src [count, rows, cols]: 32x32 tiles so that both the reads and
// the writes walk memory in lines.
void transpose_batched(const float* src, float* dst, int64_t count, int64_t rows, int64_t cols) {
    constexpr int64_t kTile = 32;
    const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
    const int64_t tiles = count * row_tiles * col_tiles;
    detail::parallel_for(tiles, kTile * kTile, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            const int64_t n = t / (row_tiles * col_tiles);
            const int64_t i0 = (t / col_tiles) % row_tiles * kTile, j0 = t % col_tiles * kTile;
            const int64_t i1 = std::min(rows, i0 + kTile), j1 = std::min(cols, j0 + kTile);
            const float* s = src + n * rows * cols;
            float* d = dst + n * rows * cols;
            for (int64_t j = j0; j < j1; ++j)
                for (int64_t i = i0; i < i1; ++i) d[j * rows + i] = s[i * cols + j];
        }
    });
}

}  // namespace

Tensor nchw_to_nlc(const Tensor& x) {
    detail::check(x.rank() == 4, "nchw_to_nlc", detail::desc("x", x) + " must be [N, C, H, W]");
    if (x.on_device()) return device_ops(x).nchw_to_nlc(x);
    const int64_t n = x.dim(0), c = x.dim(1), l = x.dim(2) * x.dim(3);
    Tensor y({n, l, c});
    OpScope scope(OpKind::NchwToNlc);
    transpose_batched(x.data(), y.data(), n, c, l);
    return y;
}

Tensor nlc_to_nchw(const Tensor& x, int64_t h, int64_t w) {
    detail::check(x.rank() == 3 && h >= 0 && w >= 0 && x.dim(1) == h * w, "nlc_to_nchw",
                  detail::desc("x", x) + " must be [N, h*w, C] for h = " + std::to_string(h) + ", w = " + std::to_string(w));
    if (x.on_device()) return device_ops(x).nlc_to_nchw(x, h, w);
    const int64_t n = x.dim(0), l = x.dim(1), c = x.dim(2);
    Tensor y({n, c, h, w});
    OpScope scope(OpKind::NlcToNchw);
    transpose_batched(x.data(), y.data(), n, l, c);
    return y;
}

Tensor columns(const Tensor& x, int64_t begin, int64_t count) {
    detail::check(x.rank() >= 1 && begin >= 0 && count >= 0 && begin + count <= x.dim(-1), "columns",
                  detail::desc("x", x) + ": columns [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                      ") of its last dim");
    if (x.on_device()) return device_ops(x).columns(x, begin, count);
    Shape shape = x.shape();
    const int64_t width = shape.back();
    shape.back() = count;
    Tensor y(shape);
    const int64_t rows = width ? x.numel() / width : 0;
    if (y.empty()) return y;
    const float* src = x.data();
    float* dst = y.data();
    detail::parallel_for(rows, count, [&](int64_t first, int64_t last) {
        for (int64_t r = first; r < last; ++r)
            std::memcpy(dst + r * count, src + r * width + begin, sizeof(float) * count);
    });
    return y;
}

Tensor group_norm_to_nlc(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps) {
    detail::check(x.rank() == 4, "group_norm_to_nlc", detail::desc("x", x) + " must be [N, C, H, W]");
    if (x.on_device()) return device_ops(x).group_norm_to_nlc(x, groups, gamma, beta, eps);
    return nchw_to_nlc(group_norm(x, groups, gamma, beta, eps));
}

void add_nlc_(Tensor& y, const Tensor& tokens) {
    detail::check(y.rank() == 4 && tokens.rank() == 3 && tokens.dim(0) == y.dim(0) &&
                      tokens.dim(1) == y.dim(2) * y.dim(3) && tokens.dim(2) == y.dim(1),
                  "add_nlc_", detail::desc("tokens", tokens) + " must be [N, H*W, C] for " + detail::desc("y", y));
    if (y.on_device()) return device_ops(y).add_nlc_(y, tokens);
    add_(y, nlc_to_nchw(tokens, y.dim(2), y.dim(3)));
}

Tensor concat_channels(const Tensor& a, const Tensor& b) {
    using detail::desc;
    bool ok = a.rank() >= 2 && a.rank() == b.rank() && a.dim(0) == b.dim(0);
    for (int d = 2; ok && d < a.rank(); ++d) ok = a.dim(d) == b.dim(d);
    detail::check(ok, "concat_channels",
                  desc("a", a) + " and " + desc("b", b) + " must agree in every dim but dim 1 (rank >= 2)");
    if (a.on_device()) return device_ops(a).concat_channels(a, b);
    Shape shape = a.shape();
    shape[1] += b.dim(1);
    Tensor y(shape);
    OpScope scope(OpKind::ConcatChannels);
    const int64_t n = a.dim(0);
    if (y.empty()) return y;
    // Per image, a's block then b's block, each contiguous.
    const int64_t a_block = a.numel() / n, b_block = b.numel() / n;
    const float* ap = a.data();
    const float* bp = b.data();
    float* yp = y.data();
    detail::parallel_for(n, a_block + b_block, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            float* dst = yp + i * (a_block + b_block);
            if (a_block) std::memcpy(dst, ap + i * a_block, sizeof(float) * a_block);
            if (b_block) std::memcpy(dst + a_block, bp + i * b_block, sizeof(float) * b_block);
        }
    });
    return y;
}

}  // namespace kiln::ops
