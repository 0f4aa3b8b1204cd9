// kiln convert on the fixture and demo models: every tensor keeps name and shape and holds its stored bytes or
// the very blocks `--weights W` makes at load (read through the loader's WeightReader); `--weights` quantizes
// only what GGUF cannot hold in blocks beyond that (3x3, 1x1 convolutions); the file loaded with `--weights W`
// computes exactly what the original does with it (bound 0: same values, same ops); the input is never written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <tuple>

#include "common/fixtures.h"
#include "io/io_test_util.h"
#include "kiln/error.h"
#include "models/fixture_unet_call.h"
#include "models/clip/clip_single_file.h"
#include "models/gguf_convert.h"
#include "models/model.h"
#include "models/unet/unet_config.h"
#include "models/vae/vae_single_file.h"

using namespace kiln;
using kiln::test::data_path;

namespace {

using kiln::test::expect_identical;

std::vector<uint8_t> bytes_of(const SafetensorsFile& f, const std::string& name) {
    return std::vector<uint8_t>(f.raw(name), f.raw(name) + f.info(name).nbytes);
}
std::vector<uint8_t> bytes_of(const Tensor& t) {
    return std::vector<uint8_t>(t.blocks(), t.blocks() + dtype_storage_bytes(t.dtype(), t.numel()));
}

// Converts and compares tensor by tensor; returns how many tensors changed dtype.
int64_t convert_and_check(const std::string& input, DType w, const std::string& out) {
    write_gguf_conversion(plan_gguf_conversion(input, w), out);
    const SafetensorsFile src = SafetensorsFile::open(input), dst = SafetensorsFile::open(out);
    EXPECT_EQ(dst.names(), src.names());
    int64_t changed = 0;
    for (const std::string& name : src.names()) {
        const TensorInfo &a = src.info(name), &b = dst.info(name);
        EXPECT_EQ(a.shape, b.shape) << name;
        changed += a.dtype != b.dtype;
        if (a.dtype == b.dtype) EXPECT_EQ(bytes_of(dst, name), bytes_of(src, name)) << name;
    }
    return changed;
}

// The UNet's matrices as `--weights w` makes them at load, against the converted file's tensors.
void expect_unet_as_quantized_at_load(const std::string& input, const std::string& converted, DType w) {
    auto src = std::make_shared<const SafetensorsFile>(SafetensorsFile::open(input));
    const SafetensorsFile dst = SafetensorsFile::open(converted);
    std::vector<std::string> unknown;
    const auto table = unet_table_from_ldm(*src, "model.diffusion_model.", &unknown);
    MappedSource source(src, table, "UNet");
    source.weights_dtype = w;
    WeightReader reader(source);
    int same = 0, kept = 0;
    for (const auto& [internal, m] : table) {
        if (m.op != WeightMapping::Op::Copy) continue;
        const Tensor at_load = reader.get_matrix(internal);
        const TensorInfo& in_file = dst.info(m.file_name);
        if (!is_block_quantized(at_load.dtype())) {
            EXPECT_FALSE(is_block_quantized(in_file.dtype)) << m.file_name << " quantized, but not at load";
        } else if (is_block_quantized(in_file.dtype)) {
            EXPECT_EQ(bytes_of(dst, m.file_name), bytes_of(at_load)) << m.file_name;
            ++same;
        } else {  // GGUF cannot hold it in blocks
            EXPECT_NE(in_file.shape.back() % dtype_block_values(at_load.dtype()), 0) << m.file_name;
            ++kept;
        }
    }
    EXPECT_GT(same, 10) << dtype_name(w);
    EXPECT_GT(kept, 0) << dtype_name(w);  // 3x3 convolutions of whole-block rows
}

// The two models' UNet call (the fixture's inputs) and VAE decode of fixed latents, bit for bit.
void expect_unet_and_decode_identical(const StableDiffusionModel& a, const StableDiffusionModel& b,
                                      const kiln::test::FixtureUNetCall& call) {
    const UNetInputs in = call.inputs();
    expect_identical(a.unet->forward(in), b.unet->forward(in), "UNet");
    Tensor latents({1, 4, 8, 8});
    for (int64_t i = 0; i < latents.numel(); ++i) latents[i] = float((i * 37) % 19) / 9.0f - 1.0f;
    expect_identical(a.vae->decode(latents), b.vae->decode(latents), "VAE decode");
}

}  // namespace

