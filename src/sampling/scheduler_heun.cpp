// HeunDiscreteScheduler (Karras et al. 2022, Algorithm 1 with gamma = 0): each step is an Euler
// step plus a correction from a second model call at the next sigma, so the timesteps after the
// first appear twice and the last step is a plain Euler step to sigma 0.
#include <algorithm>
#include <optional>

#include "sampling/noise_schedule.h"
#include "sampling/schedulers.h"
#include "sampling/sigma_schedule.h"
#include "sampling/float_math.h"  // last: turns off FMA contraction below

namespace kiln {
namespace {

class HeunScheduler final : public Scheduler {
public:
    explicit HeunScheduler(const SchedulerConfig& c) : Scheduler(c) {
        reject_option(c.use_beta_sigmas, c, "use_beta_sigmas");
        require(static_cast<int>(c.use_karras_sigmas) + c.use_exponential_sigmas + c.use_beta_sigmas <= 1,
                ErrorKind::InvalidModel,
                "scheduler config: only one of use_karras_sigmas, use_exponential_sigmas, use_beta_sigmas can be set");
        alphas_cumprod_ = schedule::alphas_cumprod(c, /*allow_exp=*/true);
        table_ = schedule::sigmas_from_alphas_cumprod(alphas_cumprod_);
    }

    int order() const override { return 2; }

    void set_timesteps(int n) override {
        schedule::require_valid_steps(n, config_);
        const std::vector<float> ts = schedule::discrete_timesteps_f32(config_, n);
        const std::vector<float> log_table = schedule::log_f32(table_);
        std::vector<double> sig = schedule::np_interp_on_index(std::vector<double>(ts.begin(), ts.end()), table_);
        std::vector<float> ts_used = ts;
        if (config_.use_karras_sigmas || config_.use_exponential_sigmas) {
            // Heun's config has no sigma_min/sigma_max: the ends of the interpolated schedule.
            sig = config_.use_karras_sigmas ? schedule::karras_sigmas(sig.back(), sig.front(), n)
                                            : schedule::exponential_sigmas(sig.back(), sig.front(), n);
            std::vector<double> t_conv;
            for (double s : sig) t_conv.push_back(schedule::sigma_to_t(s, log_table));
            ts_used = schedule::to_f32(t_conv);
        }
        std::vector<float> base = schedule::to_f32(sig);
        base.push_back(0.0f);
        // sigmas[:1], sigmas[1:-1] each twice, sigmas[-1:]; timesteps[:1], timesteps[1:] each twice.
        sigmas_.assign(1, base.front());
        for (size_t i = 1; i + 1 < base.size(); ++i) sigmas_.insert(sigmas_.end(), 2, base[i]);
        sigmas_.push_back(base.back());
        timesteps_.assign(1, ts_used.front());
        for (size_t i = 1; i < ts_used.size(); ++i) timesteps_.insert(timesteps_.end(), 2, ts_used[i]);
        num_inference_steps_ = n;
        begin_index_ = 0;
        reset_half_step();
    }

    const std::vector<float>& timesteps() const override { return timesteps_; }
    const std::vector<float>& sigmas() const override { return sigmas_; }
    float init_noise_sigma() const override { return schedule::init_noise_sigma_for(config_, sigmas_); }

    Tensor scale_model_input(const Tensor& sample, int step_index) override {
        require_step_index(step_index, "Heun scale_model_input");
        const float d = schedule::input_scale_denominator(sigmas_[static_cast<size_t>(step_index)]);
        return map_elements(sample, [=](float x) { return x / d; });
    }

    Tensor step(const Tensor& model_output, int step_index, const Tensor& sample, NoiseGenerator&) override {
        require_step_index(step_index, "Heun step");
        const auto i = static_cast<size_t>(step_index);
        const bool first_order = !dt_.has_value();
        require(first_order || i >= 1, ErrorKind::InvalidArgument, "Heun step: second-order call at index 0");
        const float sigma = first_order ? sigmas_[i] : sigmas_[i - 1];
        const float sigma_next = first_order ? sigmas_[i + 1] : sigmas_[i];
        const float sigma_hat = sigma * 1.0f;  // gamma = 0
        const float sigma_input = first_order ? sigma_hat : sigma_next;

        Tensor pred_x0;
        if (config_.prediction_type == "epsilon") {
            pred_x0 = map_elements(sample, model_output, [=](float x, float e) { return x - sigma_input * e; });
        } else if (config_.prediction_type == "v_prediction") {
            const float c_out = -sigma_input / schedule::input_scale_denominator(sigma_input);
            const float c_skip_den = sigma_input * sigma_input + 1.0f;
            pred_x0 = map_elements(model_output, sample, [=](float v, float x) { return v * c_out + x / c_skip_den; });
        } else {
            pred_x0 = model_output;
        }
        if (config_.clip_sample) {
            const auto r = static_cast<float>(config_.clip_sample_range);
            pred_x0 = map_elements(pred_x0, [=](float v) { return std::clamp(v, -r, r); });
        }

        if (first_order) {
            Tensor derivative = map_elements(sample, pred_x0, [=](float x, float x0) { return (x - x0) / sigma_hat; });
            const float dt = sigma_next - sigma_hat;
            Tensor prev = map_elements(sample, derivative, [=](float x, float d) { return x + d * dt; });
            prev_derivative_ = std::move(derivative);
            dt_ = dt;
            saved_sample_ = sample;
            return prev;
        }
        const Tensor derivative = map_elements(sample, pred_x0, *prev_derivative_, [=](float x, float x0, float d_prev) {
            const float d = (x - x0) / sigma_next;
            return (d_prev + d) / 2.0f;
        });
        const float dt = *dt_;
        Tensor prev = map_elements(*saved_sample_, derivative, [=](float x, float d) { return x + d * dt; });
        reset_half_step();
        return prev;
    }

    Tensor add_noise(const Tensor& original, const Tensor& noise, int step_index) const override {
        require_step_index(step_index, "Heun add_noise");
        const float sigma = sigmas_[static_cast<size_t>(step_index)];
        return map_elements(original, noise, [=](float x, float e) { return x + e * sigma; });
    }

private:
    void reset_half_step() {
        prev_derivative_.reset();
        dt_.reset();
        saved_sample_.reset();
    }

    std::vector<float> alphas_cumprod_;
    std::vector<float> table_;
    std::vector<float> timesteps_;
    std::vector<float> sigmas_;
    std::optional<Tensor> prev_derivative_;
    std::optional<float> dt_;
    std::optional<Tensor> saved_sample_;
};

}  // namespace

std::unique_ptr<Scheduler> make_heun_scheduler(const SchedulerConfig& config) {
    return std::make_unique<HeunScheduler>(config);
}

}  // namespace kiln
