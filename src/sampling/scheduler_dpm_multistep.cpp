// DPMSolverMultistepScheduler (Lu et al. 2022): DPM-Solver++ (and the older DPM-Solver) of order
// 1-3, "DPM++ 2M" at the default solver_order 2; "DPM++ 2M Karras" with use_karras_sigmas.
#include <algorithm>
#include <cmath>

#include "sampling/noise_schedule.h"
#include "sampling/schedulers.h"
#include "sampling/float_math.h"  // last: turns off FMA contraction below

namespace kiln {
namespace {



class DpmMultistepScheduler final : public Scheduler {
public:
    explicit DpmMultistepScheduler(const SchedulerConfig& c) : Scheduler(c) {
        reject_option(c.thresholding, c, "thresholding");
        reject_option(c.use_beta_sigmas, c, "use_beta_sigmas");
        reject_option(c.use_lu_lambdas, c, "use_lu_lambdas");
        reject_option(c.use_flow_sigmas, c, "use_flow_sigmas");
        reject_option(c.use_dynamic_shifting, c, "use_dynamic_shifting");
        reject_option(c.variance_type.has_value(), c, "variance_type \"" + c.variance_type.value_or("") + "\"");
        require(static_cast<int>(c.use_karras_sigmas) + c.use_exponential_sigmas + c.use_beta_sigmas <= 1,
                ErrorKind::InvalidModel,
                "scheduler config: only one of use_karras_sigmas, use_exponential_sigmas, use_beta_sigmas can be set");
        // diffusers maps these legacy names onto its own when it registers the config.
        if (config_.algorithm_type == "deis") config_.algorithm_type = "dpmsolver++";
        if (config_.solver_type == "logrho" || config_.solver_type == "bh1" || config_.solver_type == "bh2")
            config_.solver_type = "midpoint";
        reject_option(config_.algorithm_type == "sde-dpmsolver++" || config_.algorithm_type == "sde-dpmsolver", c,
                      "algorithm_type \"" + config_.algorithm_type + "\"");
        require(config_.algorithm_type == "dpmsolver++" || config_.algorithm_type == "dpmsolver",
                ErrorKind::InvalidModel, "scheduler config: algorithm_type \"" + config_.algorithm_type + "\" is unknown");
        require(config_.solver_type == "midpoint" || config_.solver_type == "heun", ErrorKind::InvalidModel,
                "scheduler config: solver_type \"" + config_.solver_type + "\" is unknown");
        require(!(config_.algorithm_type == "dpmsolver" && config_.final_sigmas_type == "zero"),
                ErrorKind::InvalidModel,
                "scheduler config: final_sigmas_type \"zero\" needs algorithm_type dpmsolver++; use sigma_min");
        require(c.solver_order >= 1 && c.solver_order <= 3, ErrorKind::InvalidModel,
                "scheduler config: solver_order " + std::to_string(c.solver_order) + " is not 1, 2 or 3");

        alphas_cumprod_ = schedule::alphas_cumprod(c, false, /*pin_last_for_zero_snr=*/true);
        table_ = schedule::sigmas_from_alphas_cumprod(alphas_cumprod_);
        lambda_.resize(alphas_cumprod_.size());
        for (size_t i = 0; i < alphas_cumprod_.size(); ++i)
            lambda_[i] = log_f(sqrt_f32(alphas_cumprod_[i])) - log_f(sqrt_f32(1.0f - alphas_cumprod_[i]));
    }

    void set_timesteps(int n) override {
        schedule::require_valid_steps(n, config_);
        const int64_t N = config_.num_train_timesteps;
        // Timesteps whose lambda is below lambda_min_clipped are cut off (matters for cosine schedules):
        // torch.searchsorted over the flipped (ascending) lambdas.
        int64_t clipped = 0;
        while (clipped < N && static_cast<double>(lambda_[static_cast<size_t>(N - 1 - clipped)]) < config_.lambda_min_clipped)
            ++clipped;
        const int64_t last = N - clipped;
        require(last >= 1, ErrorKind::InvalidModel, "scheduler config: lambda_min_clipped removes every timestep");

        std::vector<double> ts = schedule::multistep_timesteps(config_, last, n);

        const std::vector<float> log_table = schedule::log_f32(table_);
        std::vector<double> sig;
        if (config_.use_karras_sigmas || config_.use_exponential_sigmas) {
            // Computed over the whole training range (this class has no sigma_min/sigma_max keys).
            sig = config_.use_karras_sigmas ? schedule::karras_sigmas(table_.front(), table_.back(), n)
                                            : schedule::exponential_sigmas(table_.front(), table_.back(), n);
            ts.clear();
            for (double s : sig) {
                double t = schedule::sigma_to_t(s, log_table);
                if (config_.use_karras_sigmas && config_.beta_schedule != "squaredcos_cap_v2") t = schedule::np_round(t);
                ts.push_back(t);
            }
        } else {
            sig = schedule::np_interp_on_index(ts, table_);
        }
        sigmas_ = schedule::to_f32(sig);
        sigmas_.push_back(config_.final_sigmas_type == "sigma_min" ? table_[0] : 0.0f);

        timesteps_.clear();
        for (double t : ts) {
            const auto ti = static_cast<int64_t>(t);  // .to(torch.int64) truncates
            require(ti >= 0 && ti < N, ErrorKind::InvalidArgument,
                    "DPM-Solver timestep " + std::to_string(ti) + " is outside the model's training timesteps");
            timesteps_.push_back(static_cast<float>(ti));
        }
        num_inference_steps_ = static_cast<int>(timesteps_.size());
        begin_index_ = 0;
        model_outputs_.assign(static_cast<size_t>(config_.solver_order), Tensor());
        lower_order_nums_ = 0;
    }

