// The standard `kiln bench` suites: what one timed run of each is, and the loop that times it.
#pragma once
#include <string>
#include <vector>

#include "models/model.h"
#include "models/synthetic_weights.h"
#include "runtime/bench_report.h"

namespace kiln::cli {

enum class BenchSuite { Unet, Text, VaeDecode, VaeDecodeTiled, VaeEncode, Txt2img };
// "unet", "text", "vae-decode", "vae-decode-tiled", "vae-encode", "txt2img"; anything else is InvalidArgument.
BenchSuite parse_bench_suite(const std::string& name);
const char* bench_suite_name(BenchSuite suite);

// fp16, bf16 or fp32, as --precision spells it.
inline const char* bench_precision_name(DType precision) {
    return precision == DType::F16 ? "fp16" : precision == DType::BF16 ? "bf16" : "fp32";
}

// A report as JSON in FILE (IO error naming it).
void write_json_file(const nlohmann::json& j, const std::string& path);

// The model components the suites need (a synthetic model builds only those).
SyntheticParts parts_for(const std::vector<BenchSuite>& suites);

struct SuiteSettings {
    int width = 512, height = 512;  // image size; latents are 1/8 of it
    int batch = 1;                  // unet: the UNet's batch (2 = one image with guidance); text/vae: rows
    int steps = 20;                 // txt2img
    int warmup = 2, repeats = 10;
    std::string vae_park = "auto";  // vae-decode-tiled: auto | host | device (where the activations wait)
    int64_t vram_budget = -1;       // txt2img: GenerationRequest::vram_budget (--vram)
};

// Checks the settings for this suite (InvalidArgument naming the option), makes the inputs, runs
// `warmup` untimed and `repeats` timed runs, and measures time, FLOPs (reported by the ops) and memory.
BenchSuiteResult run_bench_suite(const StableDiffusionModel& model, BenchSuite suite, const SuiteSettings& settings);

}  // namespace kiln::cli
