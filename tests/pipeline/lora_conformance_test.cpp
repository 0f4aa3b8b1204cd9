// Whole txt2img runs with a LoRA merged, against diffusers' load_lora_weights + fuse_lora on the same
// LoRA files (tests/data/lora: how they were made). kohya/A1111 naming with LoCon convolutions and diffusers/PEFT
// naming, SD 1.x and SDXL, diffusers folders and single files; the LoRA from the prompt's tag. LyCORIS LoHa and
// LoKr against PEFT's layers set up as AUTOMATIC1111 reads those files.
#include <gtest/gtest.h>

#include "kiln/error.h"
#include "lora_test_files.h"
#include "models/lora/lora_file.h"
#include "models/unet/unet_config.h"
#include "pipeline/generate.h"

using namespace kiln;
using namespace kiln::test;

namespace {

const std::vector<LoraCase> kCases = {
    {"sd15_kohya", "sd15-mini", "kohya", true, DType::F16, 11},
    {"sd15_diffusers", "sd15-mini", "diffusers", false, DType::F32, 12},
    {"sdxl_kohya", "sdxl-mini", "kohya", true, DType::F32, 13},
    {"sdxl_diffusers", "sdxl-mini", "diffusers", false, DType::F32, 14},
};

// The latent bound, derived as docs/CONFORMANCE.md derives the sweep's: a UNet call agrees with diffusers to
// 3.2e-6 of its output's scale; guidance g = 5 makes (1 + 2g) times that; at most two calls a step (Euler makes
// one); 4 steps. The merged weights add nothing of that order: both sides compute W + f x (up @ down) in float32,
// kiln's rank-4 sums in another order, a rounding or two (1.2e-7 relative) per weight. Without the LoRA the
// latents are 8.6e-3 to 1.2e-1 of their scale away (the script prints it), 30 to 400 times the bound; kept in
// fp16 after the merge they were up to 4.4e-4 away. LoHa and LoKr likewise: rank-2/4 products, then an elementwise
// product or a Kronecker product (one multiplication each) in float32, a few roundings per weight; without them
// the latents are 4.9e-2 to 2.6e-1 away (make_lycoris_oracle.py --kiln), 170 to 900 times the bound.
constexpr double kLatentBound = 2 * 4 * (1 + 2 * 5.0) * 3.2e-6;

GenerationRequest oracle_call() {  // the script's CALL
    GenerationRequest req;
    req.prompt = "a photo of an astronaut riding a horse on mars";
    req.negative_prompt = "blurry";
    req.width = req.height = 64;
    req.steps = 4;
    req.cfg_scale = 5.0f;
    req.sampler = "euler";
    req.seed = 7;
    return req;
}

// Runs the oracle's call with `lora` (a file named NAME.safetensors) on both layouts of `model`; compares the
// final latents with the oracle's NAME.final_latent.
void expect_oracle_latents(const std::string& model, const std::string& name, const std::string& lora,
                           const SafetensorsFile& oracle) {
    const nlohmann::json scheduler = read_json(data_path(model + "/diffusers/scheduler/scheduler_config.json"));
    for (const bool single_file : {false, true}) {
        LoadOptions options;
        options.loras = {{lora, name, 0.8, 0.8}};
        std::vector<std::string> notices;
        options.notice = [&](const std::string& line) { notices.push_back(line); };
        const StableDiffusionModel m =
            load_model(data_path(model + (single_file ? "/" + model + ".safetensors" : "/diffusers")), options);
        EXPECT_TRUE(notices.empty()) << notices.front();  // every module matched a layer
        GenerationRequest req = oracle_call();
        req.prompt += " <lora:" + name + ":0.8>";  // taken out of the prompt; the model holds the LoRA
        // The folder's spacing (a single file has none; the oracle ran the folder).
        if (scheduler.contains("timestep_spacing")) req.timestep_spacing = scheduler["timestep_spacing"].get<std::string>();
        const GenerationResult result = generate(m, req);
        const double err = relative_error(result.final_latent, oracle.load(name + ".final_latent"));
        EXPECT_LT(err, kLatentBound) << name << (single_file ? " single file" : " diffusers folder");
        std::printf("[ lora ] %-16s %-16s latents max error / scale %.2e (bound %.2e)\n", name.c_str(),
                    single_file ? "single file" : "diffusers folder", err, kLatentBound);
    }
}

class LoraConformance : public testing::TestWithParam<LoraCase> {};

// LyCORIS LoHa and LoKr against PEFT's LoHa/LoKr layers merged into diffusers' models, set up to compute what
// AUTOMATIC1111's Lora extension computes from the file (tests/data/lora/make_lycoris_oracle.py). LoHa and LoKr
// on attention, resnet 3x3 convolutions and the text encoders; LoKr with w1 whole (and, on 16-wide layers, no
// product at all: the webui's scale 1) and with w1 a product; an fp16 file.
const std::vector<LycorisCase> kLycorisCases = {
    {"sd15_loha", "sd15-mini", "loha", DType::F32, 21, 4, 2.0f, 0.25f, 0, false},
    {"sd15_lokr", "sd15-mini", "lokr", DType::F16, 22, 2, 1.0f, 0.125f, 4, false},
    {"sd15_lokr_both", "sd15-mini", "lokr", DType::F32, 23, 2, 1.0f, 0.25f, 8, true},
    {"sdxl_loha", "sdxl-mini", "loha", DType::F32, 24, 4, 2.0f, 0.25f, 0, false},
    {"sdxl_lokr", "sdxl-mini", "lokr", DType::F32, 25, 2, 1.0f, 0.125f, 4, false},
};

class LycorisConformance : public testing::TestWithParam<LycorisCase> {};

}  // namespace

