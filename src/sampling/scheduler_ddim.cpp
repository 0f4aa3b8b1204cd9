// DDIMScheduler (Song et al. 2020) with eta = 0, as diffusers' StableDiffusion pipelines run it.
#include <algorithm>
#include <cmath>

#include "sampling/noise_schedule.h"
#include "sampling/schedulers.h"
#include "sampling/float_math.h"  // last: turns off FMA contraction below

namespace kiln {
namespace {

class DdimScheduler final : public Scheduler {
public:
    explicit DdimScheduler(const SchedulerConfig& c) : Scheduler(c) {
        reject_option(c.thresholding, c, "thresholding");
        alphas_cumprod_ = schedule::alphas_cumprod(c);
        // The last step has no previous alphas_cumprod: 1, or the value at timestep 0 as SD uses.
        final_alpha_cumprod_ = c.set_alpha_to_one ? 1.0f : alphas_cumprod_[0];
    }

    void set_timesteps(int n) override {
        schedule::require_valid_steps(n, config_);
        const int64_t N = config_.num_train_timesteps;
        std::vector<double> ts;
        if (config_.timestep_spacing == "linspace") {
            ts = schedule::np_linspace(0, static_cast<double>(N - 1), n);
            for (double& t : ts) t = schedule::np_round(t);
            std::reverse(ts.begin(), ts.end());
        } else if (config_.timestep_spacing == "leading") {
            const int64_t ratio = N / n;
            for (int64_t i = n - 1; i >= 0; --i) ts.push_back(static_cast<double>(i * ratio + config_.steps_offset));
        } else {
            ts = schedule::np_arange(static_cast<double>(N), 0, -static_cast<double>(N) / n);
            for (double& t : ts) t = schedule::np_round(t) - 1;
        }
        timesteps_.clear();
        for (double t : ts) {
            const auto ti = static_cast<int64_t>(t);
            require(ti >= 0 && ti < N, ErrorKind::InvalidArgument,
                    "DDIM timestep " + std::to_string(ti) + " is outside the model's " + std::to_string(N) +
                        " training timesteps (steps_offset " + std::to_string(config_.steps_offset) + ")");
            timesteps_.push_back(static_cast<float>(ti));
        }
        num_inference_steps_ = n;
        begin_index_ = 0;
    }

    const std::vector<float>& timesteps() const override { return timesteps_; }
    float init_noise_sigma() const override { return 1.0f; }

    Tensor scale_model_input(const Tensor& sample, int step_index) override {
        require_step_index(step_index, "DDIM scale_model_input");
        return sample;
    }

    Tensor step(const Tensor& model_output, int step_index, const Tensor& sample, NoiseGenerator&) override {
        require_step_index(step_index, "DDIM step");
        const auto t = static_cast<int64_t>(timesteps_[static_cast<size_t>(step_index)]);
        const int64_t prev_t = t - config_.num_train_timesteps / num_inference_steps_;
        const float a_t = alphas_cumprod_[static_cast<size_t>(t)];
        const float a_prev = prev_t >= 0 ? alphas_cumprod_[static_cast<size_t>(prev_t)] : final_alpha_cumprod_;
        const float b_t = 1.0f - a_t;
        const float sqrt_a = sqrt_f32(a_t);
        const float sqrt_b = sqrt_f32(b_t);

        Tensor pred_x0;
        Tensor pred_eps;
        if (config_.prediction_type == "epsilon") {
            pred_x0 = map_elements(sample, model_output, [=](float x, float e) { return (x - sqrt_b * e) / sqrt_a; });
            pred_eps = model_output;
        } else if (config_.prediction_type == "sample") {
            pred_x0 = model_output;
            pred_eps = map_elements(sample, pred_x0, [=](float x, float x0) { return (x - sqrt_a * x0) / sqrt_b; });
        } else {  // v_prediction
            pred_x0 = map_elements(sample, model_output, [=](float x, float v) { return sqrt_a * x - sqrt_b * v; });
            pred_eps = map_elements(sample, model_output, [=](float x, float v) { return sqrt_a * v + sqrt_b * x; });
        }
        if (config_.clip_sample) {
            const auto r = static_cast<float>(config_.clip_sample_range);
            pred_x0 = map_elements(pred_x0, [=](float v) { return std::clamp(v, -r, r); });
        }
        // eta = 0: std_dev_t = 0 * sqrt(variance), so the direction term keeps all of 1 - a_prev.
        const float std_dev = 0.0f;
        const float dir_coeff = sqrt_f32((1.0f - a_prev) - std_dev * std_dev);
        const float sqrt_a_prev = sqrt_f32(a_prev);
        return map_elements(pred_x0, pred_eps, [=](float x0, float e) { return sqrt_a_prev * x0 + dir_coeff * e; });
    }

    Tensor add_noise(const Tensor& original, const Tensor& noise, int step_index) const override {
        require_step_index(step_index, "DDIM add_noise");
        return noised_at_alpha(original, noise,
                               alphas_cumprod_[static_cast<size_t>(timesteps_[static_cast<size_t>(step_index)])]);
    }

private:
    std::vector<float> alphas_cumprod_;
    float final_alpha_cumprod_ = 1.0f;
    std::vector<float> timesteps_;
};

}  // namespace

std::unique_ptr<Scheduler> make_ddim_scheduler(const SchedulerConfig& config) {
    return std::make_unique<DdimScheduler>(config);
}

}  // namespace kiln
