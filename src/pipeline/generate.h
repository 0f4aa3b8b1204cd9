// txt2img and img2img: a loaded model, a request, and the image diffusers would give.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "models/model.h"
#include "pipeline/prompt_encoding.h"
#include "pipeline/vae_tiling.h"

namespace kiln {

struct GenerationRequest {
    std::string prompt;
    std::optional<std::string> negative_prompt;  // absent: "" (SDXL: zero embeddings, as diffusers)
    int width = 512, height = 512;
    int steps = 20;
    float cfg_scale = 7.5f;
    std::string sampler;                         // kiln name (see parse_sampler); empty = the model's own
    std::optional<std::string> timestep_spacing; // leading | linspace | trailing
    uint64_t seed = 0;
    std::string rng = "cpu";                     // cpu | cuda (torch's generators)
    int clip_skip = 1;                           // 1 = last layer, 2 = penultimate (AUTOMATIC1111's count)
    // How the prompts are read: AUTOMATIC1111's syntax (emphasis, long prompts, prompt editing; docs/PROMPTS.md)
    // or diffusers' plain text. Plain prompts of at most 75 tokens are conditioned identically either way.
    PromptSyntax prompt_syntax = PromptSyntax::A1111;
    EmphasisMode emphasis = EmphasisMode::Original;  // the webui's "Emphasis mode" (A1111 syntax)
    // Images sampled together from one draw of noise of shape [batch_size, 4, h, w], as diffusers'
    // num_images_per_prompt and ComfyUI's batch do (AUTOMATIC1111 instead seeds each image of a batch apart).
    int batch_size = 1;
    const Tensor* init_image = nullptr;          // img2img: [1, 3, H, W] in [0, 1]
    double strength = 0.75;  // double, as Python's float in diffusers' get_timesteps
    VaeTiling vae_tiling = VaeTiling::Auto;       // the decode whole or in bands (vae_tiling.h)
    // A bound on the process's resident set in bytes for CPU runs (--memory; < 0: none): the weights' pages
    // are then streamed and the decode banded as far as needed (memory_plan.h).
    int64_t memory_budget = -1;
    // The same for kiln's device memory on a GPU (--vram; < 0: none): the weights then leave the device
    // between stages, or stream through it block by block, and the decode runs in bands as far as needed
    // (gpu_memory_plan.h). The model should be loaded with LoadOptions::offload_weights, so that loading fits too;
    // the backend's own cap (Backend::set_memory_limit) is what holds every allocation to it.
    int64_t vram_budget = -1;
    // Without vram_budget, a GPU generation that runs out of device memory runs again once with the model's weights
    // moved off the device (kept in host memory), under the budget --vram auto gives (the device's free memory plus
    // what kiln holds, less a margin; the backend capped to it, or to a lower cap of the caller's, for that
    // generation only), with two notices saying so and what auto gave; the model's later generations run under that
    // budget. False: the OutOfMemory is thrown. (Moving weights, here as under a budget, and the backend's cap are
    // not safe while another thread generates on the same device.)
    bool fit_on_out_of_memory = true;
    // Where the weights are by stage, chosen rather than planned from vram_budget (tests, and kiln bench's
    // --weights-placement to time each): "resident", "stages", "each_stage" or "streamed".
    std::string gpu_weights;
    // Textual-inversion embeddings the prompts may name (A1111 syntax; prompt_encoding.h). Not owned.
    const std::vector<TextualInversion>* embeddings = nullptr;
    std::function<void(int step, int total)> progress;
    std::function<void(const std::string&)> notice;  // one line when kiln changes course (e.g. a tiled decode)
    // Called after each UNet evaluation with its inputs (on the model's device, as the UNet took them) and its
    // output (on the host), before guidance combines the rows: kiln bench's quality suite runs a second
    // model's UNet on the very same inputs there.
    std::function<void(const UNetInputs& inputs, const Tensor& output)> unet_observer;
};

struct GenerationResult {
    Tensor final_latent;    // [batch_size, 4, H/8, W/8], before VAE scaling
    Tensor image;           // [batch_size, 3, H, W] in [0, 1]
    std::vector<std::string> used_embeddings;  // the embeddings the prompts named, in order of first use
    // The webui's "Emphasis" parameter: the mode's name when it is not "Original" and an encoded text held
    // '(' or '[' (modules/sd_hijack_clip.py); empty when the webui writes none.
    std::string emphasis;
    // On a GPU: the whole VAE decode ran out of device memory (it ran whole again after the UNet left the device, or
    // went to bands or, for a batch, one image at a time). Under a --vram budget later images of the same size take a
    // plan whose decode fits whole where one does.
    bool vae_decode_ran_out = false;
};

// Checks what can be checked before a model is loaded; throws InvalidArgument naming the problem.
void validate_request(const GenerationRequest& request);

GenerationResult generate(const StableDiffusionModel& model, const GenerationRequest& request);

// The image side diffusers uses when none is given: the UNet's sample_size times the VAE factor for
// diffusers folders; for single files each architecture's native size (SD 1.x 512, SD 2.x 768 for
// v-prediction models and 512 otherwise, SDXL 1024).
int default_image_size(const StableDiffusionModel& model);

// The sampler diffusers uses with this model by default (from its scheduler config's class).
std::string default_sampler(const StableDiffusionModel& model);

}  // namespace kiln
