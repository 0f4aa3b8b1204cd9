// The subcommands of the kiln program, one function each.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace kiln::cli {

inline constexpr const char* kVersion = "kiln 0.1.0";

struct GenerateOptions {
    std::string model, prompt, output = "kiln.png", init_image;
    std::optional<std::string> negative;
    int width = 512, height = 512, steps = 20, batch_count = 1, clip_skip = 1;
    double cfg_scale = 7.5, strength = 0.75;
    std::string sampler, schedule, timestep_spacing, rng = "cpu", prediction;
    int64_t seed = -1;
    bool quiet = false;
};

int run_generate(const GenerateOptions& options, bool img2img);
int run_info(const std::string& path);

}  // namespace kiln::cli
