// EulerDiscreteScheduler (Karras et al. 2022, Algorithm 2, with s_churn = 0 as the pipelines call it).
#include <algorithm>
#include <cmath>

#include "sampling/noise_schedule.h"
#include "sampling/schedulers.h"
#include "sampling/sigma_schedule.h"
#include "sampling/float_math.h"  // last: turns off FMA contraction below

namespace kiln {
namespace {

class EulerScheduler final : public Scheduler {
public:
    explicit EulerScheduler(const SchedulerConfig& c) : Scheduler(c) {
        reject_option(c.use_beta_sigmas, c, "use_beta_sigmas");
        require(static_cast<int>(c.use_karras_sigmas) + c.use_exponential_sigmas + c.use_beta_sigmas <= 1,
                ErrorKind::InvalidModel,
                "scheduler config: only one of use_karras_sigmas, use_exponential_sigmas, use_beta_sigmas can be set");
        require(c.interpolation_type == "linear" || c.interpolation_type == "log_linear", ErrorKind::InvalidModel,
                "scheduler config: interpolation_type \"" + c.interpolation_type + "\" is not linear or log_linear");
        require(c.timestep_type == "discrete" || c.timestep_type == "continuous", ErrorKind::InvalidModel,
                "scheduler config: timestep_type \"" + c.timestep_type + "\" is not discrete or continuous");
        alphas_cumprod_ = schedule::alphas_cumprod(c, false, /*pin_last_for_zero_snr=*/true);
        table_ = schedule::sigmas_from_alphas_cumprod(alphas_cumprod_);
    }

    void set_timesteps(int n) override {
        schedule::require_valid_steps(n, config_);
        const std::vector<float> ts = schedule::discrete_timesteps_f32(config_, n);
        const std::vector<float> log_table = schedule::log_f32(table_);
        std::vector<double> sig;
        if (config_.interpolation_type == "linear") {
            sig = schedule::np_interp_on_index(std::vector<double>(ts.begin(), ts.end()), table_);
        } else {  // log_linear: torch.linspace(log sigma_max, log sigma_min, n + 1).exp() in float32
            const float hi = static_cast<float>(std::log(static_cast<double>(table_.back())));
            const float lo = static_cast<float>(std::log(static_cast<double>(table_.front())));
            for (float v : schedule::torch_linspace_f32(hi, lo, n + 1))
                sig.push_back(static_cast<float>(std::exp(static_cast<double>(v))));
        }
        std::vector<double> ts_from_sigmas;
        const bool converted = config_.use_karras_sigmas || config_.use_exponential_sigmas;
        if (converted) {
            const double smin = config_.sigma_min.value_or(sig.back());
            const double smax = config_.sigma_max.value_or(sig.front());
            sig = config_.use_karras_sigmas ? schedule::karras_sigmas(smin, smax, n)
                                            : schedule::exponential_sigmas(smin, smax, n);
            for (double s : sig) ts_from_sigmas.push_back(schedule::sigma_to_t(s, log_table));
        }
        sigmas_ = schedule::to_f32(sig);
        sigmas_.push_back(config_.final_sigmas_type == "sigma_min" ? table_[0] : 0.0f);

        timesteps_.clear();
        if (config_.timestep_type == "continuous" && config_.prediction_type == "v_prediction") {
            for (size_t i = 0; i + 1 < sigmas_.size(); ++i)
                timesteps_.push_back(0.25f * static_cast<float>(std::log(static_cast<double>(sigmas_[i]))));
        } else if (converted) {
            timesteps_ = schedule::to_f32(ts_from_sigmas);
        } else {
            timesteps_ = ts;
        }
        num_inference_steps_ = n;
        begin_index_ = 0;
    }

    const std::vector<float>& timesteps() const override { return timesteps_; }
    const std::vector<float>& sigmas() const override { return sigmas_; }
    float init_noise_sigma() const override { return schedule::init_noise_sigma_for(config_, sigmas_); }

    Tensor scale_model_input(const Tensor& sample, int step_index) override {
        require_step_index(step_index, "Euler scale_model_input");
        const float d = schedule::input_scale_denominator(sigmas_[static_cast<size_t>(step_index)]);
        return map_elements(sample, [=](float x) { return x / d; });
    }

    Tensor step(const Tensor& model_output, int step_index, const Tensor& sample, NoiseGenerator&) override {
        require_step_index(step_index, "Euler step");
        const float sigma = sigmas_[static_cast<size_t>(step_index)];
        const float sigma_hat = sigma * (0.0f + 1.0f);  // gamma = 0 without s_churn
        Tensor pred_x0;
        if (config_.prediction_type == "sample") {
            pred_x0 = model_output;
        } else if (config_.prediction_type == "epsilon") {
            pred_x0 = map_elements(sample, model_output, [=](float x, float e) { return x - sigma_hat * e; });
        } else {
            const float c_out = -sigma / schedule::input_scale_denominator(sigma);
            const float c_skip_den = sigma * sigma + 1.0f;
            pred_x0 = map_elements(model_output, sample, [=](float v, float x) { return v * c_out + x / c_skip_den; });
        }
        const float dt = sigmas_[static_cast<size_t>(step_index) + 1] - sigma_hat;
        return map_elements(sample, pred_x0, [=](float x, float x0) {
            const float derivative = (x - x0) / sigma_hat;
            return x + derivative * dt;
        });
    }

    Tensor add_noise(const Tensor& original, const Tensor& noise, int step_index) const override {
        require_step_index(step_index, "Euler add_noise");
        const float sigma = sigmas_[static_cast<size_t>(step_index)];
        return map_elements(original, noise, [=](float x, float e) { return x + e * sigma; });
    }

private:
    std::vector<float> alphas_cumprod_;
    std::vector<float> table_;  // sigma of every training timestep
    std::vector<float> timesteps_;
    std::vector<float> sigmas_;
};

}  // namespace

std::unique_ptr<Scheduler> make_euler_scheduler(const SchedulerConfig& config) {
    return std::make_unique<EulerScheduler>(config);
}

}  // namespace kiln
