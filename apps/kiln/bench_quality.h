// `kiln bench --suite quality`: how far a model with quantized weights is from its reference (the same model
// in 16 bits) on the same txt2img calls: each UNet call's relative L2 error on the reference's own inputs, and
// the PSNR of the final images. docs/QUANT.md has the figures; docs/BENCHMARKS.md the report.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "commands.h"
#include "models/model.h"
#include "runtime/bench_report.h"

namespace kiln::cli {

struct QualitySettings {
    int width = 512, height = 512, steps = 20;
    float guidance = 7.5f;
    std::vector<std::string> prompts;
    std::vector<uint64_t> seeds;
};

// For each prompt and seed: the reference's txt2img, each of its UNet calls also run through `measured`'s UNet
// on the same inputs (so that errors do not compound along the trajectory), then `measured`'s own txt2img from
// the same seed, and the PSNR of the two 8-bit images. Both models must be on the same device in the same
// precision.
std::vector<QualityImage> measure_quality(const StableDiffusionModel& reference, const StableDiffusionModel& measured,
                                          const QualitySettings& settings);

// The whole `kiln bench --suite quality` run: loads both models as the options say, measures, prints the
// table and writes --json.
int run_quality_bench(const BenchOptions& options);

}  // namespace kiln::cli
