// `kiln prompt`: shows how AUTOMATIC1111 reads a prompt (emphasis weights, the prompt of each step, the
// 75-token chunks each text encoder gets), as JSON on stdout.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace kiln::cli {

struct PromptOptions {
    std::string model;  // empty: kiln's built-in CLIP vocabulary
    std::string text;
    std::string embeddings_dir;  // empty: no textual-inversion embeddings
    int steps = 20;
};

// Adds the subcommand to `app`; parsing writes into `options`, which must outlive it.
CLI::App* add_prompt_command(CLI::App& app, PromptOptions& options);
int run_prompt(const PromptOptions& options);

}  // namespace kiln::cli
