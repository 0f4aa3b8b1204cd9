// `kiln plan`: how a generation would hold its memory under a budget (which weights stream, whether the VAE
// decodes in bands) and the predicted resident set of each stage, without generating anything.
#pragma once
#include <CLI/CLI.hpp>
#include <optional>
#include <string>

namespace kiln::cli {

struct PlanOptions {
    std::string model;
    std::optional<int> width, height;
    int batch_size = 1;
    std::string memory;  // --memory SIZE
    std::string device = "cpu";  // --device: a GPU's plan is its --vram budget only, for now
    std::string vram;    // --vram SIZE|auto
    std::string vae_tiling = "auto";
};

// Adds the subcommand to `app`; parsing writes into `options`, which must outlive it.
CLI::App* add_plan_command(CLI::App& app, PlanOptions& options);
int run_plan(const PlanOptions& options);

}  // namespace kiln::cli
