// Textual-inversion embeddings against diffusers' load_textual_inversion (textual_inversion_reference.py in
// tools/ckpt-ti/scripts.tar.xz stored its final latents in tests/data/textual-inversion, packed). The embeddings'
// vectors are torch.randn from a seeded CPU generator, made here by kiln's copy of it, and written in
// AUTOMATIC1111's layouts: a .pt ('string_to_param', through kiln's pickle reader), an 'emb_params'
// .safetensors, and an SDXL .safetensors with clip_l and clip_g.
#include <gtest/gtest.h>

#include <cmath>

#include "common/fixtures.h"
#include "io/ckpt_test_writer.h"
#include "io/io_test_util.h"
#include "io/safetensors.h"
#include "pipeline/generate.h"
#include "rng/torch_cpu_generator.h"
#include "sampling/sampler_names.h"

using namespace kiln;

namespace {

const std::string kReference = std::string(KILN_TI_DATA) + "/ti-reference.safetensors";

Tensor randn(int64_t vectors, int64_t width, uint64_t seed) { return TorchCpuGenerator(seed).randn({vectors, width}); }

std::string f32_bytes(const Tensor& t) { return std::string(reinterpret_cast<const char*>(t.data()), t.numel() * 4); }

// Writes the case's embeddings into `dir` as AUTOMATIC1111 users have them.
void write_embeddings(const nlohmann::json& c, const StableDiffusionModel& model, const test::TempDir& dir) {
    bool pt = true;
    for (const auto& [name, e] : c.at("embeddings").items()) {
        const int64_t n = e.at("vectors");
        if (e.contains("seed")) {
            const Tensor v = randn(n, model.text_encoders[0].model.config().hidden, e.at("seed"));
            if (pt) {  // the webui's own .pt: {'string_to_param': {'*': vectors}, ...}
                test::CkptOptions o;
                o.nest = "string_to_param";
                test::write_bytes(dir.file(name + ".pt"), test::ckpt_bytes({{"*", DType::F32, v.shape(), f32_bytes(v)}}, o));
            } else {
                write_safetensors(dir.file(name + ".safetensors"), {{"emb_params", v}});
            }
            pt = !pt;
        } else {
            write_safetensors(dir.file(name + ".safetensors"),
                              {{"clip_l", randn(n, model.text_encoders[0].model.config().hidden, e.at("seed_l"))},
                               {"clip_g", randn(n, model.text_encoders[1].model.config().hidden, e.at("seed_g"))}});
        }
    }
}

// Image PSNR in dB of two images in [0, 1].
double psnr(const Tensor& a, const Tensor& b) {
    double se = 0;
    for (int64_t i = 0; i < a.numel(); ++i) se += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    return 10 * std::log10(double(a.numel()) / se);
}

Tensor decode(const StableDiffusionModel& model, Tensor latents) {
    for (int64_t i = 0; i < latents.numel(); ++i) latents[i] = latents[i] / model.vae_scale;
    Tensor image = model.vae->decode(latents);
    for (int64_t i = 0; i < image.numel(); ++i) image[i] = std::min(std::max(image[i] / 2.0f + 0.5f, 0.0f), 1.0f);
    return image;
}

class TextualInversionOracle : public testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(TextualInversionOracle, MatchesDiffusers) {
    const SafetensorsFile ref = SafetensorsFile::open(kReference);
    nlohmann::json c;
    for (const auto& x : nlohmann::json::parse(ref.metadata().at("cases")))
        if (x.at("id") == GetParam()) c = x;
    ASSERT_FALSE(c.is_null());
    const StableDiffusionModel model = load_model(test::data_path(c.at("model").get<std::string>() + "/diffusers"));
    test::TempDir dir;
    write_embeddings(c, model, dir);
    const std::vector<TextualInversion> embeddings = load_embeddings_dir(dir.path().string());
    ASSERT_EQ(embeddings.size(), c.at("embeddings").size());

    GenerationRequest req;
    req.prompt = c.at("prompt");
    req.negative_prompt = c.at("negative_prompt").get<std::string>();
    req.width = c.at("width");
    req.height = c.at("height");
    req.steps = c.at("steps");
    req.cfg_scale = c.at("guidance").get<float>();
    req.sampler = parse_sampler(c.at("sampler"));
    req.seed = c.at("seed");
    req.embeddings = &embeddings;
    const GenerationResult result = generate(model, req);
    EXPECT_EQ(result.used_embeddings.size(), embeddings.size());
    const Tensor expected = ref.load(GetParam());
    // The sweep's bound (tests/pipeline/sweep_regression_test.cpp): 3.2e-6 of scale per UNet call, (1 + 2g)
    // through guidance, two calls a step at most.
    const double g = c.at("guidance").get<double>();
    const double bound = 2.0 * req.steps * (1 + 2 * g) * 3.2e-6;
    const double err = test::relative_error(result.final_latent, expected);
    EXPECT_LE(err, bound);
    const double db = psnr(result.image, decode(model, expected));
    EXPECT_GE(db, 45.0);
    std::printf("[ ti ] %s latents %.2e (bound %.2e), image %.1f dB\n", GetParam().c_str(), err, bound, db);

    // Without the embeddings the names are words, and the picture is another: the comparison can fail.
    req.embeddings = nullptr;
    const GenerationResult words = generate(model, req);
    EXPECT_LT(psnr(words.image, decode(model, expected)), 45.0);
}

INSTANTIATE_TEST_SUITE_P(Cases, TextualInversionOracle, testing::Values("sd15", "sd2", "sdxl"));
