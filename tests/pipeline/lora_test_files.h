// LoRA files of random weights for the fixture models, made exactly as tests/data/lora/make_lora_oracle.py
// makes them (torch's CPU generator, the same targets in the same order), so that kiln and diffusers merge
// the same numbers.
#pragma once
#include <algorithm>
#include <ostream>
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

// LyCORIS LoHa / LoKr files of random factors, made as tests/data/lora/make_lycoris_oracle.py makes them (its
// factor_shapes: PEFT's own shapes for a decompose_factor dividing every dimension), on the LoRA cases' targets
// with LoCon (attention, resnet convolutions, text-encoder projections), in the naming AUTOMATIC1111 reads.
struct LycorisCase {
    std::string name, model, kind;  // kind: "loha" or "lokr"
    DType stored = DType::F32;
    uint64_t seed = 0;
    int64_t rank = 0;
    float alpha = 0, scale = 0;  // scale: the factor draws' (a power of two: exact)
    int64_t factor = 0;          // LoKr's decompose_factor f
    bool both = false;           // LoKr's decompose_both: w1 a product when rank < f / 2
};

inline void PrintTo(const LycorisCase& c, std::ostream* os) { *os << c.name; }  // gtest's name for a failure

// One module's factors in the order of draws: (part, shape). The weight's shape is [out, in] or [out, in, k, k].
inline std::vector<std::pair<std::string, Shape>> lycoris_factor_shapes(const LycorisCase& c, const Shape& w) {
    const int64_t out = w[0], in = w[1], k = w.size() == 4 ? w[2] * w[3] : 1, r = c.rank;
    if (c.kind == "loha") return {{"hada_w1_a", {out, r}}, {"hada_w1_b", {r, in * k}}, {"hada_w2_a", {out, r}}, {"hada_w2_b", {r, in * k}}};
    const int64_t f = c.factor, o2 = out / f, i2 = in / f;
    std::vector<std::pair<std::string, Shape>> parts;
    if (c.both && 2 * r < f) parts = {{"lokr_w1_a", {f, r}}, {"lokr_w1_b", {r, f}}};
    else parts = {{"lokr_w1", {f, f}}};
    if (2 * r < std::max(o2, i2)) {
        parts.push_back({"lokr_w2_a", {o2, r}});
        parts.push_back({"lokr_w2_b", {r, i2 * k}});
    } else {
        parts.push_back({"lokr_w2", w.size() == 4 ? Shape{o2, i2, w[2], w[3]} : Shape{o2, i2}});
    }
    return parts;
}

// The file's tensors in float32 (before its rounding), in the script's order of draws.
inline std::vector<std::pair<std::string, Tensor>> make_random_lycoris(const LycorisCase& c) {
    const bool sdxl = c.model == "sdxl-mini";
    struct Component { std::string folder, file, prefix; };
    std::vector<Component> components = {{"unet", "diffusion_pytorch_model.safetensors", "lora_unet_"},
                                         {"text_encoder", "model.safetensors", sdxl ? "lora_te1_" : "lora_te_"}};
    if (sdxl) components.push_back({"text_encoder_2", "model.safetensors", "lora_te2_"});
    TorchCpuGenerator g(c.seed);
    std::vector<std::pair<std::string, Tensor>> out;
    for (const Component& comp : components) {
        const SafetensorsFile f = SafetensorsFile::open(data_path(c.model + "/diffusers/" + comp.folder + "/" + comp.file));
        for (const std::string& name : f.names()) {  // sorted, as Python's sorted()
            if (!lora_target(comp.folder, name, true)) continue;
            std::string module = name.substr(0, name.size() - 7);  // without ".weight"
            for (char& ch : module) if (ch == '.') ch = '_';
            for (const auto& [part, shape] : lycoris_factor_shapes(c, f.info(name).shape)) {
                Tensor t = g.randn(shape);
                for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] *= c.scale;
                out.push_back({comp.prefix + module + "." + part, t});
            }
            out.push_back({comp.prefix + module + ".alpha", Tensor(Shape{}, {c.alpha})});
        }
    }
    return out;
}

// Writes the case's LoRA as NAME.safetensors in `dir`; returns its path.
inline std::string write_random_lora(const LoraCase& c, const TempDir& dir) {
    const std::string path = dir.file(c.name + ".safetensors");
    write_safetensors(path, make_random_lora(c), c.stored);
    return path;
}

}  // namespace kiln::test
