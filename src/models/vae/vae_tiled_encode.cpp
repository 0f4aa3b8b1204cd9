// Vae::encode_tiled: the encoder up to its mid block a band of rows at a time, every GroupNorm normalising by the
// whole image's statistics, so the posterior is encode()'s up to float rounding (no seams, no blending).
//
// The input convolution, each ResNet block and each downsampler read bands of the activation parked before them
// (the image itself first), with the rows their convolutions need around them, and park their output with its
// per-channel sums, from which the next GroupNorm's scale and shift come (vae_bands.h: the ResNet block in bands
// is the decode's). The mid block works at the latent size and its attention mixes every position, so it runs
// whole, as in encode(). The device holds one band's tensors; the host (or, with park_on_device, the GPU) one
// or two whole activations, instead of encode()'s two or three with their scratch.
#include <algorithm>

#include "kiln/error.h"
#include "models/vae/vae.h"
#include "models/vae/vae_bands.h"
#include "ops/ops.h"

namespace kiln {

namespace {

using namespace vae::bands;

// A 3x3 convolution (stride 1, padding 1) of the input in bands, its output parked like park_like.
Input convolve(const Input& in, const vae::Conv& conv, const Tensor& park_like, const Tensor& like,
               int64_t band_bytes) {
    const int64_t n_img = in.images(), c = in.channels(), h = in.height(), w = in.width();
    const int64_t cout = conv.w.dim(0);
    const int64_t rows = rows_per_band(c, cout, w, band_bytes);
    Parked out{new_like(park_like, {n_img, cout, h, w}), {}};
    for (int64_t n = 0; n < n_img; ++n) {
        Sums sums(cout);
        for (int64_t r0 = 0; r0 < h; r0 += rows) {
            const int64_t r1 = std::min(h, r0 + rows);
            int64_t first = 0;
            // One row more each side; the convolution's zero padding lands on rows that are not used, but at
            // the image's edges, where it is the padding encode() has.
            const Tensor band = in.rows(n, r0 - 1, r1 + 1, first, like);
            Tensor y = ops::conv2d(band, conv.w, &conv.b, 1, 1);
            add_sums(sums, y, r0 - first, r1 - r0);
            y = to_park(std::move(y), out.x);
            copy_rows(out.x, n, r0, y, 0, r0 - first, r1 - r0);
        }
        out.sums.push_back(std::move(sums));
    }
    return Input{std::move(out), nullptr, {}};
}

// The downsampler (diffusers' Downsample2D: one zero row and column padded after the image, then a 3x3
// convolution of stride 2) in bands. Output rows [o0, o1) read input rows [2 o0, 2 o1 + 1): a band of 2k + 1
// rows padded by vae::downsample makes k rows (the padded row unused), and at the bottom the image's own
// padding row is the one it pads.
Input downsample(const Input& in, const vae::Conv& conv, const Tensor& like, int64_t band_bytes) {
    const int64_t n_img = in.images(), c = in.channels(), h = in.height(), w = in.width();
    const int64_t cout = conv.w.dim(0);
    const int64_t out_h = (h - 2) / 2 + 1, out_w = (w - 2) / 2 + 1;
    // Per output row: two input rows and their padded copy, and the output row (float32 on the host).
    const int64_t per_row = (4 * c * (w + 1) + cout * out_w) * int64_t(sizeof(float));
    const int64_t rows = std::max<int64_t>(1, band_bytes / per_row);
    Parked out{new_like(in.parked.x, {n_img, cout, out_h, out_w}), {}};
    for (int64_t n = 0; n < n_img; ++n) {
        Sums sums(cout);
        for (int64_t o0 = 0; o0 < out_h; o0 += rows) {
            const int64_t o1 = std::min(out_h, o0 + rows);
            int64_t first = 0;
            const Tensor band = in.rows(n, 2 * o0, 2 * o1 + 1, first, like);
            Tensor y = vae::downsample(band, conv);  // [1, cout, o1 - o0, out_w]
            add_sums(sums, y, 0, o1 - o0);
            y = to_park(std::move(y), out.x);
            copy_rows(out.x, n, o0, y, 0, 0, o1 - o0);
        }
        out.sums.push_back(std::move(sums));
    }
    return Input{std::move(out), nullptr, {}};
}

}  // namespace

Vae::Posterior Vae::encode_tiled(const Tensor& image, int64_t band_bytes, bool park_on_device) const {
    check_encode_input(image);
    require(band_bytes > 0, ErrorKind::InvalidArgument,
            "VAE tiled encode: the band budget must be positive, not " + std::to_string(band_bytes));
    const int groups = config_.norm_num_groups;
    const Tensor& like = enc_conv_in_.w;  // where the encode runs
    // The image is read from the host; the activations park there too, or on the GPU where the caller allows.
    const Input source{Parked{image.on_device() ? image.to_host() : image, {}}, nullptr, {}};
    const Tensor& park_like = park_on_device && like.on_device() ? like : source.parked.x;
    Input p = convolve(source, enc_conv_in_, park_like, like, band_bytes);
    for (const Level& level : down_) {
        for (const vae::Resnet& res : level.resnets) p = resnet(std::move(p), res, groups, like, band_bytes);
        if (level.resample) p = downsample(p, *level.resample, like, band_bytes);
    }
    return encode_from_mid_block(std::move(p.parked.x));
}

}  // namespace kiln
