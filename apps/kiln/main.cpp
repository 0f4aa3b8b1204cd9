// The kiln command line: txt2img, img2img, info.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <cstdlib>

#include "commands.h"
#include "kiln/error.h"

int main(int argc, char** argv) {
    // libgomp reads OMP_WAIT_POLICY once, when it loads. Its default busy-waiting costs milliseconds
    // per parallel region whenever another process shares the cores, so run again with passive
    // waiting unless the user chose a policy.
    if (!std::getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        execv("/proc/self/exe", argv);  // returns only on failure; then carry on as we are
    }
    CLI::App app{"kiln: Stable Diffusion inference (SD 1.x, SD 2.x, SDXL) that matches diffusers"};
    app.require_subcommand(1);
    app.set_version_flag("--version", kiln::cli::kVersion);

    kiln::cli::GenerateOptions gen;
    auto add_generation_options = [&](CLI::App* cmd, bool img2img) {
        cmd->add_option("-m,--model", gen.model, "checkpoint: a .safetensors file or a diffusers folder")->required();
        cmd->add_option("-p,--prompt", gen.prompt, "what to draw")->required();
        cmd->add_option("-n,--negative-prompt", gen.negative, "what to avoid");
        cmd->add_option("-W,--width", gen.width, "image width in pixels, a multiple of 8")->capture_default_str();
        cmd->add_option("-H,--height", gen.height, "image height in pixels, a multiple of 8")->capture_default_str();
        cmd->add_option("--steps", gen.steps, "sampling steps")->capture_default_str();
        cmd->add_option("--cfg-scale", gen.cfg_scale, "classifier-free guidance scale")->capture_default_str();
        cmd->add_option("--sampler", gen.sampler,
                        "ddim, pndm (PLMS), euler, euler_a (Euler a), heun, lms, dpmpp_2m (DPM++ 2M), "
                        "dpmpp_2m_karras, unipc, lcm; default: the model's own scheduler");
        cmd->add_option("--scheduler", gen.schedule, "schedule type for the sampler, e.g. karras");
        cmd->add_option("--timestep-spacing", gen.timestep_spacing, "leading | linspace | trailing")
            ->check(CLI::IsMember({"leading", "linspace", "trailing"}));
        cmd->add_option("--seed", gen.seed, "random seed (-1: pick one)")->capture_default_str();
        cmd->add_option("--rng", gen.rng, "noise stream: cpu (diffusers/ComfyUI) or cuda (AUTOMATIC1111 GPU seeds)")
            ->check(CLI::IsMember({"cpu", "cuda"}))
            ->capture_default_str();
        cmd->add_option("--batch-count", gen.batch_count, "images to make, seeds counting up")->capture_default_str();
        cmd->add_option("--clip-skip", gen.clip_skip, "1 = last text-encoder layer, 2 = penultimate")
            ->capture_default_str();
        cmd->add_option("--prediction", gen.prediction, "eps | v: what an SD 2.x single file predicts")
            ->check(CLI::IsMember({"eps", "epsilon", "v", "v_prediction"}));
        cmd->add_option("-o,--output", gen.output, "output PNG")->capture_default_str();
        cmd->add_flag("-q,--quiet", gen.quiet, "no progress bar");
        if (img2img) {
            cmd->add_option("-i,--init-img", gen.init_image, "the image to start from (PNG)")->required();
            cmd->add_option("--strength", gen.strength, "how much to change the image, (0, 1]")->capture_default_str();
        }
    };
    CLI::App* txt2img = app.add_subcommand("txt2img", "generate an image from a prompt");
    add_generation_options(txt2img, false);
    CLI::App* img2img = app.add_subcommand("img2img", "generate an image from a prompt and a starting image");
    add_generation_options(img2img, true);

    std::string info_path;
    CLI::App* info = app.add_subcommand("info", "describe a model (architecture, components) or a PNG's parameters");
    info->add_option("path", info_path, "model file/folder or PNG image")->required();

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }

    try {
        if (txt2img->parsed()) return kiln::cli::run_generate(gen, false);
        if (img2img->parsed()) return kiln::cli::run_generate(gen, true);
        if (info->parsed()) return kiln::cli::run_info(info_path);
    } catch (const kiln::Error& e) {
        std::fprintf(stderr, "kiln: error: %s\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "kiln: error: out of memory\n");
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kiln: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