    const std::vector<float>& timesteps() const override { return timesteps_; }
    const std::vector<float>& sigmas() const override { return sigmas_; }
    float init_noise_sigma() const override { return 1.0f; }

    Tensor scale_model_input(const Tensor& sample, int step_index) override {
        require_step_index(step_index, "DPM-Solver scale_model_input");
        return sample;
    }

    Tensor step(const Tensor& model_output, int step_index, const Tensor& sample, NoiseGenerator&) override {
        require_step_index(step_index, "DPM-Solver step");
        const int i = step_index;
        const int len = static_cast<int>(timesteps_.size());
        const bool lower_order_final =
            i == len - 1 && (config_.euler_at_final || (config_.lower_order_final && len < 15) ||
                             config_.final_sigmas_type == "zero");
        const bool lower_order_second = i == len - 2 && config_.lower_order_final && len < 15;

        const Tensor converted = convert_model_output(model_output, i, sample);
        std::rotate(model_outputs_.begin(), model_outputs_.begin() + 1, model_outputs_.end());
        model_outputs_.back() = converted;

        Tensor prev;
        if (config_.solver_order == 1 || lower_order_nums_ < 1 || lower_order_final) {
            prev = first_order_update(converted, i, sample);
        } else if (config_.solver_order == 2 || lower_order_nums_ < 2 || lower_order_second) {
            prev = second_order_update(i, sample);
        } else {
            prev = third_order_update(i, sample);
        }
        if (lower_order_nums_ < config_.solver_order) ++lower_order_nums_;
        return prev;
    }

    Tensor add_noise(const Tensor& original, const Tensor& noise, int step_index) const override {
        require_step_index(step_index, "DPM-Solver add_noise");
        const SigmaPoint p = sigma_point(sigmas_[static_cast<size_t>(step_index)]);
        return map_elements(original, noise, [=](float x, float e) { return p.alpha * x + p.sigma * e; });
    }

private:
    Tensor convert_model_output(const Tensor& model_output, int i, const Tensor& sample) const {
        const SigmaPoint p = sigma_point(sigmas_[static_cast<size_t>(i)]);
        const std::string& pt = config_.prediction_type;
        if (config_.algorithm_type == "dpmsolver++") {  // the data prediction x0
            if (pt == "epsilon")
                return map_elements(sample, model_output, [=](float x, float e) { return (x - p.sigma * e) / p.alpha; });
            if (pt == "sample") return model_output;
            return map_elements(sample, model_output, [=](float x, float v) { return p.alpha * x - p.sigma * v; });
        }
        // dpmsolver: the noise prediction epsilon
        if (pt == "epsilon") return model_output;
        if (pt == "sample")
            return map_elements(sample, model_output, [=](float x, float x0) { return (x - p.alpha * x0) / p.sigma; });
        return map_elements(sample, model_output, [=](float x, float v) { return p.alpha * v + p.sigma * x; });
    }

    Tensor first_order_update(const Tensor& m, int i, const Tensor& sample) const {
        const SigmaPoint t = sigma_point(sigmas_[static_cast<size_t>(i) + 1]);
        const SigmaPoint s = sigma_point(sigmas_[static_cast<size_t>(i)]);
        const float h = t.lambda - s.lambda;
        float c_sample, c_model;
        if (config_.algorithm_type == "dpmsolver++") {
            c_sample = t.sigma / s.sigma;
            c_model = t.alpha * (exp_f(-h) - 1.0f);
        } else {
            c_sample = t.alpha / s.alpha;
            c_model = t.sigma * (exp_f(h) - 1.0f);
        }
        return map_elements(sample, m, [=](float x, float d) { return c_sample * x - c_model * d; });
    }

