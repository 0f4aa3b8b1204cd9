// Vae::decode_tiled: the decode a band of rows at a time, with every GroupNorm normalising by the whole
// image's statistics, so the result is decode()'s up to float rounding (no seams, no blending).
//
// The part up to the mid block works at the latent size (an eighth of the image each way) and its attention
// mixes every position, so it runs whole. From there each activation is parked, on the host (float32) or, where
// the caller allows, on the GPU the decode runs on (its dtype), with the per-channel sums of its values (taken
// where each band was computed: a GPU's bands need not come to the host for them); each step (a ResNet block, an upsampler, the output convolution) reads bands
// of it with the rows its 3x3 convolutions need around them, runs them where the weights are (a GPU or the
// CPU), and writes the band's own rows back with their sums, from which the next GroupNorm's scale and shift
// come. A ResNet block's second norm needs the statistics of its first convolution's output over the whole
// image before any of its output can be made, so each block runs its first convolution twice: once for the
// statistics, once again (band by band) to use them. That costs about a third more arithmetic than decode();
// in exchange the device holds one band's tensors and the host one activation (two where a block changes the
// width or an upsampler quadruples it), instead of two or three whole activations with their scratch.
#include <algorithm>
#include <cstring>

#include "kiln/error.h"
#include "models/vae/vae.h"
#include "ops/device_ops.h"
#include "ops/ops.h"
#include "ops/tuning.h"

namespace kiln {

namespace {

using vae::kNormEps;

// Per channel of one image: the sum and sum of squares of its values, and how many values each channel had.
struct Sums {
    std::vector<double> sum, sum_sq;
    int64_t count = 0;
    explicit Sums(int64_t channels = 0) : sum(channels, 0.0), sum_sq(channels, 0.0) {}
};

// An activation [N, C, H, W] with the sums of each image's channels: on the host (float32), or on the device
// in its dtype where the decode parks there.
struct Parked {
    Tensor x;
    std::vector<Sums> sums;
};

char* bytes_of(Tensor& t) {
    return t.on_device() ? static_cast<char*>(t.device_data()) : reinterpret_cast<char*>(t.data());
}
const char* bytes_of(const Tensor& t) {
    return t.on_device() ? static_cast<const char*>(t.device_data()) : reinterpret_cast<const char*>(t.data());
}

// A new [n, c, h, w] tensor where `like` lives, in its dtype there (float32 on the host).
Tensor new_like(const Tensor& like, Shape shape) {
    return like.on_device() ? Tensor::empty_on(like.backend(), std::move(shape), like.dtype()) : Tensor(std::move(shape));
}

// `rows` rows of every channel of image src_n of src, from row src_row, into image dst_n of dst at row dst_row.
// Both on the host, or both on one device (a copy there per channel).
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

// Rows [r0, r1) of image n of x, clamped to the image: a new [1, C, rows, W] tensor where x is (first_row says
// where it starts).
Tensor gather_rows(const Tensor& x, int64_t n, int64_t r0, int64_t r1, int64_t& first_row) {
    r0 = std::max<int64_t>(r0, 0);
    r1 = std::min(r1, x.dim(2));
    first_row = r0;
    Tensor band = new_like(x, {1, x.dim(1), r1 - r0, x.dim(3)});
    copy_rows(band, 0, 0, x, n, r0, r1 - r0);
    return band;
}

// Adds rows [from, from + rows) of band [1, C, h, W] to the sums, where the band is.
void add_sums(Sums& s, const Tensor& band, int64_t from, int64_t rows) {
    const int64_t band_h = band.dim(2), w = band.dim(3);
    if (band.on_device())
        ops::device_ops(band).add_channel_sums(band, from, rows, s.sum, s.sum_sq);
    else
        ops::detail::add_plane_sums(band.data() + from * w, band.dim(1), band_h * w, rows * w, s.sum.data(),
                                    s.sum_sq.data());
    s.count += rows * w;
}

// A band's result, moved to where the parked activation is (the host, or the device it was computed on).
Tensor to_park(Tensor band, const Tensor& park) { return park.on_device() ? std::move(band) : band.to_host(); }

struct Affine {
    std::vector<float> scale, shift;
};

// The GroupNorm `norm` of an activation with these sums, as a per-channel scale and shift.
Affine norm_affine(const Sums& s, const vae::Norm& norm, int groups) {
    Affine a;
    ops::detail::group_norm_scale_shift(s.sum, s.sum_sq, s.count, 1, static_cast<int64_t>(s.sum.size()), groups,
                                        norm.w.to_host(), norm.b.to_host(), kNormEps, a.scale, a.shift);
    return a;
}

// Output rows per band: the band's tensors (its input with 2 rows each side, and up to three outputs as wide as
// `out_channels`, float32 on the host) within band_bytes, and at least 2 (decode_tiled's in-place update reads
// 2 rows above a band, which must not have been written yet).
int64_t rows_per_band(int64_t in_channels, int64_t out_channels, int64_t width, int64_t band_bytes) {
    const int64_t per_row = (in_channels + 3 * out_channels) * width * int64_t(sizeof(float));
    return std::max<int64_t>(2, band_bytes / per_row - 4);
}

// The mid block's output parked: on the device it was computed on, or on the host.
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

// What a step reads its bands from: a parked activation, or an upsampler's output made band by band from its
// parked (four times smaller) input when it is read, never held whole. The upsampler's convolution then runs
// once for the statistics and once more each time a band is read (three times before the next block's output
// is parked), which is how a decode parked on the host keeps the largest activation out of memory.
struct Input {
    Parked parked;
    const vae::Conv* upsampler = nullptr;
    std::vector<Sums> upsampled_sums;  // the upsampler's output's, when upsampler is set

