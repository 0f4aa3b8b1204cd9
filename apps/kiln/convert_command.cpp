// `kiln convert -m IN --weights W -o OUT.gguf` (models/gguf_convert.h).
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "models/gguf_convert.h"
#include "progress_bar.h"

namespace kiln::cli {

CLI::App* add_convert_command(CLI::App& app, ConvertOptions& o) {
    CLI::App* cmd = app.add_subcommand("convert", "write a checkpoint as GGUF with quantized weights, under the "
                                                  "single-file layout's names (kiln and stable-diffusion.cpp load it)");
    cmd->add_option("-m,--model", o.model, "the checkpoint: a .safetensors or .gguf single file, or a diffusers folder")
        ->required();
    cmd->add_option("--weights", o.weights, "f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q2_K | q3_K | q4_K | q5_K | q6_K")
        ->required()
        ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K"}));
    cmd->add_option("-o,--output", o.output, "the GGUF file to write (never the input)")->required();
    cmd->add_flag("-q,--quiet", o.quiet, "no progress bar");
    return cmd;
}

int run_convert(const ConvertOptions& o) {
    const ConvertPlan plan = plan_gguf_conversion(o.model, *weights_option(o.weights));
    ProgressBar bar("converting", !o.quiet && isatty(STDERR_FILENO));
    write_gguf_conversion(plan, o.output, [&](size_t done, size_t total) { bar.update(int(done), int(total)); });
    bar.finish();
    std::string converted;
    for (const auto& [dtype, count] : plan.converted)
        converted += (converted.empty() ? "" : ", ") + std::to_string(count) + " " + dtype_name(dtype);
    std::printf("%s: %zu tensors (converted: %s; the rest as stored), %.1f MiB\n", o.output.c_str(),
                plan.entries.size(), converted.empty() ? "none" : converted.c_str(),
                double(std::filesystem::file_size(o.output)) / 1048576.0);
    return 0;
}

}  // namespace kiln::cli
