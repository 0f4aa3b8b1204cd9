// The kiln command line: txt2img, img2img, info, bench, prompt, plan.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <cstdlib>

#include "commands.h"
#include "plan_command.h"
#include "prompt_command.h"
#include "kiln/error.h"
#include "runtime/openblas_core.h"

int main(int argc, char** argv) {
    // Settings that libraries read once, when they load, so the program starts again with them set
    // (execv returns only on failure; then it carries on as it is). Each is set only where the user
    // has not chosen, so the second start changes nothing and runs on.
    // libgomp's OMP_WAIT_POLICY: its default busy-waiting costs milliseconds per parallel region
    // whenever another process shares the cores.
    // glibc's malloc tunables: by default every large tensor is mapped fresh and unmapped on free,
    // which costs millions of page faults per image (13% of a VAE decode); keeping freed memory in
    // the heap avoids that.
    // OpenBLAS's OPENBLAS_CORETYPE, where it took its generic kernels on a CPU it does not know
    // (runtime/openblas_core.h).
    bool restart = false;
    if (!std::getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        if (!std::getenv("GLIBC_TUNABLES"))
            setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=17179869184", 1);
        restart = true;
    }
    if (!std::getenv("OPENBLAS_CORETYPE")) {
        const std::string core = kiln::better_openblas_core();
        if (!core.empty()) {
            setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
            restart = true;
        }
    }
    if (restart) execv("/proc/self/exe", argv);
    CLI::App app{"kiln: Stable Diffusion inference (SD 1.x, SD 2.x, SDXL) that matches diffusers"};
    app.require_subcommand(1);
    app.set_version_flag("--version", kiln::cli::kVersion);

    kiln::cli::GenerateOptions gen;
    using kiln::cli::kWeightsHelp;
    const std::vector<std::string>& kWeightsChoices = kiln::cli::weights_choices();
    const char* kDeviceHelp = "cpu | cuda[:N] | vulkan[:N] | auto (a GPU when there is one, CUDA before Vulkan; kiln info --devices lists them)";
    const char* kPrecisionHelp = "fp16 | bf16 | fp32: activations on a GPU (default fp16; the CPU computes in fp32)";
    auto add_generation_options = [&](CLI::App* cmd, bool img2img) {
        cmd->add_option("-m,--model", gen.model, "checkpoint: a .safetensors or .ckpt file, or a diffusers folder")->required();
        cmd->add_option("-p,--prompt", gen.prompt, "what to draw")->required();
        cmd->add_option("-n,--negative-prompt", gen.negative, "what to avoid");
        cmd->add_option("-W,--width", gen.width, "image width in pixels, a multiple of 8 (default: the model's native size)");
        cmd->add_option("-H,--height", gen.height, "image height in pixels, a multiple of 8 (default: the model's native size)");
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
        cmd->add_option("--batch-count", gen.batch_count, "batches to make, seeds counting up")->capture_default_str();
        cmd->add_option("--batch-size", gen.batch_size,
                        "images sampled together from one seed's noise (as diffusers and ComfyUI batch them)")
            ->capture_default_str();
        cmd->add_option("--prompt-syntax", gen.prompt_syntax,
                        "a1111: AUTOMATIC1111's (weights, BREAK, long prompts, prompt editing; docs/PROMPTS.md); "
                        "none: the text as it is, cut at 77 tokens (diffusers)")
            ->check(CLI::IsMember({"a1111", "none"}))
            ->capture_default_str();
        cmd->add_option("--emphasis", gen.emphasis,
                        "AUTOMATIC1111's emphasis mode: original (weights, mean restored), no-norm (weights only), "
                        "ignore (syntax read, weights not applied), none (brackets are text)")
            ->check(CLI::IsMember({"original", "no-norm", "ignore", "none"}))
            ->capture_default_str();
        cmd->add_option("--lora", gen.loras,
                        "FILE[:WEIGHT]: merge a LoRA .safetensors file into the model (repeatable; docs/LORA.md)");
        cmd->add_option("--lora-dir", gen.lora_dir, "folder where the prompt's <lora:NAME:WEIGHT> tags find NAME.safetensors");
        cmd->add_option("--unet", gen.unet,
                        "FILE: the UNet from this file instead of the model's: a checkpoint, a UNet alone such as ComfyUI-GGUF's "
                        "quantized .gguf files, or a UNet in diffusers' layout (its .safetensors, its unet/ folder or a "
                        "diffusers model folder) (the text encoders and VAE stay the model's; docs/QUANT.md)");
        cmd->add_option("--embeddings-dir", gen.embeddings_dir,
                        "textual-inversion embeddings (.pt, .safetensors) the prompts name by file name");
        cmd->add_option("--clip-skip", gen.clip_skip, "1 = last text-encoder layer, 2 = penultimate")
            ->capture_default_str();
        cmd->add_option("--prediction", gen.prediction, "eps | v: what an SD 2.x single file predicts")
            ->check(CLI::IsMember({"eps", "epsilon", "v", "v_prediction"}));
        cmd->add_option("--weights", gen.weights, kWeightsHelp)->check(CLI::IsMember(kWeightsChoices));
        cmd->add_option("--device", gen.device, kDeviceHelp)->capture_default_str();
        cmd->add_option("--precision", gen.precision, kPrecisionHelp)->check(CLI::IsMember({"fp16", "bf16", "fp32"}));
        cmd->add_option("-o,--output", gen.output, "output PNG")->capture_default_str();
        cmd->add_option("--latents-out", gen.latents_out,
                        "also write the final latents (float32, before VAE scaling) to FILE.safetensors");
        cmd->add_option("--vae-tiling", gen.vae_tiling,
                        "auto | on | off: decode the image (and encode an init image) in bands of rows, the same "
                        "image in less memory (auto: where the whole pass does not fit)")
            ->check(CLI::IsMember({"auto", "on", "off"}))
            ->capture_default_str();
        cmd->add_option("--memory", gen.memory,
                        "SIZE (e.g. 1.6G): keep a CPU run's resident memory within it, streaming the UNet's weights "
                        "from the file and decoding in bands as far as needed (kiln plan shows the plan)");
        cmd->add_option("--vram", gen.vram,
                        "SIZE (e.g. 3G) or auto: cap what kiln holds of the GPU's memory, weights and cache included "
                        "(CUDA, Vulkan; auto: the free memory less max(512 MiB, 10%)): the weights leave the device "
                        "between stages or stream through it block by block, and the VAE decodes in bands, as far "
                        "as needed (kiln plan --vram shows the plan)");
        cmd->add_flag("-q,--quiet", gen.quiet, "no progress bar");
        cmd->add_flag("--profile", gen.profile, "print time per stage and per op kind, and memory, to stderr at the end");
        cmd->add_option("--trace", gen.trace, "write a Chrome trace (Perfetto, chrome://tracing) of the run to FILE");
        if (img2img) {
            cmd->add_option("-i,--init-img", gen.init_image, "the image to start from (PNG)")->required();
            cmd->add_option("--strength", gen.strength, "how much to change the image, (0, 1]")->capture_default_str();
        }
    };
    CLI::App* txt2img = app.add_subcommand("txt2img", "generate an image from a prompt");
    add_generation_options(txt2img, false);
    CLI::App* img2img = app.add_subcommand("img2img", "generate an image from a prompt and a starting image");
    add_generation_options(img2img, true);

    kiln::cli::BenchOptions bench_opts;
    CLI::App* bench = app.add_subcommand("bench", "time the standard suites (synthetic full-size models or -m MODEL)");
    bench->add_option("--suite", bench_opts.suites, "unet, text, vae-decode, vae-decode-tiled, vae-encode, txt2img (comma-separated); or quality (--weights against the model's own)")
        ->delimiter(',');
    bench->add_option("--arch", bench_opts.arch, "sd15 | sd21 | sdxl: deterministic random weights (default sd15)");
    bench->add_option("-m,--model", bench_opts.model, "a real checkpoint instead (.safetensors file or diffusers folder)");
    bench->add_option("--unet", bench_opts.unet, "FILE: with -m, the UNet from this file, as txt2img takes it (quality: measured against -m's own UNet)");
    bench->add_option("--prediction", bench_opts.prediction, "eps | v: what an SD 2.x single file predicts")
        ->check(CLI::IsMember({"eps", "epsilon", "v", "v_prediction"}));
    bench->add_option("--weights", bench_opts.weights, kWeightsHelp)->check(CLI::IsMember(kWeightsChoices));
    bench->add_option("-W,--width", bench_opts.width, "image width in pixels")->capture_default_str();
    bench->add_option("-H,--height", bench_opts.height, "image height in pixels")->capture_default_str();
    bench->add_option("--vae-park", bench_opts.vae_park,
                      "vae-decode-tiled: where the activations wait between bands, auto | host | device")
        ->check(CLI::IsMember({"auto", "host", "device"}))
        ->capture_default_str();
    bench->add_option("--vram", bench_opts.vram, "SIZE or auto: cap what kiln holds of the GPU's memory, as txt2img's --vram (the txt2img suite plans with it too)");
    bench->add_option("--batch", bench_opts.batch, "unet: the UNet batch (2 = one image with guidance); text/vae: rows")
        ->capture_default_str();
    bench->add_option("--steps", bench_opts.steps, "txt2img sampling steps")->capture_default_str();
    bench->add_option("--warmup", bench_opts.warmup, "untimed runs first")->capture_default_str();
    bench->add_option("--repeats", bench_opts.repeats, "timed runs")->capture_default_str();
    bench->add_option("--threads", bench_opts.threads, "CPU threads (default: OpenMP's)");
    bench->add_option("--device", bench_opts.device, kDeviceHelp)->capture_default_str();
    bench->add_option("--precision", bench_opts.precision, kPrecisionHelp)->check(CLI::IsMember({"fp16", "bf16", "fp32"}));
    bench->add_option("--json", bench_opts.json, "write the results (or the comparison) as JSON to FILE");
    bench->add_option("--compare", bench_opts.compare, "OLD.json NEW.json: print ratios new/old")->expected(2);
    bench->add_flag("--profile", bench_opts.profile, "print time per stage and op kind, and memory, to stderr");
    bench->add_option("--trace", bench_opts.trace, "write a Chrome trace of the whole bench to FILE");
    bench->add_option("--reference", bench_opts.reference, "quality: the model -m is measured against (default: -m's own weights)");
    bench->add_option("-p,--prompt", bench_opts.prompts, "quality: a prompt (repeat for several; default: 3 of the demo model's)");
    bench->add_option("--seeds", bench_opts.seeds, "quality: seeds, comma-separated (default 1,2,3)")->delimiter(',');

    std::string info_path;
    CLI::App* info = app.add_subcommand("info", "describe a model (architecture, components) or a PNG's parameters");
    bool info_devices = false;
    info->add_option("path", info_path, "model file/folder or PNG image");
    info->add_flag("--devices", info_devices, "list the devices kiln can run on, with their memory");
    kiln::cli::PromptOptions prompt_opts;
    CLI::App* prompt = kiln::cli::add_prompt_command(app, prompt_opts);
    kiln::cli::PlanOptions plan_opts;
    CLI::App* plan = kiln::cli::add_plan_command(app, plan_opts);
    kiln::cli::ConvertOptions convert_opts;
    CLI::App* convert = kiln::cli::add_convert_command(app, convert_opts);

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        // Usage errors read like every other error: one line, then a hint.
        std::fprintf(stderr, "kiln: error: %s (see kiln --help)\n", e.what());
        return 2;
    }

    try {
        if (txt2img->parsed()) return kiln::cli::run_generate(gen, false);
        if (img2img->parsed()) return kiln::cli::run_generate(gen, true);
        if (info->parsed()) {
            if (info_devices) return kiln::cli::run_info_devices();
            if (info_path.empty()) throw kiln::Error(kiln::ErrorKind::InvalidArgument, "info needs a path (or --devices)");
            return kiln::cli::run_info(info_path);
        }
        if (bench->parsed()) return kiln::cli::run_bench(bench_opts);
        if (prompt->parsed()) return kiln::cli::run_prompt(prompt_opts);
        if (plan->parsed()) return kiln::cli::run_plan(plan_opts);
        if (convert->parsed()) return kiln::cli::run_convert(convert_opts);
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
