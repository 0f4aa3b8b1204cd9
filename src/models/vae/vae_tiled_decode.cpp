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
#include "models/vae/vae_bands.h"
#include "ops/device_ops.h"
#include "ops/ops.h"
#include "ops/tuning.h"

namespace kiln {

namespace {

using namespace vae::bands;

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