    Tensor second_order_update(int i, const Tensor& sample) const {
        const SigmaPoint t = sigma_point(sigmas_[static_cast<size_t>(i) + 1]);
        const SigmaPoint s0 = sigma_point(sigmas_[static_cast<size_t>(i)]);
        const SigmaPoint s1 = sigma_point(sigmas_[static_cast<size_t>(i) - 1]);
        const Tensor& m0 = model_outputs_[model_outputs_.size() - 1];
        const Tensor& m1 = model_outputs_[model_outputs_.size() - 2];
        const float h = t.lambda - s0.lambda;
        const float h_0 = s0.lambda - s1.lambda;
        const float r0 = h_0 / h;
        const float inv_r0 = 1.0f / r0;
        const Tensor d1 = map_elements(m0, m1, [=](float a, float b) { return inv_r0 * (a - b); });
        float c_sample, c0, c1;
        if (config_.algorithm_type == "dpmsolver++") {
            c_sample = t.sigma / s0.sigma;
            c0 = t.alpha * (exp_f(-h) - 1.0f);
            // midpoint: x - c0*D0 - (0.5*c0)*D1; heun: x - c0*D0 + c1*D1 (sign folded into c1)
            c1 = config_.solver_type == "midpoint" ? -(0.5f * c0) : t.alpha * ((exp_f(-h) - 1.0f) / h + 1.0f);
        } else {
            c_sample = t.alpha / s0.alpha;
            c0 = t.sigma * (exp_f(h) - 1.0f);
            c1 = config_.solver_type == "midpoint" ? -(0.5f * c0) : -(t.sigma * ((exp_f(h) - 1.0f) / h - 1.0f));
        }
        return map_elements(sample, m0, d1, [=](float x, float d0, float dd1) {
            const float a = c_sample * x - c0 * d0;
            // x - c*D1 and x + (-c)*D1 round identically, so one form serves both signs.
            return a + c1 * dd1;
        });
    }

    Tensor third_order_update(int i, const Tensor& sample) const {
        const SigmaPoint t = sigma_point(sigmas_[static_cast<size_t>(i) + 1]);
        const SigmaPoint s0 = sigma_point(sigmas_[static_cast<size_t>(i)]);
        const SigmaPoint s1 = sigma_point(sigmas_[static_cast<size_t>(i) - 1]);
        const SigmaPoint s2 = sigma_point(sigmas_[static_cast<size_t>(i) - 2]);
        const size_t n = model_outputs_.size();
        const Tensor& m0 = model_outputs_[n - 1];
        const Tensor& m1 = model_outputs_[n - 2];
        const Tensor& m2 = model_outputs_[n - 3];
        const float h = t.lambda - s0.lambda;
        const float h_0 = s0.lambda - s1.lambda;
        const float h_1 = s1.lambda - s2.lambda;
        const float r0 = h_0 / h;
        const float r1 = h_1 / h;
        const float inv_r0 = 1.0f / r0;
        const float inv_r1 = 1.0f / r1;
        const float w1 = r0 / (r0 + r1);
        const float w2 = 1.0f / (r0 + r1);
        const Tensor d1_0 = map_elements(m0, m1, [=](float a, float b) { return inv_r0 * (a - b); });
        const Tensor d1_1 = map_elements(m1, m2, [=](float a, float b) { return inv_r1 * (a - b); });
        const Tensor d1 = map_elements(d1_0, d1_1, [=](float a, float b) { return a + w1 * (a - b); });
        const Tensor d2 = map_elements(d1_0, d1_1, [=](float a, float b) { return w2 * (a - b); });
        float c_sample, c0, c1, c2;
        if (config_.algorithm_type == "dpmsolver++") {
            const float em1 = exp_f(-h) - 1.0f;
            c_sample = t.sigma / s0.sigma;
            c0 = t.alpha * em1;                               // x - c0*D0
            c1 = t.alpha * (em1 / h + 1.0f);                  // + c1*D1
            c2 = -(t.alpha * ((em1 + h) / (h * h) - 0.5f));   // - (...)*D2
        } else {
            const float em1 = exp_f(h) - 1.0f;
            c_sample = t.alpha / s0.alpha;
            c0 = t.sigma * em1;
            c1 = -(t.sigma * (em1 / h - 1.0f));
            c2 = -(t.sigma * ((em1 - h) / (h * h) - 0.5f));
        }
        const Tensor partial = map_elements(sample, m0, d1, [=](float x, float d0, float dd1) {
            return (c_sample * x - c0 * d0) + c1 * dd1;
        });
        return map_elements(partial, d2, [=](float a, float dd2) { return a + c2 * dd2; });
    }

    std::vector<float> alphas_cumprod_;
    std::vector<float> table_;
    std::vector<float> lambda_;
    std::vector<float> timesteps_;
    std::vector<float> sigmas_;
    std::vector<Tensor> model_outputs_;
    int lower_order_nums_ = 0;
};

}  // namespace

std::unique_ptr<Scheduler> make_dpm_multistep_scheduler(const SchedulerConfig& config) {
    return std::make_unique<DpmMultistepScheduler>(config);
}

}  // namespace kiln
