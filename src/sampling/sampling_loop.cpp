#include "sampling/sampling_loop.h"

#include <cmath>
#include <cstdio>

#include "kiln/error.h"
#include "sampling/sampler_names.h"
#include "sampling/scheduler_config.h"
#include "sampling/float_math.h"  // last: turns off FMA contraction below

namespace kiln {
namespace {

Tensor denoise_checked(const Denoiser& denoise, const Tensor& input, float timestep) {
    require(static_cast<bool>(denoise), ErrorKind::InvalidArgument, "sampling needs a denoise callback");
    Tensor out = denoise(input, timestep);
    require(out.shape() == input.shape(), ErrorKind::InvalidArgument,
            "the denoise callback returned shape " + shape_str(out.shape()) + " for model input of shape " +
                shape_str(input.shape()));
    return out;
}

// Runs model calls begin..end of the scheduler's timesteps on x.
Tensor denoise_from(Scheduler& scheduler, int begin, Tensor x, const Denoiser& denoise, NoiseGenerator& rng,
                    const ProgressCallback& progress) {
    const auto& ts = scheduler.timesteps();
    const int total = static_cast<int>(ts.size()) - begin;
    for (int i = begin; i < static_cast<int>(ts.size()); ++i) {
        const Tensor model_input = scheduler.scale_model_input(x, i);
        const Tensor model_output = denoise_checked(denoise, model_input, ts[static_cast<size_t>(i)]);
        x = scheduler.step(model_output, i, x, rng);
        if (progress) progress(i - begin + 1, total);
    }
    return x;
}

// A strength as users typed it ("0.2", not std::to_string's "0.200000").
std::string strength_str(double strength) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", strength);
    return buf;
}

void require_latents(const Tensor& t, const char* what) {
    require(!t.empty(), ErrorKind::InvalidArgument, std::string(what) + " is empty");
}

}  // namespace

Tensor run_txt2img(Scheduler& scheduler, int steps, const Tensor& initial_noise, const Denoiser& denoise,
                   NoiseGenerator& rng, const ProgressCallback& progress) {
    require_latents(initial_noise, "txt2img initial noise");
    scheduler.set_timesteps(steps);
    const float s = scheduler.init_noise_sigma();
    Tensor x = map_elements(initial_noise, [=](float v) { return v * s; });
    return denoise_from(scheduler, 0, std::move(x), denoise, rng, progress);
}

Img2ImgStart img2img_start(int steps, double strength, int order) {
    require(steps >= 1, ErrorKind::InvalidArgument,
            "number of sampling steps must be at least 1, got " + std::to_string(steps));
    require(strength > 0.0 && strength <= 1.0, ErrorKind::InvalidArgument,
            "img2img strength must be in (0, 1], got " + strength_str(strength));
    const int init_timestep = std::min(static_cast<int>(static_cast<double>(steps) * strength), steps);
    Img2ImgStart start;
    start.t_start = std::max(steps - init_timestep, 0);
    start.begin_index = start.t_start * order;
    return start;
}

Tensor run_img2img(Scheduler& scheduler, int steps, double strength, const Tensor& init_latents, NoiseGenerator& rng,
                   const Denoiser& denoise, const ProgressCallback& progress) {
    require_latents(init_latents, "img2img init latents");
    const Img2ImgStart start = img2img_start(steps, strength, scheduler.order());
    scheduler.set_timesteps(steps);
    // diffusers runs what is left of the timesteps from there: nothing (it fails) when int(steps x strength) is
    // 0, except for PNDM, whose PLMS timesteps have one more entry than steps, so its last one still runs.
    require(start.begin_index < static_cast<int>(scheduler.timesteps().size()), ErrorKind::InvalidArgument,
            "img2img strength " + strength_str(strength) + " with " + std::to_string(steps) +
                " steps leaves no denoising step (int(steps x strength) = 0); raise the strength or the step count");
    scheduler.set_begin_index(start.begin_index);
    const Tensor noise = rng.randn(init_latents.shape());
    require(noise.shape() == init_latents.shape(), ErrorKind::InvalidArgument,
            "noise generator returned shape " + shape_str(noise.shape()) + ", asked for " +
                shape_str(init_latents.shape()));
    Tensor x = scheduler.add_noise(init_latents, noise, start.begin_index);
    return denoise_from(scheduler, start.begin_index, std::move(x), denoise, rng, progress);
}

Tensor sample_latents(const SamplingRequest& request, const nlohmann::json& model_scheduler_config,
                      const Tensor& latents, NoiseGenerator& rng, const Denoiser& denoise,
                      const ProgressCallback& progress) {
    const std::string sampler = parse_sampler(request.sampler, request.schedule_type);
    const SchedulerConfig config = scheduler_config_for(sampler, model_scheduler_config, request.timestep_spacing);
    const std::unique_ptr<Scheduler> scheduler = make_scheduler(sampler, config);
    if (request.img2img)
        return run_img2img(*scheduler, request.steps, request.strength, latents, rng, denoise, progress);
    return run_txt2img(*scheduler, request.steps, latents, denoise, rng, progress);
}

}  // namespace kiln
