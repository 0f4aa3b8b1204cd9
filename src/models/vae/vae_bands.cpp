// The shared pieces of the VAE's banded passes (vae_bands.h).
#include "models/vae/vae_bands.h"

#include <algorithm>
#include <cstring>

#include "ops/device_ops.h"
#include "ops/ops.h"
#include "ops/tuning.h"

namespace kiln::vae::bands {

namespace {

char* bytes_of(Tensor& t) {
    return t.on_device() ? static_cast<char*>(t.device_data()) : reinterpret_cast<char*>(t.data());
}
const char* bytes_of(const Tensor& t) {
    return t.on_device() ? static_cast<const char*>(t.device_data()) : reinterpret_cast<const char*>(t.data());
}

}  // namespace

Tensor new_like(const Tensor& like, Shape shape) {
    return like.on_device() ? Tensor::empty_on(like.backend(), std::move(shape), like.dtype()) : Tensor(std::move(shape));
}

void copy_rows(Tensor& dst, int64_t dst_n, int64_t dst_row, const Tensor& src, int64_t src_n, int64_t src_row,
               int64_t rows) {
    const int64_t c = src.dim(1), w = src.dim(3);
    const int64_t elem = src.on_device() ? int64_t(dtype_size(src.dtype())) : int64_t(sizeof(float));
    const int64_t bytes = rows * w * elem;
    const char* from = bytes_of(src);
    char* to = bytes_of(dst);
    if (dst.on_device()) {  // one command: a run per channel
        dst.backend().copy_strided(to + ((dst_n * c) * dst.dim(2) + dst_row) * w * elem, dst.dim(2) * w * elem,
                                   from + ((src_n * c) * src.dim(2) + src_row) * w * elem, src.dim(2) * w * elem,
                                   bytes, c);
        return;
    }
#pragma omp parallel for if (c * bytes >= (int64_t(1) << 20))
    for (int64_t ch = 0; ch < c; ++ch)
        std::memcpy(to + ((dst_n * c + ch) * dst.dim(2) + dst_row) * w * elem,
                    from + ((src_n * c + ch) * src.dim(2) + src_row) * w * elem, size_t(bytes));
}

Tensor gather_rows(const Tensor& x, int64_t n, int64_t r0, int64_t r1, int64_t& first_row) {
    r0 = std::max<int64_t>(r0, 0);
    r1 = std::min(r1, x.dim(2));
    first_row = r0;
    Tensor band = new_like(x, {1, x.dim(1), r1 - r0, x.dim(3)});
    copy_rows(band, 0, 0, x, n, r0, r1 - r0);
    return band;
}

void add_sums(Sums& s, const Tensor& band, int64_t from, int64_t rows) {
    const int64_t band_h = band.dim(2), w = band.dim(3);
    if (band.on_device())
        ops::device_ops(band).add_channel_sums(band, from, rows, s.sum, s.sum_sq);
    else
        ops::detail::add_plane_sums(band.data() + from * w, band.dim(1), band_h * w, rows * w, s.sum.data(),
                                    s.sum_sq.data());
    s.count += rows * w;
}

Tensor to_park(Tensor band, const Tensor& park) { return park.on_device() ? std::move(band) : band.to_host(); }

Affine norm_affine(const Sums& s, const Norm& norm, int groups) {
    Affine a;
    ops::detail::group_norm_scale_shift(s.sum, s.sum_sq, s.count, 1, static_cast<int64_t>(s.sum.size()), groups,
                                        norm.w.to_host(), norm.b.to_host(), kNormEps, a.scale, a.shift);
    return a;
}

int64_t rows_per_band(int64_t in_channels, int64_t out_channels, int64_t width, int64_t band_bytes) {
    const int64_t per_row = (in_channels + 3 * out_channels) * width * int64_t(sizeof(float));
    return std::max<int64_t>(2, band_bytes / per_row - 4);
}

Parked park(Tensor x, bool on_device) {
    Parked p{on_device ? std::move(x) : x.to_host(), {}};
    for (int64_t n = 0; n < p.x.dim(0); ++n) {
        p.sums.emplace_back(p.x.dim(1));
        int64_t first = 0;
        const Tensor image = p.x.dim(0) == 1 ? p.x : gather_rows(p.x, n, 0, p.x.dim(2), first);
        add_sums(p.sums.back(), image, 0, p.x.dim(2));
    }
    return p;
}

Tensor Input::rows(int64_t n, int64_t r0, int64_t r1, int64_t& first_row, const Tensor& like) const {
    if (!upsampler) return ops::on_device_of(gather_rows(parked.x, n, r0, r1, first_row), like);
    r0 = std::max<int64_t>(r0, 0);
    r1 = std::min(r1, height());
    // Output rows [2 i0, 2 i1) come from input rows [i0, i1); the 3x3 convolution needs one input row more
    // on each side, and its results on the band's outer output rows are not used.
    const int64_t i0 = r0 / 2, i1 = (r1 + 1) / 2;
    int64_t first_in = 0;
    const Tensor band = ops::on_device_of(gather_rows(parked.x, n, i0 - 1, i1 + 1, first_in), like);
    const Tensor y = ops::conv2d_upsample2x(band, upsampler->w, &upsampler->b, 1, 1);
    int64_t first_y = 0;
    Tensor out = gather_rows(y, 0, r0 - 2 * first_in, r1 - 2 * first_in, first_y);
    first_row = first_y + 2 * first_in;
    return out;
}

Input resnet(Input in, const Resnet& res, int groups, const Tensor& like, int64_t band_bytes) {
    const int64_t n_img = in.images(), c = in.channels(), h = in.height(), w = in.width();
    const int64_t cout = res.conv1.w.dim(0);
    // A band read through an upsampler makes 4 to 6 rows more than it uses (its halo and the convolution's):
    // at least 16 rows keep that recomputation small.
    const int64_t rows = std::max<int64_t>(rows_per_band(c, cout, w, band_bytes), in.upsampler ? 16 : 0);
    // Without a shortcut the output has x's shape and replaces it band by band; a band's rows are written once
    // the next band has read the rows it needs above itself. (An upsampled input is not stored: the output is.)
    const bool in_place = !res.shortcut && !in.upsampler;
    Parked out{in_place ? Tensor() : new_like(in.parked.x, {n_img, cout, h, w}), {}};
    for (int64_t n = 0; n < n_img; ++n) {
        const Affine a1 = norm_affine(in.sums(n), res.norm1, groups);
        Sums h_sums(cout);  // conv1's output, for norm2
        for (int64_t r0 = 0; r0 < h; r0 += rows) {
            const int64_t r1 = std::min(h, r0 + rows);
            int64_t first = 0;
            const Tensor band = in.rows(n, r0 - 1, r1 + 1, first, like);
            const Tensor hb = ops::conv2d_affine_silu(band, a1.scale, a1.shift, res.conv1.w, &res.conv1.b, 1, 1);
            add_sums(h_sums, hb, r0 - first, r1 - r0);
        }
        const Affine a2 = norm_affine(h_sums, res.norm2, groups);
        Sums out_sums(cout);
        Tensor pending;
        int64_t pending_at = 0, pending_from = 0, pending_rows = 0;
        for (int64_t r0 = 0; r0 < h; r0 += rows) {
            const int64_t r1 = std::min(h, r0 + rows);
            int64_t first = 0;
            Tensor band = in.rows(n, r0 - 2, r1 + 2, first, like);
            const Tensor hb = ops::conv2d_affine_silu(band, a1.scale, a1.shift, res.conv1.w, &res.conv1.b, 1, 1);
            const Tensor conv2 = ops::conv2d_affine_silu(hb, a2.scale, a2.shift, res.conv2.w, &res.conv2.b, 1, 1);
            // decode()'s sums: shortcut + conv2, or x + conv2 (one rounding of the same two values).
            Tensor sum = res.shortcut ? ops::conv2d(band, res.shortcut->w, &res.shortcut->b) : std::move(band);
            ops::add_(sum, conv2);
            add_sums(out_sums, sum, r0 - first, r1 - r0);
            Tensor result = to_park(std::move(sum), in.parked.x);
            if (!in_place) {
                copy_rows(out.x, n, r0, result, 0, r0 - first, r1 - r0);
                continue;
            }
            if (!pending.empty()) copy_rows(in.parked.x, n, pending_at, pending, 0, pending_from, pending_rows);
            pending = std::move(result);
            pending_at = r0;
            pending_from = r0 - first;
            pending_rows = r1 - r0;
        }
        if (!pending.empty()) copy_rows(in.parked.x, n, pending_at, pending, 0, pending_from, pending_rows);
        out.sums.push_back(std::move(out_sums));
    }
    if (in_place) out.x = std::move(in.parked.x);
    return Input{std::move(out), nullptr, {}};
}

}  // namespace kiln::vae::bands
