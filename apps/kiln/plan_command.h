// `kiln plan`: how a generation would hold its memory under a budget (which weights stream or leave the GPU
// between stages, whether the VAE decodes in bands), the predicted peak of each stage, and the largest batch
// that fits, without generating anything.
#pragma once
#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

namespace kiln::cli {

struct PlanOptions {
    std::string model;
    std::optional<int> width, height;
    int batch_size = 1;
    std::string memory;  // --memory SIZE (CPU)
    std::string vram;    // --vram SIZE|auto (GPU)
    std::string device = "cpu";
    std::string precision;
    std::string vae_tiling = "auto";
    std::string prompt;  // and the next: as txt2img's options
    double cfg_scale = 7.5;
    std::string prompt_syntax = "a1111";
    std::vector<std::string> loras;  // --lora FILE[:WEIGHT]
    std::string unet;                // --unet FILE, as txt2img's
    std::string weights;             // --weights, as txt2img's (a quantized load's sizes)
    std::string lora_dir;
};

// Adds the subcommand to `app`; parsing writes into `options`, which must outlive it.
CLI::App* add_plan_command(CLI::App& app, PlanOptions& options);
int run_plan(const PlanOptions& options);

}  // namespace kiln::cli