TEST_P(LoraConformance, Txt2ImgMatchesDiffusersFuseLora) {
    const LoraCase& c = GetParam();
    const SafetensorsFile oracle = SafetensorsFile::open(std::string(KILN_SOURCE_DIR) + "/tests/data/lora/oracle.safetensors");
    TempDir dir;
    // The same random LoRA as the script's (its digest), so kiln merges the numbers diffusers merged.
    ASSERT_EQ(lora_digest(make_random_lora(c), dir), oracle.metadata().at(c.name + ".digest"));
    expect_oracle_latents(c.model, c.name, write_random_lora(c, dir), oracle);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LoraConformance, testing::ValuesIn(kCases),
                         [](const testing::TestParamInfo<LoraCase>& info) { return info.param.name; });

TEST_P(LycorisConformance, Txt2ImgMatchesPeftMerge) {
    const LycorisCase& c = GetParam();
    const SafetensorsFile oracle =
        SafetensorsFile::open(std::string(KILN_SOURCE_DIR) + "/tests/data/lora/lycoris_oracle.safetensors");
    TempDir dir;
    const auto tensors = make_random_lycoris(c);
    ASSERT_EQ(lora_digest(tensors, dir), oracle.metadata().at(c.name + ".digest"));  // the script's factors
    const std::string path = dir.file(c.name + ".safetensors");
    write_safetensors(path, tensors, c.stored);
    const LoraFile file = read_lora_file(path);  // the kind kiln read, so that a LoRA misread fails here
    for (const LoraModule& m : file.modules)
        ASSERT_EQ(m.kind, c.kind == "loha" ? LoraKind::LoHa : LoraKind::LoKr) << m.key;
    expect_oracle_latents(c.model, c.name, path, oracle);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LycorisConformance, testing::ValuesIn(kLycorisCases),
                         [](const testing::TestParamInfo<LycorisCase>& info) { return info.param.name; });

// A1111 also reads UNet modules in the original (LDM) naming, "lora_unet_input_blocks_1_1_proj_in": the same
// LoRA under those names merges into the same weights, bit for bit.
TEST(LoraNaming, LdmUNetNamesMergeTheSameModules) {
    const LoraCase c = kCases[0];
    TempDir dir;
    const std::string diffusers_named = write_random_lora(c, dir);
    LoadOptions options;
    options.loras = {{diffusers_named, c.name, 0.8, 0.8}};
    const StableDiffusionModel a = load_model(data_path(c.model + "/diffusers"), options);
    std::vector<std::pair<std::string, Tensor>> renamed;
    int ldm = 0;
    for (auto& [name, t] : make_random_lora(c)) {
        std::string key = name;
        const std::string prefix = "lora_unet_";
        if (key.rfind(prefix, 0) == 0) {
            // The diffusers module name ('_' back to '.' where the model's names have it), in LDM naming.
            const size_t dot = key.find('.');
            std::string module = key.substr(prefix.size(), dot - prefix.size());
            for (const std::string& n : SafetensorsFile::open(data_path(c.model + "/diffusers/unet/diffusion_pytorch_model.safetensors")).names()) {
                std::string u = n.substr(0, n.size() - 7);
                for (char& ch : u) if (ch == '.') ch = '_';
                if (n.size() > 7 && n.compare(n.size() - 7, 7, ".weight") == 0 && u == module) {
                    std::string l = unet_ldm_name(n, a.unet->config(), "");
                    l = l.substr(0, l.size() - 7);
                    for (char& ch : l) if (ch == '.') ch = '_';
                    key = prefix + l + key.substr(dot);
                    ++ldm;
                    break;
                }
            }
        }
        renamed.push_back({key, t});
    }
    ASSERT_GT(ldm, 0);
    write_safetensors(dir.file("ldm.safetensors"), renamed, c.stored);
    options.loras = {{dir.file("ldm.safetensors"), c.name, 0.8, 0.8}};
    const StableDiffusionModel b = load_model(data_path(c.model + "/diffusers"), options);
    GenerationRequest req = oracle_call();
    req.steps = 2;
    const Tensor la = generate(a, req).final_latent, lb = generate(b, req).final_latent;
    ASSERT_EQ(la.numel(), lb.numel());
    for (int64_t i = 0; i < la.numel(); ++i) ASSERT_EQ(la[i], lb[i]) << i;
}

// generate() takes a LoRA tag out of the prompt only for a LoRA the model was loaded with: otherwise the image
// would silently lack it.
TEST(LoraNaming, TagOfALoraTheModelLacksIsAnError) {
    const StableDiffusionModel model = load_model(data_path("sd15-mini/diffusers"));
    GenerationRequest req = oracle_call();
    req.steps = 1;
    req.prompt += " <lora:film:0.5>";
    try {
        generate(model, req);
        ADD_FAILURE() << "generated without the LoRA";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("loaded without LoRA 'film'"), std::string::npos) << e.what();
    }
}