    int64_t images() const { return parked.x.dim(0); }
    int64_t channels() const { return upsampler ? upsampler->w.dim(0) : parked.x.dim(1); }
    int64_t height() const { return parked.x.dim(2) * (upsampler ? 2 : 1); }
    int64_t width() const { return parked.x.dim(3) * (upsampler ? 2 : 1); }
    const Sums& sums(int64_t n) const { return upsampler ? upsampled_sums[size_t(n)] : parked.sums[size_t(n)]; }

    // Rows [r0, r1) of image n clamped to the image, on like's device (first_row says where the band starts).
    Tensor rows(int64_t n, int64_t r0, int64_t r1, int64_t& first_row, const Tensor& like) const {
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
};

Input resnet(Input in, const vae::Resnet& res, int groups, const Tensor& like, int64_t band_bytes) {
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

// Bands of the input's rows, `rows` at a time, with the halo the upsampler's convolution needs.
int64_t upsample_rows(const Input& in, int64_t cout, int64_t band_bytes) {
    // Each input row makes two output rows, as wide again: count the band in output rows.
    return std::max<int64_t>(2, rows_per_band(in.channels(), cout, 2 * in.width(), band_bytes) / 2);
}

// The upsampler's output: parked like its input where it parks on the device (where the repeated convolution
// would cost time the memory does not need), else left to be made when read (Input::upsampler), with its
// statistics gathered now.
Input upsample(Input in, const vae::Conv& conv, const Tensor& like, int64_t band_bytes) {
    const int64_t n_img = in.images(), h = in.height(), w = in.width();
    const int64_t cout = conv.w.dim(0);
    const int64_t rows = upsample_rows(in, cout, band_bytes);
    const bool lazy = !in.parked.x.on_device() && !in.upsampler;
    Input out;
    if (lazy) out = Input{std::move(in.parked), &conv, {}};
    else out.parked.x = new_like(in.parked.x, {n_img, cout, 2 * h, 2 * w});
    for (int64_t n = 0; n < n_img; ++n) {
        Sums sums(cout);
        for (int64_t r0 = 0; r0 < h; r0 += rows) {
            const int64_t r1 = std::min(h, r0 + rows);
            int64_t first = 0;
            Tensor y;
            if (lazy) {
                y = out.rows(n, 2 * r0, 2 * r1, first, like);
                add_sums(sums, y, 2 * r0 - first, 2 * (r1 - r0));
                continue;
            }
            const Tensor band = in.rows(n, r0 - 1, r1 + 1, first, like);
            y = ops::conv2d_upsample2x(band, conv.w, &conv.b, 1, 1);
            add_sums(sums, y, 2 * (r0 - first), 2 * (r1 - r0));
            y = to_park(std::move(y), out.parked.x);
            copy_rows(out.parked.x, n, 2 * r0, y, 0, 2 * (r0 - first), 2 * (r1 - r0));
        }
        (lazy ? out.upsampled_sums : out.parked.sums).push_back(std::move(sums));
    }
    return out;
}

Tensor norm_silu_conv(const Input& in, const vae::Norm& norm, int groups, const vae::Conv& conv, const Tensor& like,
                      int64_t band_bytes) {
    const int64_t n_img = in.images(), c = in.channels(), h = in.height(), w = in.width();
    const int64_t cout = conv.w.dim(0);
    const int64_t rows = rows_per_band(c, cout, w, band_bytes);
    Tensor out({n_img, cout, h, w});
    for (int64_t n = 0; n < n_img; ++n) {
        const Affine a = norm_affine(in.sums(n), norm, groups);
        for (int64_t r0 = 0; r0 < h; r0 += rows) {
            const int64_t r1 = std::min(h, r0 + rows);
            int64_t first = 0;
            const Tensor band = in.rows(n, r0 - 1, r1 + 1, first, like);
            const Tensor y = ops::conv2d_affine_silu(band, a.scale, a.shift, conv.w, &conv.b, 1, 1).to_host();
            copy_rows(out, n, r0, y, 0, r0 - first, r1 - r0);
        }
    }
    return out;
}

}  // namespace

Tensor Vae::decode_tiled(const Tensor& latents, int64_t band_bytes, bool park_on_device) const {
    require(band_bytes > 0, ErrorKind::InvalidArgument,
            "VAE tiled decode: the band budget must be positive, not " + std::to_string(band_bytes));
    const int groups = config_.norm_num_groups;
    const Tensor& like = dec_conv_in_.w;  // where the decode runs
    Input p{park(decode_to_mid_block(latents), park_on_device && like.on_device()), nullptr, {}};
    for (const Level& level : up_) {
        for (const vae::Resnet& res : level.resnets) p = resnet(std::move(p), res, groups, like, band_bytes);
        if (level.resample) p = upsample(std::move(p), *level.resample, like, band_bytes);
    }
    return norm_silu_conv(p, dec_norm_out_, groups, dec_conv_out_, like, band_bytes);
}

}  // namespace kiln
