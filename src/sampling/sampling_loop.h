// The denoising loops of diffusers' txt2img and img2img pipelines over a denoise callback.
#pragma once
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/noise.h"
#include "core/tensor.h"
#include "sampling/scheduler.h"

namespace kiln {

// The model output for one model call (after classifier-free guidance), given the scaled input and
// the timestep the model is conditioned on.
using Denoiser = std::function<Tensor(const Tensor& model_input, float timestep)>;

// Called after each model call: `step` of `total` (1-based); total is the number of model calls,
// which for Heun is about twice the step count.
using ProgressCallback = std::function<void(int step, int total)>;

struct SamplingRequest {
    std::string sampler = "euler_a";  // a kiln name or an AUTOMATIC1111 label (see parse_sampler)
    std::string schedule_type;        // optional AUTOMATIC1111 schedule type: "", "Automatic", "Karras"
    int steps = 20;
    bool img2img = false;
    double strength = 1.0;           // img2img denoising strength, in (0, 1]; double as Python's float
    std::string timestep_spacing;    // "" keeps the model's; "leading", "linspace" or "trailing"
};

// The one entry point a pipeline calls. txt2img: `latents` is the unscaled standard-normal noise the
// caller drew first from `rng`. img2img: `latents` is the clean init latents (the caller has drawn
// the VAE posterior sample from `rng` already); the noise to add is drawn here, then step noise.
Tensor sample_latents(const SamplingRequest& request, const nlohmann::json& model_scheduler_config,
                      const Tensor& latents, NoiseGenerator& rng, const Denoiser& denoise,
                      const ProgressCallback& progress = {});

// txt2img: set_timesteps(steps), x = initial_noise * init_noise_sigma, then every timestep.
Tensor run_txt2img(Scheduler& scheduler, int steps, const Tensor& initial_noise, const Denoiser& denoise,
                   NoiseGenerator& rng, const ProgressCallback& progress = {});

// Where diffusers' img2img get_timesteps starts: t_start = steps - min(int(steps * strength), steps),
// the loop begins at model call t_start * order. Throws kiln::Error for a strength outside (0, 1]; whether
// a timestep is left from there depends on the scheduler (run_img2img checks).
struct Img2ImgStart {
    int t_start = 0;      // steps skipped
    int begin_index = 0;  // first model call: t_start * scheduler order
};
Img2ImgStart img2img_start(int steps, double strength, int order);

// img2img: set_timesteps(steps), set_begin_index, noise = rng.randn, add_noise at the first
// remaining timestep, then the remaining timesteps.
Tensor run_img2img(Scheduler& scheduler, int steps, double strength, const Tensor& init_latents, NoiseGenerator& rng,
                   const Denoiser& denoise, const ProgressCallback& progress = {});

}  // namespace kiln
