// LCMScheduler (Luo et al. 2023): consistency-model steps over a subset of the distillation
// schedule, re-noising with fresh noise between steps.
#include <algorithm>
#include <cmath>

#include "sampling/noise_schedule.h"
#include "sampling/schedulers.h"
#include "sampling/float_math.h"  // last: turns off FMA contraction below

namespace kiln {
namespace {

class LcmScheduler final : public Scheduler {
public:
    explicit LcmScheduler(const SchedulerConfig& c) : Scheduler(c) {
        reject_option(c.thresholding, c, "thresholding");
        alphas_cumprod_ = schedule::alphas_cumprod(c);
        final_alpha_cumprod_ = c.set_alpha_to_one ? 1.0f : alphas_cumprod_[0];
    }

    void set_timesteps(int n) override {
        schedule::require_valid_steps(n, config_);
        const int64_t N = config_.num_train_timesteps;
        const int64_t original_steps = config_.original_inference_steps;
        require(original_steps >= 1 && original_steps <= N, ErrorKind::InvalidModel,
                "scheduler config: original_inference_steps " + std::to_string(original_steps) +
                    " must be between 1 and num_train_timesteps " + std::to_string(N));
        require(n <= original_steps, ErrorKind::InvalidArgument,
                "LCM can take at most original_inference_steps (" + std::to_string(original_steps) + ") steps, got " +
                    std::to_string(n));
        // The distillation schedule k-1, 2k-1, ..., then n of them evenly spaced by index, from the top.
        const int64_t k = N / original_steps;
        std::vector<int64_t> origin;
        for (int64_t i = original_steps; i >= 1; --i) origin.push_back(i * k - 1);
        const std::vector<double> idx =
            schedule::np_linspace(0, static_cast<double>(origin.size()), n, /*endpoint=*/false);
        timesteps_.clear();
        for (double v : idx) timesteps_.push_back(static_cast<float>(origin[static_cast<size_t>(std::floor(v))]));
        num_inference_steps_ = n;
        begin_index_ = 0;
    }

    const std::vector<float>& timesteps() const override { return timesteps_; }
    float init_noise_sigma() const override { return 1.0f; }

    Tensor scale_model_input(const Tensor& sample, int step_index) override {
        require_step_index(step_index, "LCM scale_model_input");
        return sample;
    }

    Tensor step(const Tensor& model_output, int step_index, const Tensor& sample, NoiseGenerator& rng) override {
        require_step_index(step_index, "LCM step");
        const auto i = static_cast<size_t>(step_index);
        const auto t = static_cast<int64_t>(timesteps_[i]);
        const int64_t prev_t = i + 1 < timesteps_.size() ? static_cast<int64_t>(timesteps_[i + 1]) : t;
        const float a_t = alphas_cumprod_[static_cast<size_t>(t)];
        const float a_prev = prev_t >= 0 ? alphas_cumprod_[static_cast<size_t>(prev_t)] : final_alpha_cumprod_;
        const float b_t = 1.0f - a_t;
        const float b_prev = 1.0f - a_prev;

        // Boundary-condition scalings with sigma_data = 0.5 on the scaled timestep.
        const float scaled = static_cast<float>(t) * static_cast<float>(config_.timestep_scaling);
        const float c_skip = 0.25f / (scaled * scaled + 0.25f);
        const float c_out = scaled / sqrt_f32(scaled * scaled + 0.25f);

        const float sa = sqrt_f32(a_t);
        const float sb = sqrt_f32(b_t);
        Tensor pred_x0;
        if (config_.prediction_type == "epsilon") {
            pred_x0 = map_elements(sample, model_output, [=](float x, float e) { return (x - sb * e) / sa; });
        } else if (config_.prediction_type == "sample") {
            pred_x0 = model_output;
        } else {
            pred_x0 = map_elements(sample, model_output, [=](float x, float v) { return sa * x - sb * v; });
        }
        if (config_.clip_sample) {
            const auto r = static_cast<float>(config_.clip_sample_range);
            pred_x0 = map_elements(pred_x0, [=](float v) { return std::clamp(v, -r, r); });
        }
        Tensor denoised = map_elements(pred_x0, sample, [=](float x0, float x) { return c_out * x0 + c_skip * x; });
        // No noise after the last step of the schedule (so none at all for one-step sampling).
        if (step_index == num_inference_steps_ - 1) return denoised;
        const Tensor noise = rng.randn(model_output.shape());
        const float sa_prev = sqrt_f32(a_prev);
        const float sb_prev = sqrt_f32(b_prev);
        return map_elements(denoised, noise, [=](float d, float e) { return sa_prev * d + sb_prev * e; });
    }

    Tensor add_noise(const Tensor& original, const Tensor& noise, int step_index) const override {
        require_step_index(step_index, "LCM add_noise");
        return noised_at_alpha(original, noise,
                               alphas_cumprod_[static_cast<size_t>(timesteps_[static_cast<size_t>(step_index)])]);
    }

private:
    std::vector<float> alphas_cumprod_;
    float final_alpha_cumprod_ = 1.0f;
    std::vector<float> timesteps_;
};

}  // namespace

std::unique_ptr<Scheduler> make_lcm_scheduler(const SchedulerConfig& config) {
    return std::make_unique<LcmScheduler>(config);
}

}  // namespace kiln
