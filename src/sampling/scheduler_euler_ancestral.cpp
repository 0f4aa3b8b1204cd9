// EulerAncestralDiscreteScheduler: an Euler step to sigma_down, then fresh noise of size sigma_up.
#include "sampling/noise_schedule.h"
#include "sampling/schedulers.h"
#include "sampling/sigma_schedule.h"
#include "sampling/float_math.h"  // last: turns off FMA contraction below

namespace kiln {
namespace {

class EulerAncestralScheduler final : public Scheduler {
public:
    explicit EulerAncestralScheduler(const SchedulerConfig& c) : Scheduler(c) {
        alphas_cumprod_ = schedule::alphas_cumprod(c, false, /*pin_last_for_zero_snr=*/true);
        table_ = schedule::sigmas_from_alphas_cumprod(alphas_cumprod_);
    }

    void set_timesteps(int n) override {
        schedule::require_valid_steps(n, config_);
        timesteps_ = schedule::discrete_timesteps_f32(config_, n);
        sigmas_ = schedule::to_f32(
            schedule::np_interp_on_index(std::vector<double>(timesteps_.begin(), timesteps_.end()), table_));
        sigmas_.push_back(0.0f);
        num_inference_steps_ = n;
        begin_index_ = 0;
    }

    const std::vector<float>& timesteps() const override { return timesteps_; }
    const std::vector<float>& sigmas() const override { return sigmas_; }
    float init_noise_sigma() const override { return schedule::init_noise_sigma_for(config_, sigmas_); }

    Tensor scale_model_input(const Tensor& sample, int step_index) override {
        require_step_index(step_index, "Euler ancestral scale_model_input");
        const float d = schedule::input_scale_denominator(sigmas_[static_cast<size_t>(step_index)]);
        return map_elements(sample, [=](float x) { return x / d; });
    }

    Tensor step(const Tensor& model_output, int step_index, const Tensor& sample, NoiseGenerator& rng) override {
        require_step_index(step_index, "Euler ancestral step");
        const float sigma = sigmas_[static_cast<size_t>(step_index)];
        Tensor pred_x0;
        if (config_.prediction_type == "epsilon") {
            pred_x0 = map_elements(sample, model_output, [=](float x, float e) { return x - sigma * e; });
        } else {
            const float c_out = -sigma / schedule::input_scale_denominator(sigma);
            const float c_skip_den = sigma * sigma + 1.0f;
            pred_x0 = map_elements(model_output, sample, [=](float v, float x) { return v * c_out + x / c_skip_den; });
        }
        const float sigma_from = sigma;
        const float sigma_to = sigmas_[static_cast<size_t>(step_index) + 1];
        const float from2 = sigma_from * sigma_from;
        const float to2 = sigma_to * sigma_to;
        const float sigma_up = sqrt_f32(to2 * (from2 - to2) / from2);
        const float sigma_down = sqrt_f32(to2 - sigma_up * sigma_up);
        const float dt = sigma_down - sigma;
        const Tensor moved = map_elements(sample, pred_x0, [=](float x, float x0) {
            const float derivative = (x - x0) / sigma;
            return x + derivative * dt;
        });
        // Noise is drawn on every step, the last one too (where sigma_up is 0), as diffusers does:
        // that keeps the generator's stream aligned with diffusers.
        const Tensor noise = rng.randn(model_output.shape());
        return map_elements(moved, noise, [=](float x, float e) { return x + e * sigma_up; });
    }

    Tensor add_noise(const Tensor& original, const Tensor& noise, int step_index) const override {
        require_step_index(step_index, "Euler ancestral add_noise");
        const float sigma = sigmas_[static_cast<size_t>(step_index)];
        return map_elements(original, noise, [=](float x, float e) { return x + e * sigma; });
    }

private:
    std::vector<float> alphas_cumprod_;
    std::vector<float> table_;
    std::vector<float> timesteps_;
    std::vector<float> sigmas_;
};

}  // namespace

std::unique_ptr<Scheduler> make_euler_ancestral_scheduler(const SchedulerConfig& config) {
    reject_option(config.prediction_type == "sample", config, "prediction_type \"sample\"");
    return std::make_unique<EulerAncestralScheduler>(config);
}

}  // namespace kiln
