// VAE conformance with diffusers' AutoencoderKL (tests/data/<model>/modules.safetensors): decode of raw
// latents and the encoder's posterior, loading the weights from both file layouts.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "common/fixtures.h"
#include "models/vae_fixture.h"
#include "io/safetensors.h"
#include "kiln/error.h"
#include "models/vae/vae.h"
#include "models/vae/vae_single_file.h"

using namespace kiln;
using kiln::test::data_path;
using kiln::test::relative_error;

namespace {

constexpr double kTolerance = kiln::test::kVaeTolerance;  // derived in vae_fixture.h

const char* const kModels[] = {"sd15-mini", "sd2-mini", "sdxl-mini"};

std::shared_ptr<const SafetensorsFile> open_shared(const std::string& path) {
    return std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path));
}

Vae load_diffusers(const std::string& model) { return kiln::test::load_diffusers_vae(model); }

Vae load_single_file(const std::string& model) {
    auto file = open_shared(data_path(model + "/" + model + ".safetensors"));
    // The scaling factor belongs to the architecture; the diffusers config of the same model says it.
    const float scale = load_vae_config(data_path(model + "/diffusers/vae/config.json")).scaling_factor;
    VaeSingleFile layout = ldm_vae_layout(*file, scale);
    MappedSource source(file, layout.table, "vae");
    return Vae::load(source, layout.config);
}

void check_against_reference(const Vae& vae, const std::string& model, const std::string& layout) {
    SafetensorsFile ref = SafetensorsFile::open(data_path(model + "/modules.safetensors"));
    for (const std::string shape : {"sq", "wide"}) {
        const std::string p = "vae." + shape + ".";
        const double dec = relative_error(vae.decode(ref.load(p + "latent")), ref.load(p + "decoded"));
        const Vae::Posterior post = vae.encode(ref.load(p + "image"));
        const double mean = relative_error(post.mean, ref.load(p + "enc_mean"));
        const double std = relative_error(post.std, ref.load(p + "enc_std"));
        EXPECT_LT(dec, kTolerance) << model << " " << shape << " " << layout;
        EXPECT_LT(mean, kTolerance) << model << " " << shape << " " << layout;
        EXPECT_LT(std, kTolerance) << model << " " << shape << " " << layout;
        std::printf("[ measure  ] %s vae.%s (%s): decoded %.2e, enc_mean %.2e, enc_std %.2e\n", model.c_str(),
                    shape.c_str(), layout.c_str(), dec, mean, std);
    }
}

}  // namespace

TEST(Vae, MatchesDiffusersFromDiffusersFolders) {
    for (const char* m : kModels) check_against_reference(load_diffusers(m), m, "diffusers folder");
}

TEST(Vae, MatchesDiffusersFromSingleFiles) {
    for (const char* m : kModels) check_against_reference(load_single_file(m), m, "single file");
}

TEST(Vae, BatchedDecodeMatchesOneByOne) {
    const Vae vae = load_diffusers("sd15-mini");
    SafetensorsFile ref = SafetensorsFile::open(data_path("sd15-mini/modules.safetensors"));
    const Tensor one = ref.load("vae.wide.latent");
    std::vector<float> two = one.values();
    for (float v : one.values()) two.push_back(-v);
    const Tensor out = vae.decode(Tensor({2, 4, 12, 20}, two));
    ASSERT_EQ(out.dim(0), 2);
    const Tensor negated(one.shape(), std::vector<float>(two.begin() + one.numel(), two.end()));
    const Tensor singles[] = {vae.decode(one), vae.decode(negated)};  // each image of the batch alone
    for (int64_t i = 0; i < 2; ++i) {
        const Tensor& alone = singles[i];
        const int64_t n = alone.numel();
        const Tensor in_batch(alone.shape(), std::vector<float>(out.data() + i * n, out.data() + (i + 1) * n));
        // Not bitwise: BLAS blocks a product differently for another row count, so sums run in another order.
        EXPECT_LT(relative_error(in_batch, alone), kTolerance) << "image " << i << " of the batch";
    }
}

TEST(Vae, BadInputsAreInvalidArgument) {
    const Vae vae = load_diffusers("sdxl-mini");
    auto expect_invalid = [](auto&& call, const std::string& fragment) {
        try {
            call();
            ADD_FAILURE() << "no error for " << fragment;
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
        }
    };
    expect_invalid([&] { vae.decode(Tensor({1, 3, 8, 8})); }, "[1, 3, 8, 8]");
    expect_invalid([&] { vae.decode(Tensor({4, 8, 8})); }, "[4, 8, 8]");
    expect_invalid([&] { vae.decode(Tensor({1, 4, 0, 8})); }, "[1, 4, 0, 8]");
    expect_invalid([&] { vae.encode(Tensor({1, 4, 64, 64})); }, "[1, 4, 64, 64]");
    expect_invalid([&] { vae.encode(Tensor({1, 3, 4, 64})); }, "smaller than");
}
