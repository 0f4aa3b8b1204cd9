// Vae::decode_tiled against diffusers' AutoencoderKL decode (tests/data/<model>/modules.safetensors) and
// against kiln's own untiled decode, for bands of every size from the smallest (2 rows) to the whole image.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "common/fixtures.h"
#include "models/vae_fixture.h"
#include "core/memory.h"
#include "io/safetensors.h"
#include "kiln/error.h"
#include "models/vae/vae.h"

using namespace kiln;
using kiln::test::data_path;
using kiln::test::relative_error;

namespace {

// The tiled decode computes the same float32 arithmetic as decode(); only the order of some sums differs (the
// GroupNorm statistics are summed band by band, and BLAS splits a band's products differently from the whole
// image's), which is the same kind of difference as between kiln's decode and diffusers' float32 reference.
// So the bound is that comparison's (vae_fixture.h).
constexpr double kTolerance = kiln::test::kVaeTolerance;

Vae load_diffusers(const std::string& model) { return kiln::test::load_diffusers_vae(model, false); }

// 1 byte gives the smallest bands (2 rows); 64 KiB a few rows at these sizes; 1 GiB the whole image in one band.
const int64_t kBandBudgets[] = {1, 64 << 10, int64_t(1) << 30};

}  // namespace

TEST(VaeTiledDecode, MatchesDiffusersAndTheUntiledDecode) {
    for (const char* model : kiln::test::kVaeModels) {
        const Vae vae = load_diffusers(model);
        SafetensorsFile ref = SafetensorsFile::open(data_path(std::string(model) + "/modules.safetensors"));
        for (const std::string shape : {"sq", "wide"}) {
            const Tensor latent = ref.load("vae." + shape + ".latent");
            const Tensor expected = ref.load("vae." + shape + ".decoded");
            const Tensor untiled = vae.decode(latent);
            for (int64_t budget : kBandBudgets) {
                const Tensor tiled = vae.decode_tiled(latent, budget);
                ASSERT_EQ(tiled.shape(), expected.shape());
                const double to_diffusers = relative_error(tiled, expected), to_untiled = relative_error(tiled, untiled);
                EXPECT_LT(to_diffusers, kTolerance) << model << " " << shape << " bands of " << budget << " bytes";
                EXPECT_LT(to_untiled, kTolerance) << model << " " << shape << " bands of " << budget << " bytes";
                std::printf("[ measure  ] %s vae.%s, bands of %lld bytes: %.2e from diffusers, %.2e from decode()\n",
                            model, shape.c_str(), static_cast<long long>(budget), to_diffusers, to_untiled);
            }
        }
    }
}

TEST(VaeTiledDecode, EachImageOfABatchHasItsOwnStatistics) {
    // Two images whose values differ in sign and scale: statistics mixed across the batch would show at once.
    const Vae vae = load_diffusers("sd15-mini");
    SafetensorsFile ref = SafetensorsFile::open(data_path("sd15-mini/modules.safetensors"));
    const Tensor one = ref.load("vae.wide.latent");
    std::vector<float> two = one.values();
    for (float v : one.values()) two.push_back(-2.0f * v);
    const Tensor batch({2, one.dim(1), one.dim(2), one.dim(3)}, two);
    const Tensor tiled = vae.decode_tiled(batch, 1), untiled = vae.decode(batch);
    EXPECT_LT(relative_error(tiled, untiled), kTolerance);
}

TEST(VaeTiledDecode, HoldsLessThanTheUntiledDecode) {
    // A 256x256 image from the mini VAE: the untiled decode holds two or three whole activations of the last
    // level with their scratch, the tiled one one activation and a band.
    const Vae vae = load_diffusers("sd15-mini");
    Tensor latent({1, 4, 32, 32});
    for (int64_t i = 0; i < latent.numel(); ++i) latent[i] = static_cast<float>((i * 37 % 101) - 50) / 25.0f;
    auto peak_of = [&](auto&& decode) {
        reset_memory_peaks();
        const int64_t before = memory_stats().device("cpu").total.current;
        const Tensor image = decode();
        return memory_stats().device("cpu").total.peak - before;
    };
    const int64_t untiled = peak_of([&] { return vae.decode(latent); });
    const int64_t tiled = peak_of([&] { return vae.decode_tiled(latent, 64 << 10); });
    // The last level's activation: 8 channels of 256x256 float32, 2 MiB.
    const int64_t activation = int64_t(8) * 256 * 256 * 4;
    std::printf("[ measure  ] peak above the latents: decode() %.1f MiB, decode_tiled %.1f MiB\n",
                untiled / 1048576.0, tiled / 1048576.0);
    EXPECT_LT(tiled, untiled - activation);
}

TEST(VaeTiledDecode, BadInputsAreInvalidArgument) {
    const Vae vae = load_diffusers("sd15-mini");
    EXPECT_THROW(vae.decode_tiled(Tensor({1, 3, 8, 8}), 1 << 20), Error);
    EXPECT_THROW(vae.decode_tiled(Tensor({1, 4, 8, 8}), 0), Error);
}
