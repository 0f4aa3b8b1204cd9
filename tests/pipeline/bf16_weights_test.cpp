// --weights bf16 (LoadOptions::weights) on the fixture minis, against the same model in float32. bfloat16 keeps
// 8 significant bits, so converting a weight moves it by at most u = 2^-8 of itself (round to nearest even);
// biases, norms and all activations stay float32. Two properties:
//  - exactness: a bf16-weight model computes exactly what a float32 model does whose weight matrices were
//    rounded to 8 significant bits beforehand (by this test's own rounding), for whole txt2img runs: the
//    conversion is that rounding and nothing else, and the products see its values unchanged;
//  - size: that rounding moves each module's output by no more than the rounding can (the bound below).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include "common/fixtures.h"
#include "io/safetensors.h"
#include "models/clip/clip_config.h"
#include "models/unet/unet_config.h"
#include "models/vae/vae_config.h"
#include "pipeline/generate.h"

using namespace kiln;
using kiln::test::data_path;

namespace {

constexpr double kU = 1.0 / 256;  // bf16's unit roundoff, 2^-8

// x rounded to 8 significant bits, ties to even (nearbyint in the default rounding mode): bf16's rounding for
// every value an fp16 file holds (bf16 has float32's exponent range, so none is subnormal or overflows there).
float round_to_8_bits(float x) {
    if (x == 0 || !std::isfinite(x)) return x;
    int e = 0;
    std::frexp(x, &e);  // |x| = m 2^e, m in [0.5, 1): 8 bits are multiples of 2^(e - 8)
    return static_cast<float>(std::ldexp(std::nearbyint(std::ldexp(double(x), 8 - e)), e - 8));
}

// A source that hands out the weight matrices (what --weights converts) as float32 rounded to 8 bits, and
// counts them; everything else as the wrapped source has it.
class RoundedMatrices : public WeightSource {
public:
    explicit RoundedMatrices(const WeightSource& inner) : inner_(inner) {}
    bool has(const std::string& name) const override { return inner_.has(name); }
    Tensor load(const std::string& name) const override { return inner_.load(name); }
    std::vector<std::string> names() const override { return inner_.names(); }
    std::string describe() const override { return inner_.describe(); }
    Tensor load_matrix(const std::string& name, const Shape*) const override {
        ++matrices;
        Tensor t = inner_.load(name);
        for (float& v : t.values()) v = round_to_8_bits(v);
        return t;
    }
    mutable int matrices = 0;  // products one call of the component evaluates, each once

private:
    const WeightSource& inner_;
};

std::shared_ptr<const SafetensorsFile> open_shared(const std::string& path) {
    return std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path));
}

LoadOptions with_weights(DType weights) {
    LoadOptions o;
    o.weights = weights;
    return o;
}

// The model of a diffusers folder with its weight matrices rounded by RoundedMatrices (every component), and
// how many matrices each component has: text encoder(s), UNet, VAE.
struct Rounded {
    StableDiffusionModel model;
    std::vector<int> text_matrices;
    int unet_matrices = 0, vae_matrices = 0;
};

Rounded load_rounded(const std::string& model) {
    const std::string dir = data_path(model + "/diffusers/");
    Rounded r;
    r.model = load_model(dir, with_weights(DType::F32));
    for (size_t i = 0; i < r.model.text_encoders.size(); ++i) {
        const std::string part = "text_encoder" + std::string(i ? "_2" : "") + "/";
        const FileSource file(open_shared(dir + part + "model.safetensors"));
        const RoundedMatrices source(file);
        r.model.text_encoders[i].model = ClipTextModel::load(source, load_clip_text_config(dir + part + "config.json"));
        r.text_matrices.push_back(source.matrices);
    }
    {
        const FileSource file(open_shared(dir + "unet/diffusion_pytorch_model.safetensors"));
        const RoundedMatrices source(file);
        const UNetConfig config = unet_config_from_json(kiln::test::read_json(dir + "unet/config.json"));
        r.model.unet = std::make_unique<UNet>(UNet::load(source, config));
        r.unet_matrices = source.matrices;
    }
    {
        const FileSource file(open_shared(dir + "vae/diffusion_pytorch_model.safetensors"));
        const RoundedMatrices source(file);
        r.model.vae = std::make_unique<Vae>(Vae::load(source, load_vae_config(dir + "vae/config.json"), false));
        r.vae_matrices = source.matrices;
    }
    return r;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) { return a.shape() == b.shape() && a.values() == b.values(); }

