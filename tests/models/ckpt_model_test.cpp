// A single-file checkpoint saved as .ckpt (PyTorch's zip format, written here from the sd15-mini fixture as
// torch.save lays it out, under 'state_dict' with the EMA copies and training entries real checkpoints have)
// loads through the same path as its .safetensors and computes exactly the same (bound 0: the same bytes).
#include <gtest/gtest.h>

#include <filesystem>

#include "common/fixtures.h"
#include "io/ckpt_test_writer.h"
#include "io/io_test_util.h"
#include "io/safetensors.h"
#include "models/fixture_unet_call.h"
#include "models/model.h"

using namespace kiln;
namespace fs = std::filesystem;
using kiln::test::data_path;

namespace {

using kiln::test::expect_identical;

// The fixture's tensors, plus for each UNet tensor an EMA copy named as LDM names them (dots dropped) holding
// zeros: a loader that took the EMA weights instead would compute something else.
std::vector<kiln::test::CkptTensor> with_ema(const SafetensorsFile& f) {
    std::vector<kiln::test::CkptTensor> out = kiln::test::ckpt_tensors(f);
    const std::string unet = "model.diffusion_model.";
    for (const std::string& name : f.names()) {
        const TensorInfo& ti = f.info(name);
        if (name.rfind(unet, 0) == 0) {
            std::string ema = "model_ema.diffusion_model";
            for (char c : name.substr(unet.size()))
                if (c != '.') ema += c;
            out.push_back({ema, ti.dtype, ti.shape, std::string(ti.nbytes, '\0')});
        }
    }
    out.push_back({"model_ema.decay", DType::F32, {}, std::string("\0\0\x80\x3f", 4)});
    out.push_back({"model_ema.num_updates", DType::I32, {}, std::string(4, '\0')});
    return out;
}

}  // namespace

TEST(CkptModel, LoadsAndComputesAsItsSafetensors) {
    kiln::test::TempDir dir;
    const std::string st = data_path("sd15-mini/sd15-mini.safetensors"), ckpt = dir.file("sd15-mini.ckpt");
    kiln::test::write_bytes(ckpt, kiln::test::ckpt_bytes(with_ema(SafetensorsFile::open(st))));
    const StableDiffusionModel a = load_model(ckpt), b = load_model(st);
    EXPECT_EQ(a.arch, Architecture::SD1);
    EXPECT_EQ(a.name, "sd15-mini");

    const kiln::test::FixtureUNetCall call;
    const UNetInputs in = call.inputs();
    expect_identical(a.unet->forward(in), b.unet->forward(in), "UNet");
    Tensor latents({1, 4, 8, 8});
    for (int64_t i = 0; i < latents.numel(); ++i) latents[i] = float((i * 37) % 19) / 9.0f - 1.0f;
    expect_identical(a.vae->decode(latents), b.vae->decode(latents), "VAE decode");
}

// Early SD 1.x checkpoints, saved with transformers before CLIPTextModel had its "text_model." level, load as
// AUTOMATIC1111 loads them (its checkpoint_dict_replacements add the level) and encode as the newer layout.
TEST(CkptModel, TextEncoderWithoutTheTextModelLevel) {
    kiln::test::TempDir dir;
    const std::string st = data_path("sd15-mini/sd15-mini.safetensors"), ckpt = dir.file("old.ckpt");
    std::vector<kiln::test::CkptTensor> tensors = with_ema(SafetensorsFile::open(st));
    const std::string level = "cond_stage_model.transformer.text_model.";
    int renamed = 0;
    for (kiln::test::CkptTensor& t : tensors)
        if (t.name.rfind(level, 0) == 0) {
            t.name = "cond_stage_model.transformer." + t.name.substr(level.size());
            ++renamed;
        }
    EXPECT_GT(renamed, 10);
    kiln::test::write_bytes(ckpt, kiln::test::ckpt_bytes(tensors));
    const StableDiffusionModel a = load_model(ckpt), b = load_model(st);
    EXPECT_EQ(a.arch, Architecture::SD1);
    const std::vector<int> ids = b.text_encoders[0].tokenizer.encode_padded("a red circle", 49407);
    expect_identical(a.text_encoders[0].model.encode(ids).last_hidden_state,
                     b.text_encoders[0].model.encode(ids).last_hidden_state, "text encoder");
}

// A diffusers folder whose components are PyTorch .bin files (older hub folders: torch.save of the state dict,
// read here by the safe pickle reader) loads and computes as the same folder with safetensors.
TEST(CkptModel, DiffusersFolderWithBinWeights) {
    kiln::test::TempDir dir;
    const fs::path src = data_path("sd15-mini/diffusers"), dst = dir.path() / "sd15-bin";
    fs::copy(src, dst, fs::copy_options::recursive);
    int converted = 0;
    for (const auto& entry : fs::recursive_directory_iterator(dst)) {
        if (entry.path().extension() != ".safetensors") continue;
        const fs::path bin = fs::path(entry.path()).replace_extension(".bin");
        kiln::test::CkptOptions bare;
        bare.nest = "";
        kiln::test::write_bytes(bin.string(),
                                kiln::test::ckpt_bytes(kiln::test::ckpt_tensors(SafetensorsFile::open(entry.path().string())), bare));
        fs::remove(entry.path());
        ++converted;
    }
    EXPECT_EQ(converted, 3);
    const StableDiffusionModel a = load_model(dst.string()), b = load_model(src.string());
    const kiln::test::FixtureUNetCall call;
    const UNetInputs in = call.inputs();
    expect_identical(a.unet->forward(in), b.unet->forward(in), "UNet");
    const std::vector<int> ids = b.text_encoders[0].tokenizer.encode_padded("a red circle", 49407);
    expect_identical(a.text_encoders[0].model.encode(ids).last_hidden_state,
                     b.text_encoders[0].model.encode(ids).last_hidden_state, "text encoder");
}
