// LoRA files of random weights for the fixture models, made exactly as tests/data/lora/make_lora_oracle.py
// makes them (torch's CPU generator, the same targets in the same order), so that kiln and diffusers merge
// the same numbers.
#pragma once
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "cli/test_files.h"
#include "common/fixtures.h"
#include "image/sha256.h"
#include "io/safetensors.h"
#include "rng/torch_cpu_generator.h"

namespace kiln::test {

constexpr int kLoraRank = 4;
constexpr float kLoraAlpha = 2.0f;

struct LoraCase {
    std::string name, model, naming;  // naming: "kohya" or "diffusers"
    bool locon = false;
    DType stored = DType::F32;
    uint64_t seed = 0;
};

// The script's is_target: the UNet's attention projections (and resnet convolutions for LoCon), the text
// encoders' attention and MLP projections.
inline bool lora_target(const std::string& folder, const std::string& name, bool locon) {
    static const std::regex attn(R"(\.attn[12]\.to_(q|k|v|out\.0)\.weight$)"), conv(R"(\.resnets\.\d+\.conv[12]\.weight$)"),
        te(R"(\.self_attn\.(q|k|v|out)_proj\.weight$|\.mlp\.fc[12]\.weight$)");
    if (folder == "unet") return std::regex_search(name, attn) || (locon && std::regex_search(name, conv));
    return std::regex_search(name, te);
}

// The LoRA's tensors in float32 (before the file's rounding), in the script's order of draws.
inline std::vector<std::pair<std::string, Tensor>> make_random_lora(const LoraCase& c) {
    const bool sdxl = c.model == "sdxl-mini";
    struct Component { std::string folder, file, kohya, diffusers; };
    std::vector<Component> components = {{"unet", "diffusion_pytorch_model.safetensors", "lora_unet_", "unet."},
                                         {"text_encoder", "model.safetensors", sdxl ? "lora_te1_" : "lora_te_", "text_encoder."}};
    if (sdxl) components.push_back({"text_encoder_2", "model.safetensors", "lora_te2_", "text_encoder_2."});
    TorchCpuGenerator g(c.seed);
    std::vector<std::pair<std::string, Tensor>> out;
    for (const Component& comp : components) {
        const SafetensorsFile f = SafetensorsFile::open(data_path(c.model + "/diffusers/" + comp.folder + "/" + comp.file));
        for (const std::string& name : f.names()) {  // sorted, as Python's sorted()
            if (!lora_target(comp.folder, name, c.locon)) continue;
            const Shape w = f.info(name).shape;
            Shape down_shape = w, up_shape = {w[0], kLoraRank};
            down_shape[0] = kLoraRank;
            if (w.size() == 4) up_shape = {w[0], kLoraRank, 1, 1};
            Tensor down = g.randn(down_shape), up = g.randn(up_shape);
            for (int64_t i = 0; i < down.numel(); ++i) down.data()[i] *= 0.0625f;  // the script's SCALE, 2^-4: exact
            for (int64_t i = 0; i < up.numel(); ++i) up.data()[i] *= 0.0625f;
            std::string module = name.substr(0, name.size() - 7);  // without ".weight"
            if (c.naming == "kohya") {
                for (char& ch : module) if (ch == '.') ch = '_';
                out.push_back({comp.kohya + module + ".lora_down.weight", down});
                out.push_back({comp.kohya + module + ".lora_up.weight", up});
                out.push_back({comp.kohya + module + ".alpha", Tensor(Shape{}, {kLoraAlpha})});
            } else {
                out.push_back({comp.diffusers + module + ".lora_A.weight", down});
                out.push_back({comp.diffusers + module + ".lora_B.weight", up});
            }
        }
    }
    return out;
}

// The script's digest: SHA-256 over the tensors in name order, each its name then its float32 values.
inline std::string lora_digest(std::vector<std::pair<std::string, Tensor>> tensors, const TempDir& dir) {
    std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::string bytes;
    for (const auto& [name, t] : tensors) {
        bytes += name;
        bytes.append(reinterpret_cast<const char*>(t.data()), size_t(t.numel()) * sizeof(float));
    }
    write_bytes(dir.file("digest.bin"), bytes);
    return sha256_file_hex(dir.file("digest.bin"));
}

// Writes the case's LoRA as NAME.safetensors in `dir`; returns its path.
inline std::string write_random_lora(const LoraCase& c, const TempDir& dir) {
    const std::string path = dir.file(c.name + ".safetensors");
    write_safetensors(path, make_random_lora(c), c.stored);
    return path;
}

}  // namespace kiln::test