GenerationRequest run(const char* sampler) {
    GenerationRequest r;
    r.prompt = "a red circle on a blue background";
    r.negative_prompt = "green";
    r.width = 64;
    r.height = 48;
    r.steps = 4;
    r.seed = 3;
    r.sampler = sampler;
    return r;
}

// Exactness: a whole run with guidance gives the rounded model's latents and images to the bit.
void check_exact(const StableDiffusionModel& bf16, const StableDiffusionModel& rounded, const std::string& m,
                 const char* sampler) {
    const GenerationResult got = generate(bf16, run(sampler)), want = generate(rounded, run(sampler));
    EXPECT_TRUE(bitwise_equal(got.final_latent, want.final_latent)) << m << " " << sampler;
    EXPECT_TRUE(bitwise_equal(got.image, want.image)) << m << " " << sampler;
}

// The bound. In a product y = W x whose weights each moved by at most u of themselves, y_i moves by
// sum_j d_ij W_ij x_j with |d_ij| <= u. The d are independent of each other and of x, so the move's L2 norm is
// at most u sqrt(sum W_ij^2 x_j^2), which is y's own norm for sums whose terms' signs do not line up (u/sqrt(3)
// for errors spread evenly). One call evaluates each of a module's M matrices once, so no value passes more
// than M of them; independent moves add in quadrature, and with unit gain between products (the convention
// of tests/gpu) the output's L2 error relative to its norm is at most sqrt(M) u, to first order. M is counted
// as the model loads.
void check_bound(const StableDiffusionModel& bf16, const StableDiffusionModel& f32, const Rounded& counts,
                 const std::string& m) {
    SafetensorsFile ref = SafetensorsFile::open(data_path(m + "/modules.safetensors"));
    Tensor sample = ref.load("unet.sq.sample"), context = ref.load("unet.sq.context");
    Tensor timestep = ref.load("unet.sq.timestep"), text_embeds, time_ids;
    UNetInputs in{&sample, &timestep, &context, nullptr, nullptr};
    if (ref.has("unet.sq.text_embeds")) {
        text_embeds = ref.load("unet.sq.text_embeds");
        time_ids = ref.load("unet.sq.time_ids");
        in.text_embeds = &text_embeds;
        in.time_ids = &time_ids;
    }
    auto check = [&](const char* what, const Tensor& got, const Tensor& want, int matrices) {
        const double err = kiln::test::relative_l2_error(got, want), bound = std::sqrt(double(matrices)) * kU;
        std::printf("[ bf16     ] %-9s %-5s L2 error %.2e (%.1f u), bound sqrt(%d) u = %.2e\n", m.c_str(), what, err,
                    err / kU, matrices, bound);
        EXPECT_LT(err, bound) << m << " " << what;
    };
    check("unet", bf16.unet->forward(in), f32.unet->forward(in), counts.unet_matrices);
    const Tensor latent = ref.load("vae.sq.latent");
    check("vae", bf16.vae->decode(latent), f32.vae->decode(latent), counts.vae_matrices);
    std::vector<int> ids(77);
    for (int i = 0; i < 77; ++i) ids[i] = (i * 37 + 5) % 1000;
    for (size_t e = 0; e < f32.text_encoders.size(); ++e)
        check(e ? "text2" : "text", bf16.text_encoders[e].model.encode(ids).last_hidden_state,
              f32.text_encoders[e].model.encode(ids).last_hidden_state, counts.text_matrices[e]);
}

}  // namespace

// One test for both properties, so that the models load once (ctest runs each test in a process of its own).
TEST(Bf16Weights, AreRoundedFloat32WeightsAndMoveModulesWithinTheirRounding) {
    const std::pair<std::string, const char*> cases[] = {
        {"sd15-mini", "ddim"}, {"sd2-mini", "euler_a"}, {"sdxl-mini", "dpmpp_2m"}};
    for (const auto& [m, sampler] : cases) {
        const std::string dir = data_path(m + "/diffusers");
        const StableDiffusionModel bf16 = load_model(dir, with_weights(DType::BF16));
        const StableDiffusionModel f32 = load_model(dir, with_weights(DType::F32));
        const Rounded rounded = load_rounded(m);
        check_exact(bf16, rounded.model, m, sampler);
        check_bound(bf16, f32, rounded, m);
    }
}
