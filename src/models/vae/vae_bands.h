// The pieces the VAE's banded passes share (vae_tiled_decode.cpp, vae_tiled_encode.cpp): an activation parked
// whole, on the host (float32) or on the GPU the pass runs on (its dtype), with the per-channel sums of each
// image's values; bands of its rows read back with the halo their 3x3 convolutions need; and a ResNet block run
// band by band, each GroupNorm normalising by the whole image's statistics, so that a banded pass gives the
// whole pass's result up to float rounding. Internal to src/models/vae.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "models/vae/vae_blocks.h"

namespace kiln::vae::bands {

// Per channel of one image: the sum and sum of squares of its values, and how many values each channel had.
struct Sums {
    std::vector<double> sum, sum_sq;
    int64_t count = 0;
    explicit Sums(int64_t channels = 0) : sum(channels, 0.0), sum_sq(channels, 0.0) {}
};

// An activation [N, C, H, W] with the sums of each image's channels: on the host (float32), or on the device
// in its dtype where the pass parks there.
struct Parked {
    Tensor x;
    std::vector<Sums> sums;
};

// A new [n, c, h, w] tensor where `like` lives, in its dtype there (float32 on the host).
Tensor new_like(const Tensor& like, Shape shape);

// `rows` rows of every channel of image src_n of src, from row src_row, into image dst_n of dst at row dst_row.
// Both on the host, or both on one device (a copy there per channel).
void copy_rows(Tensor& dst, int64_t dst_n, int64_t dst_row, const Tensor& src, int64_t src_n, int64_t src_row,
               int64_t rows);

// Rows [r0, r1) of image n of x, clamped to the image: a new [1, C, rows, W] tensor where x is (first_row says
// where it starts).
Tensor gather_rows(const Tensor& x, int64_t n, int64_t r0, int64_t r1, int64_t& first_row);

// Adds rows [from, from + rows) of band [1, C, h, W] to the sums, where the band is.
void add_sums(Sums& s, const Tensor& band, int64_t from, int64_t rows);

// A band's result, moved to where the parked activation is (the host, or the device it was computed on).
Tensor to_park(Tensor band, const Tensor& park);

struct Affine {
    std::vector<float> scale, shift;
};

// The GroupNorm `norm` of an activation with these sums, as a per-channel scale and shift.
Affine norm_affine(const Sums& s, const Norm& norm, int groups);

// Output rows per band: the band's tensors (its input with 2 rows each side, and up to three outputs as wide as
// `out_channels`, float32 on the host) within band_bytes, and at least 2 (the in-place update of resnet() reads
// 2 rows above a band, which must not have been written yet).
int64_t rows_per_band(int64_t in_channels, int64_t out_channels, int64_t width, int64_t band_bytes);

// A whole activation parked with its sums: on the device it was computed on, or on the host.
Parked park(Tensor x, bool on_device);

// What a step reads its bands from: a parked activation, or an upsampler's output made band by band from its
// parked (four times smaller) input when it is read, never held whole. The upsampler's convolution then runs
// once for the statistics and once more each time a band is read (three times before the next block's output
// is parked), which is how a decode parked on the host keeps the largest activation out of memory.
struct Input {
    Parked parked;
    const Conv* upsampler = nullptr;
    std::vector<Sums> upsampled_sums;  // the upsampler's output's, when upsampler is set

    int64_t images() const { return parked.x.dim(0); }
    int64_t channels() const { return upsampler ? upsampler->w.dim(0) : parked.x.dim(1); }
    int64_t height() const { return parked.x.dim(2) * (upsampler ? 2 : 1); }
    int64_t width() const { return parked.x.dim(3) * (upsampler ? 2 : 1); }
    const Sums& sums(int64_t n) const { return upsampler ? upsampled_sums[size_t(n)] : parked.sums[size_t(n)]; }

    // Rows [r0, r1) of image n clamped to the image, on like's device (first_row says where the band starts).
    Tensor rows(int64_t n, int64_t r0, int64_t r1, int64_t& first_row, const Tensor& like) const;
};

// A ResNet block in bands: its output parked where its input is (in place where the block keeps the width).
Input resnet(Input in, const Resnet& res, int groups, const Tensor& like, int64_t band_bytes);

}  // namespace kiln::vae::bands
