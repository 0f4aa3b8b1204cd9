// The subcommands of the kiln program, one function each.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "pipeline/vram_budget.h"

namespace kiln::cli {

inline constexpr const char* kVersion = "kiln 0.1.0";

// --device's default: $KILN_DEVICE if set (the test suites pin "cpu"), else "auto" (a GPU when there is one).
std::string default_device();

struct GenerateOptions {
    std::string model, prompt, output = "kiln.png", init_image;
    std::optional<std::string> negative;
    std::optional<int> width, height;  // img2img: the init image's size when not given
    int  steps = 20, batch_count = 1, batch_size = 1, clip_skip = 1;
    double cfg_scale = 7.5, strength = 0.75;
    std::string sampler, schedule, timestep_spacing, rng = "cpu", prediction;
    std::string weights;  // --weights f32|f16|bf16; empty: as the file stores them
    std::string device = default_device();  // --device cpu|cuda[:N]|vulkan[:N]|auto
    std::string precision;                  // --precision fp16|bf16|fp32; empty: fp16 on a GPU, fp32 on the CPU
    std::string seed = "-1";  // -1: pick one; else 0 .. 2^64-1
    bool quiet = false;
    bool profile = false;  // --profile: stage / op / memory tables on stderr at the end
    std::string trace;     // --trace FILE: Chrome trace
    std::string latents_out;  // --latents-out FILE: the final latents as safetensors ("latents")
    std::string vae_tiling = "auto";  // --vae-tiling auto|on|off
    std::string memory;    // --memory SIZE: bound on the resident set of a CPU run
    std::string vram;      // --vram SIZE|auto: bound on what kiln holds of the GPU's memory
    std::string prompt_syntax = "a1111";  // --prompt-syntax a1111|none
    std::string emphasis = "original";     // --emphasis original|no-norm|ignore|none
    std::vector<std::string> loras;       // --lora FILE[:WEIGHT], repeatable
    std::string lora_dir;                 // --lora-dir DIR: where the prompt's <lora:NAME:W> tags are found
    std::string embeddings_dir;  // --embeddings-dir DIR: textual-inversion embeddings named by file
    std::string unet;            // --unet FILE: the UNet from this file (LoadOptions::unet_path)
};

struct BenchOptions {
    std::vector<std::string> suites;  // unet | text | vae-decode | vae-decode-tiled | vae-encode | txt2img
    std::string arch, model, prediction;
    std::string unet;     // --unet FILE: the UNet from this file, as txt2img's (with -m)
    std::string weights;  // --weights f32|f16|bf16; empty: the file's (synthetic: f32)
    int width = 512, height = 512, batch = 1, steps = 20, warmup = 2, repeats = 10, threads = 0;
    std::string vae_park = "auto";  // --vae-park auto|host|device (vae-decode-tiled)
    std::string vram;                 // --vram SIZE|auto
    std::string device = default_device(), precision;
    std::string json;                 // --json FILE
    std::vector<std::string> compare; // --compare OLD NEW
    bool profile = false;
    std::string trace;
    // --suite quality (bench_quality.h): --reference FILE, -p PROMPT..., --seeds.
    std::string reference;
    std::vector<std::string> prompts;
    std::vector<uint64_t> seeds;
};

// --device and --precision resolved: the device (checked to exist) and the dtype activations have there.
// The CPU computes in float32 only: another --precision there is Unsupported.
struct Placement {
    Device device;
    DType precision = DType::F32;
};
Placement resolve_placement(const std::string& device, const std::string& precision);

// --vram SIZE|auto (empty: none) as a cap on what the device's backend holds (Backend::set_memory_limit); before
// the model loads, so that the weights count. auto: the device's free memory less a margin (pipeline/vram_budget.h).
// Returns the budget (bytes -1 when none), the one generation plans with (GenerationRequest::vram_budget), and
// describe() words it for a notice line. InvalidArgument on the CPU, Unsupported where the backend cannot cap.
VramBudget apply_vram_limit(const std::string& vram, const Device& device);

// --weights of txt2img, img2img, bench and plan: its help and its values.
inline constexpr const char* kWeightsHelp =
    "f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q2_K | q3_K | q4_K | q5_K | q6_K: precision of the "
    "weights in memory (default: as the file stores them; q*: 2- to 8-bit blocks for the linear and conv weights, "
    "docs/QUANT.md)";
inline const std::vector<std::string>& weights_choices() {
    static const std::vector<std::string> choices = {"f32",  "f16",  "bf16", "q8_0", "q4_0", "q4_1", "q5_0",
                                                     "q5_1", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K"};
    return choices;
}

// --weights as a dtype: empty (keep the file's) gives none; CLI11 has checked the spelling.
inline std::optional<DType> weights_option(const std::string& s) {
    if (s.empty()) return std::nullopt;
    if (s == "q8_0") return DType::Q8_0;
    if (s == "q4_0") return DType::Q4_0;
    if (s == "q4_1") return DType::Q4_1;
    if (s == "q5_0") return DType::Q5_0;
    if (s == "q5_1") return DType::Q5_1;
    if (s == "q4_K") return DType::Q4_K;
    if (s == "q5_K") return DType::Q5_K;
    if (s == "q6_K") return DType::Q6_K;
    if (s == "q2_K") return DType::Q2_K;
    if (s == "q3_K") return DType::Q3_K;
    return s == "f32" ? DType::F32 : s == "f16" ? DType::F16 : DType::BF16;
}

// `kiln convert` (convert_command.cpp): a checkpoint written as GGUF with quantized weights.
struct ConvertOptions {
    std::string model, output, weights;
    bool quiet = false;
};
CLI::App* add_convert_command(CLI::App& app, ConvertOptions& options);  // options must outlive app
int run_convert(const ConvertOptions& options);

int run_generate(const GenerateOptions& options, bool img2img);
int run_info(const std::string& path);
int run_info_devices();
int run_bench(const BenchOptions& options);

}  // namespace kiln::cli