class GgufConvert : public ::testing::TestWithParam<DType> {};

TEST_P(GgufConvert, Sd15MiniLoadsAsTheOriginalWithTheSameWeightsOption) {
    const DType w = GetParam();
    kiln::test::TempDir dir;
    const std::string input = data_path("sd15-mini/sd15-mini.safetensors"), out = dir.file("sd15-mini.gguf");
    EXPECT_GT(convert_and_check(input, w, out), 20);
    if (is_block_quantized(w)) expect_unet_as_quantized_at_load(input, out, w);
    LoadOptions options;
    options.weights = w;
    const StableDiffusionModel a = load_model(out, options), b = load_model(input, options);
    expect_unet_and_decode_identical(a, b, kiln::test::FixtureUNetCall());
}

INSTANTIATE_TEST_SUITE_P(Formats, GgufConvert,
                         ::testing::Values(DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K,
                                           DType::Q5_K, DType::Q6_K, DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(GgufConvertModels, Sd2SdxlAndDemoModelConvertAndLoad) {
    kiln::test::TempDir dir;
    for (const char* name : {"sd2-mini", "sdxl-mini"}) {
        const std::string out = dir.file(std::string(name) + ".gguf");
        EXPECT_GT(convert_and_check(data_path(std::string(name) + "/" + name + ".safetensors"), DType::Q4_0, out), 20);
        LoadOptions options;
        options.prediction = "epsilon";
        EXPECT_EQ(load_model(out, options).arch, std::string(name) == "sd2-mini" ? Architecture::SD2 : Architecture::SDXL);
    }
    const std::string demo = dir.file("demo.gguf");
    EXPECT_GT(convert_and_check(KILN_DEMO_MODEL, DType::Q8_0, demo), 100);
    expect_unet_as_quantized_at_load(KILN_DEMO_MODEL, demo, DType::Q8_0);
    // q2_K and q3_K: the fixtures have no rows of whole 256-value blocks; the demo model's 1280-wide layers do.
    for (DType w : {DType::Q2_K, DType::Q3_K}) {
        const std::string low = dir.file(std::string(dtype_name(w)) + ".gguf");
        EXPECT_GT(convert_and_check(KILN_DEMO_MODEL, w, low), 100) << dtype_name(w);
        const SafetensorsFile f = SafetensorsFile::open(low);
        int blocks = 0;
        for (const std::string& name : f.names()) blocks += f.info(name).dtype == w;
        EXPECT_GT(blocks, 5) << dtype_name(w);
        expect_unet_as_quantized_at_load(KILN_DEMO_MODEL, low, w);
    }
}

TEST(GgufConvertModels, NeverWritesTheInputAndNamesDamage) {
    kiln::test::TempDir dir;
    const std::string input = dir.file("in.safetensors");
    std::filesystem::copy_file(data_path("sd15-mini/sd15-mini.safetensors"), input);
    std::filesystem::create_hard_link(input, dir.file("link.gguf"));
    const auto size = std::filesystem::file_size(input);
    const ConvertPlan plan = plan_gguf_conversion(input, DType::Q8_0);
    for (const std::string& out : {input, dir.file("link.gguf"), dir.file("./in.safetensors")})
        EXPECT_THROW(write_gguf_conversion(plan, out), Error) << out;
    EXPECT_EQ(std::filesystem::file_size(input), size);
    EXPECT_FALSE(SafetensorsFile::open(input).is_gguf());

    // A NaN in a matrix being quantized: InvalidModel naming the tensor, and no output file.
    std::string victim;
    for (const ConvertEntry& e : plan.entries)
        if (victim.empty() && is_block_quantized(e.out.dtype)) victim = e.parts.front();
    std::vector<std::pair<std::string, Tensor>> tensors;
    const SafetensorsFile in = SafetensorsFile::open(input);
    for (const std::string& n : in.names()) {
        tensors.emplace_back(n, in.load(n));
        if (n == victim) tensors.back().second[5] = std::nanf("");
    }
    const std::string nan_file = dir.file("nan.safetensors"), out = dir.file("nan.gguf");
    write_safetensors(nan_file, tensors, DType::F32);
    try {
        write_gguf_conversion(plan_gguf_conversion(nan_file, DType::Q4_0), out);
        ADD_FAILURE() << "a NaN weight was quantized";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidModel) << e.what();
        EXPECT_NE(std::string(e.what()).find(victim), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(GgufConvertModels, ComfyUiUnetOnlyFileIsAClearError) {
    kiln::test::TempDir dir;
    const std::string path = dir.file("unet-only.gguf");
    const std::vector<uint8_t> zeros(32 * 4 * 9 * 2, 0);
    write_gguf(path, {{"input_blocks.0.0.weight", {32, 4, 3, 3}, DType::F16}, {"out.2.weight", {4, 32, 3, 3}, DType::F16}},
               [&](size_t, const GgufBytes& write) { write(zeros.data(), zeros.size()); });
    try {
        load_model(path);
        ADD_FAILURE() << "a UNet-only file loaded";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
        EXPECT_NE(std::string(e.what()).find("ComfyUI-GGUF"), std::string::npos) << e.what();
    }
}

// The writer's refusals (io/gguf_writer.h): what GGUF cannot hold, and producers that miscount; no file is left.
TEST(GgufConvertModels, WriterRefusesWhatGgufCannotHold) {
    kiln::test::TempDir dir;
    const std::string path = dir.file("bad.gguf");
    auto refused = [&](const std::vector<GgufWriteSpec>& specs, const std::string& part, int bytes = 0) {
        const std::vector<uint8_t> b(size_t(bytes), 0);
        try {
            write_gguf(path, specs, [&](size_t, const GgufBytes& write) { write(b.data(), b.size()); });
            ADD_FAILURE() << "accepted: " << part;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
        }
        EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << part;
    };
    refused({{"conv", {32, 32, 3, 3}, DType::Q8_0}}, "innermost dimension 3");  // ggml blocks run along it
    refused({{"k", {2, 128}, DType::Q4_K}}, "whole blocks of 256");
    refused({{"a", {32}, DType::F32}, {"a", {32}, DType::F32}}, "given twice");
    refused({{"b", {1, 1, 1, 1, 1}, DType::F32}}, "at most 4");
    refused({{"u", {4}, DType::U8}}, "U8");
    refused({{"short", {8}, DType::F32}}, "got 0 of its 32 bytes");
    refused({{"long", {1}, DType::F32}}, "more bytes", 8);
}

// ---- Diffusers folders: converted under the original layout's names (models/diffusers_as_original.h) ----

namespace {

// What a single file holds that its diffusers folder has no counterpart for, so neither has the folder's conversion:
// the DDPM schedule buffers, CLIP's position_ids and logit_scale, and SD 2.x's unused OpenCLIP text_projection.
bool only_in_single_file(const std::string& name) {
    static const std::set<std::string> ddpm = {
        "betas", "alphas_cumprod", "alphas_cumprod_prev", "sqrt_alphas_cumprod", "sqrt_one_minus_alphas_cumprod",
        "log_one_minus_alphas_cumprod", "sqrt_recip_alphas_cumprod", "sqrt_recipm1_alphas_cumprod",
        "posterior_variance", "posterior_log_variance_clipped", "posterior_mean_coef1", "posterior_mean_coef2"};
    return ddpm.count(name) || name.ends_with("position_ids") || name.ends_with("logit_scale") ||
           name == "cond_stage_model.model.text_projection";
}

void expect_same_mapping(const std::optional<WeightMapping>& inverse, const WeightMapping& forward, const std::string& n) {
    ASSERT_TRUE(inverse.has_value()) << n << " has no original name";
    EXPECT_EQ(inverse->file_name, forward.file_name) << n;
    EXPECT_EQ(int(inverse->op), int(forward.op)) << n;
    EXPECT_EQ(inverse->part, forward.part) << n;
    EXPECT_EQ(inverse->parts, forward.parts) << n;
}

}  // namespace

// The inverses give back, for every diffusers name the loader's tables hold, the very mapping the table holds.
TEST(GgufConvertDiffusers, InverseNamesAreTheLoadersTablesBackwards) {
    for (const std::string model : {"sd15-mini", "sd2-mini", "sdxl-mini"}) {
        SCOPED_TRACE(model);
        const std::string path = data_path(model + "/" + model + ".safetensors");
        auto file = std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path));
        const Architecture arch = detect_single_file_architecture(*file);
        int checked = 0;
        auto check_clip = [&](const ClipSingleFile& clip, const char* prefix, bool openclip) {
            for (const auto& [internal, m] : clip.table) {
                expect_same_mapping(openclip ? openclip_original(internal, prefix) : clip_hf_original(internal, prefix),
                                    m, internal);
                ++checked;
            }
        };
        if (arch == Architecture::SD1) check_clip(clip_hf_layout(*file, kSd1ClipPrefix), kSd1ClipPrefix, false);
        if (arch == Architecture::SD2) check_clip(openclip_layout(*file, kSd2OpenClipPrefix), kSd2OpenClipPrefix, true);
        if (arch == Architecture::SDXL) {
            check_clip(clip_hf_layout(*file, kSdxlClipPrefix), kSdxlClipPrefix, false);
            check_clip(openclip_layout(*file, kSdxlOpenClipPrefix), kSdxlOpenClipPrefix, true);
        }
        const VaeSingleFile vae = ldm_vae_layout(*file, 0.18215f);
        for (const auto& [internal, m] : vae.table) {
            const size_t rank = m.op == WeightMapping::Op::Squeeze ? 2 : file->info(m.file_name).shape.size();
            expect_same_mapping(ldm_vae_original(internal, rank, int(vae.config.block_out_channels.size())), m, internal);
            ++checked;
        }
        LoadOptions options;
        options.prediction = "epsilon";
        const UNetConfig unet = load_model(path, options).unet->config();
        for (const auto& [internal, m] : unet_table_from_ldm(*file, "model.diffusion_model.", nullptr)) {
            EXPECT_EQ(unet_ldm_name(internal, unet, "model.diffusion_model."), m.file_name) << internal;
            ++checked;
        }
        EXPECT_GT(checked, 900);
    }
}

class GgufConvertDiffusers : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

// The folder's file holds the single file's tensors byte for byte (but those above that the folder has no counterpart
// for), and loads to compute what the folder computes, with the same --weights.
TEST_P(GgufConvertDiffusers, FolderGivesTheSingleFilesTensorsAndComputesAsTheFolder) {
    const auto& [model, w] = GetParam();
    kiln::test::TempDir dir;
    const std::string folder = data_path(model + "/diffusers"), single = data_path(model + "/" + model + ".safetensors");
    const std::string from_folder = dir.file("folder.gguf"), from_single = dir.file("single.gguf");
    write_gguf_conversion(plan_gguf_conversion(folder, w), from_folder);
    write_gguf_conversion(plan_gguf_conversion(single, w), from_single);
    const SafetensorsFile a = SafetensorsFile::open(from_folder), b = SafetensorsFile::open(from_single);
    int compared = 0, quantized = 0;
    for (const std::string& name : b.names()) {
        if (!a.has(name)) {
            EXPECT_TRUE(only_in_single_file(name)) << name << " missing from the folder's conversion";
            continue;
        }
        const TensorInfo &x = a.info(name), &y = b.info(name);
        EXPECT_EQ(x.shape, y.shape) << name;
        EXPECT_EQ(x.dtype, y.dtype) << name;
        if (x.shape == y.shape && x.dtype == y.dtype) {
            EXPECT_EQ(bytes_of(a, name), bytes_of(b, name)) << name;
        }
        ++compared;
        quantized += is_block_quantized(x.dtype);
    }
    for (const std::string& name : a.names()) EXPECT_TRUE(b.has(name)) << name << " only in the folder's conversion";
    EXPECT_GT(compared, 900);
    if (is_block_quantized(w)) {
        EXPECT_GT(quantized, 20);
    }

    LoadOptions options;
    options.weights = w;
    options.prediction = "epsilon";  // an SD 2.x single file needs it; it changes no weight
    const StableDiffusionModel c = load_model(from_folder, options), d = load_model(folder, options);
    ASSERT_EQ(c.arch, d.arch);
    ASSERT_EQ(c.text_encoders.size(), d.text_encoders.size());
    for (size_t i = 0; i < c.text_encoders.size(); ++i) {
        const std::vector<int> ids = d.text_encoders[i].tokenizer.encode_padded("a red circle", 49407);
        const ClipTextOutput x = c.text_encoders[i].model.encode(ids), y = d.text_encoders[i].model.encode(ids);
        expect_identical(x.last_hidden_state, y.last_hidden_state, "text encoder " + std::to_string(i));
        expect_identical(x.penultimate, y.penultimate, "text encoder penultimate " + std::to_string(i));
        expect_identical(x.pooled, y.pooled, "text encoder pooled " + std::to_string(i));
    }
    expect_unet_and_decode_identical(c, d, kiln::test::FixtureUNetCall(model));
}

INSTANTIATE_TEST_SUITE_P(Models, GgufConvertDiffusers,
                         ::testing::Combine(::testing::Values("sd15-mini", "sd2-mini", "sdxl-mini"),
                                            ::testing::Values(DType::F16, DType::Q8_0, DType::Q4_K)),
                         [](const auto& info) {
                             std::string name = std::get<0>(info.param) + "_" + dtype_name(std::get<1>(info.param));
                             for (char& ch : name)
                                 if (ch == '-') ch = '_';
                             return name;
                         });

// A folder lacking a component, or holding a tensor the loader does not know, is an error naming it; the output is
// never one of the folder's files, and nothing in the folder changes.
TEST(GgufConvertDiffusersErrors, MissingComponentUnknownTensorAndTheFolderUntouched) {
    kiln::test::TempDir dir;
    const std::filesystem::path folder = std::filesystem::path(dir.file("sd15"));
    std::filesystem::copy(data_path("sd15-mini/diffusers"), folder, std::filesystem::copy_options::recursive);
    auto snapshot = [&] {
        std::map<std::string, std::vector<uint8_t>> files;
        for (const auto& entry : std::filesystem::recursive_directory_iterator(folder))
            if (entry.is_regular_file()) {
                std::ifstream f(entry.path(), std::ios::binary);
                files[entry.path().string()] = std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
            }
        return files;
    };
    const auto before = snapshot();
    auto expect_error = [&](const std::string& input, const std::string& output,
                            const std::vector<std::string>& parts) {
        try {
            write_gguf_conversion(plan_gguf_conversion(input, DType::Q8_0), output);
            ADD_FAILURE() << "converted " << input << " to " << output;
        } catch (const Error& e) {
            for (const std::string& part : parts)
                EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
        }
    };
    const std::string unet_file = (folder / "unet" / "diffusion_pytorch_model.safetensors").string();
    expect_error(folder.string(), unet_file, {"is the input file", unet_file});
    expect_error(folder.string(), (folder / "new.gguf").string(), {"inside the input folder"});
    expect_error((folder / "unet" / "..").string(), dir.file("sd15/x.gguf"), {"inside the input folder"});
    write_gguf_conversion(plan_gguf_conversion(folder.string(), DType::Q8_0), dir.file("out.gguf"));
    EXPECT_TRUE(snapshot() == before);

    // A tensor the UNet does not have.
    const std::filesystem::path unet_copy = dir.file("unet.safetensors");
    std::filesystem::rename(unet_file, unet_copy);
    std::vector<std::pair<std::string, Tensor>> tensors;
    const SafetensorsFile unet = SafetensorsFile::open(unet_copy.string());
    for (const std::string& n : unet.names()) tensors.emplace_back(n, unet.load(n));
    tensors.emplace_back("down_blocks.0.resnets.0.extra.weight", Tensor({4, 4}));
    write_safetensors(unet_file, tensors, DType::F16);
    expect_error(folder.string(), dir.file("extra.gguf"), {"down_blocks.0.resnets.0.extra.weight", unet_file});
    std::filesystem::rename(unet_copy, unet_file);

    // No VAE weights.
    const std::string vae_file = (folder / "vae" / "diffusion_pytorch_model.safetensors").string();
    std::filesystem::rename(vae_file, dir.file("vae.safetensors"));
    expect_error(folder.string(), dir.file("novae.gguf"), {"diffusion_pytorch_model", (folder / "vae").string()});
    std::filesystem::rename(dir.file("vae.safetensors"), vae_file);
    EXPECT_TRUE(snapshot() == before);
    for (const char* out : {"extra.gguf", "novae.gguf"}) EXPECT_FALSE(std::filesystem::exists(dir.file(out))) << out;
}
