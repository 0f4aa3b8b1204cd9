// Vae::encode_tiled against diffusers' AutoencoderKL encode (tests/data/<model>/modules.safetensors) and against
// kiln's own untiled encode, for bands of every size from the smallest to the whole image.
#include <gtest/gtest.h>

#include <cstdio>

#include "common/fixtures.h"
#include "core/memory.h"
#include "io/safetensors.h"
#include "kiln/error.h"
#include "models/vae/vae.h"
#include "models/vae_fixture.h"

using namespace kiln;
using kiln::test::data_path;
using kiln::test::relative_error;

namespace {

// The tiled encode computes encode()'s float32 arithmetic; only the order of some sums differs (the GroupNorm
// statistics are summed band by band, BLAS splits a band's products differently from the whole image's): the
// same kind of difference as between kiln's encode and diffusers' float32 reference, so that comparison's bound
// (vae_fixture.h).
constexpr double kTolerance = kiln::test::kVaeTolerance;

// 1 byte gives the smallest bands (2 rows, 1 downsampled row); 64 KiB a few rows. (A budget past the image is one
// band, encode()'s own arithmetic: 0 difference when tried.)
const int64_t kBandBudgets[] = {1, 64 << 10};

void expect_same_posterior(const Vae::Posterior& got, const Vae::Posterior& want, const std::string& what) {
    EXPECT_LT(relative_error(got.mean, want.mean), kTolerance) << what << ": mean";
    EXPECT_LT(relative_error(got.std, want.std), kTolerance) << what << ": std";
}

// Values in [-1, 1] that vary across rows and columns, different for each seed.
Tensor image_of(Shape shape, int seed) {
    Tensor t(std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t[i] = float((i * (37 + 2 * seed) + 11 * seed) % 201 - 100) / 100.0f;
    return t;
}

}  // namespace

TEST(VaeTiledEncode, MatchesDiffusersAndTheUntiledEncode) {
    for (const char* model : kiln::test::kVaeModels) {
        const Vae vae = kiln::test::load_diffusers_vae(model);
        SafetensorsFile ref = SafetensorsFile::open(data_path(std::string(model) + "/modules.safetensors"));
        for (const std::string shape : {"sq", "wide"}) {
            const std::string p = "vae." + shape + ".";
            const Tensor image = ref.load(p + "image");
            const Vae::Posterior untiled = vae.encode(image);
            const Vae::Posterior diffusers{ref.load(p + "enc_mean"), ref.load(p + "enc_std")};
            for (int64_t budget : kBandBudgets) {
                const Vae::Posterior tiled = vae.encode_tiled(image, budget);
                const std::string what = std::string(model) + " " + shape + " bands of " + std::to_string(budget);
                expect_same_posterior(tiled, diffusers, what + " vs diffusers");
                expect_same_posterior(tiled, untiled, what + " vs encode()");
                std::printf("[ measure  ] %s vae.%s, bands of %lld bytes: mean %.2e from diffusers, %.2e from encode()\n",
                            model, shape.c_str(), static_cast<long long>(budget),
                            relative_error(tiled.mean, diffusers.mean), relative_error(tiled.mean, untiled.mean));
            }
        }
    }
}

TEST(VaeTiledEncode, SizesNotMultiplesOfTheFactorAndBatches) {
    // Heights and widths that reach a downsampler odd (76 -> 38 -> 19 -> 9, 44 -> 22 -> 11 -> 5), and a batch of
    // two images whose values differ in sign and scale: statistics mixed across the batch would show at once.
    const Vae vae = kiln::test::load_diffusers_vae("sd15-mini");
    for (int64_t budget : kBandBudgets) {
        const Tensor odd = image_of({1, 3, 76, 44}, 1);
        expect_same_posterior(vae.encode_tiled(odd, budget), vae.encode(odd), "76x44, bands of " + std::to_string(budget));
        Tensor batch = image_of({2, 3, 40, 56}, 2);
        for (int64_t i = batch.numel() / 2; i < batch.numel(); ++i) batch[i] = -0.5f * batch[i];
        expect_same_posterior(vae.encode_tiled(batch, budget), vae.encode(batch),
                              "a batch of 2, bands of " + std::to_string(budget));
    }
}

TEST(VaeTiledEncode, HoldsLessThanTheUntiledEncode) {
    // A 256x256 image through the mini VAE: the untiled encode holds two or three whole activations of the first
    // level with their scratch, the tiled one an activation and a band.
    const Vae vae = kiln::test::load_diffusers_vae("sd15-mini");
    const Tensor image = image_of({1, 3, 256, 256}, 3);
    auto peak_of = [&](auto&& encode) {
        reset_memory_peaks();
        const int64_t before = memory_stats().device("cpu").total.current;
        const Vae::Posterior p = encode();
        return memory_stats().device("cpu").total.peak - before;
    };
    const int64_t untiled = peak_of([&] { return vae.encode(image); });
    const int64_t tiled = peak_of([&] { return vae.encode_tiled(image, 64 << 10); });
    // The first level's activation: block_out_channels[0] channels of 256x256 float32.
    const int64_t activation = int64_t(vae.config().block_out_channels.at(0)) * 256 * 256 * 4;
    std::printf("[ measure  ] peak above the image: encode() %.1f MiB, encode_tiled %.1f MiB\n", untiled / 1048576.0,
                tiled / 1048576.0);
    EXPECT_LT(tiled, untiled - activation);
}

TEST(VaeTiledEncode, BadInputsAreInvalidArgument) {
    const Vae vae = kiln::test::load_diffusers_vae("sd15-mini");
    EXPECT_THROW(vae.encode_tiled(Tensor({1, 4, 16, 16}), 1 << 20), Error);  // 4 channels, not 3
    EXPECT_THROW(vae.encode_tiled(Tensor({1, 3, 4, 16}), 1 << 20), Error);   // smaller than the factor
    EXPECT_THROW(vae.encode_tiled(Tensor({1, 3, 16, 16}), 0), Error);
    const Vae decoder_only = kiln::test::load_diffusers_vae("sd15-mini", false);
    EXPECT_THROW(decoder_only.encode_tiled(Tensor({1, 3, 16, 16}), 1 << 20), Error);
}
