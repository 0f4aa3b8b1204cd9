// UniPCMultistepScheduler (Zhao et al. 2023): a UniP predictor and, from the second step on, a
// UniC corrector that reuses the new model output; solver orders 1 and 2 (the default).
#include <algorithm>
#include <cmath>

#include "sampling/noise_schedule.h"
#include "sampling/schedulers.h"
#include "sampling/float_math.h"  // last: turns off FMA contraction below

namespace kiln {
namespace {



// The B(h) coefficients of UniPC, in diffusers' float32 order of operations.
struct Coefficients {
    float hh;       // -h when predicting x0
    float h_phi_1;  // expm1(hh)
    float b_h;      // hh (bh1) or expm1(hh) (bh2)
    float b[2];     // right-hand side for orders 1 and 2
};
Coefficients coefficients(float h, bool predict_x0, bool bh1) {
    Coefficients c{};
    c.hh = predict_x0 ? -h : h;
    c.h_phi_1 = expm1_f(c.hh);
    c.b_h = bh1 ? c.hh : expm1_f(c.hh);
    float h_phi_k = c.h_phi_1 / c.hh - 1.0f;
    int factorial = 1;
    for (int i = 1; i <= 2; ++i) {
        c.b[i - 1] = h_phi_k * static_cast<float>(factorial) / c.b_h;
        factorial *= i + 1;
        h_phi_k = h_phi_k / c.hh - static_cast<float>(1.0 / factorial);
    }
    return c;
}

// torch.linalg.solve of [[1, 1], [rk, 1]] x = b: LU with partial pivoting in float32 as LAPACK's
// sgesv does it (row swap when |rk| > 1, the multiplier from the pivot's reciprocal).
void solve_order2(float rk, float b0, float b1, float& x0, float& x1) {
    if (std::fabs(rk) > 1.0f) {
        const float l = 1.0f * (1.0f / rk);
        const float u11 = 1.0f - l * 1.0f;
        const float y1 = b0 - l * b1;
        x1 = y1 / u11;
        x0 = (b1 - 1.0f * x1) / rk;
    } else {
        const float l = rk;
        const float u11 = 1.0f - l * 1.0f;
        const float y1 = b1 - l * b0;
        x1 = y1 / u11;
        x0 = b0 - 1.0f * x1;
    }
}

class UniPcScheduler final : public Scheduler {
public:
    explicit UniPcScheduler(const SchedulerConfig& c) : Scheduler(c) {
        reject_option(c.thresholding, c, "thresholding");
        reject_option(c.use_beta_sigmas, c, "use_beta_sigmas");
        reject_option(c.use_flow_sigmas, c, "use_flow_sigmas");
        reject_option(c.use_dynamic_shifting, c, "use_dynamic_shifting");
        reject_option(c.has_solver_p, c, "solver_p");
        reject_option(c.shift_terminal.has_value(), c, "shift_terminal");
        reject_option(c.solver_order > 2, c, "solver_order " + std::to_string(c.solver_order));
        require(c.solver_order >= 1, ErrorKind::InvalidModel, "scheduler config: solver_order must be at least 1");
        require(static_cast<int>(c.use_karras_sigmas) + c.use_exponential_sigmas + c.use_beta_sigmas <= 1,
                ErrorKind::InvalidModel,
                "scheduler config: only one of use_karras_sigmas, use_exponential_sigmas, use_beta_sigmas can be set");
        if (config_.solver_type == "midpoint" || config_.solver_type == "heun" || config_.solver_type == "logrho")
            config_.solver_type = "bh2";  // as diffusers re-registers it
        require(config_.solver_type == "bh1" || config_.solver_type == "bh2", ErrorKind::InvalidModel,
                "scheduler config: solver_type \"" + config_.solver_type + "\" is not bh1 or bh2");
        alphas_cumprod_ = schedule::alphas_cumprod(c, false, /*pin_last_for_zero_snr=*/true);
        table_ = schedule::sigmas_from_alphas_cumprod(alphas_cumprod_);
    }

    void set_timesteps(int n) override {
        schedule::require_valid_steps(n, config_);
        const int64_t N = config_.num_train_timesteps;
        std::vector<double> ts = schedule::multistep_timesteps(config_, N, n);
        std::vector<double> sig;
        float sigma_last = 0.0f;
        if (config_.use_karras_sigmas || config_.use_exponential_sigmas) {
            const std::vector<float> log_table = schedule::log_f32(table_);
            const double smin = config_.sigma_min.value_or(table_.front());
            const double smax = config_.sigma_max.value_or(table_.back());
            sig = config_.use_karras_sigmas ? schedule::karras_sigmas(smin, smax, n)
                                            : schedule::exponential_sigmas(smin, smax, n);
            ts.clear();
            for (double s : sig) {
                const double t = schedule::sigma_to_t(s, log_table);
                ts.push_back(config_.use_karras_sigmas ? schedule::np_round(t) : t);
            }
            if (config_.final_sigmas_type == "sigma_min") sigma_last = static_cast<float>(sig.back());
        } else {
            sig = schedule::np_interp_on_index(ts, table_);
            if (config_.final_sigmas_type == "sigma_min") sigma_last = table_[0];
        }
        sigmas_ = schedule::to_f32(sig);
        sigmas_.push_back(sigma_last);
        timesteps_.clear();
        for (double t : ts) {
            const auto ti = static_cast<int64_t>(t);
            require(ti >= 0 && ti < N, ErrorKind::InvalidArgument,
                    "UniPC timestep " + std::to_string(ti) + " is outside the model's training timesteps");
            timesteps_.push_back(static_cast<float>(ti));
        }
        num_inference_steps_ = static_cast<int>(timesteps_.size());
        begin_index_ = 0;
        model_outputs_.assign(static_cast<size_t>(config_.solver_order), Tensor());
        lower_order_nums_ = 0;
        this_order_ = 0;
        has_last_sample_ = false;
        last_sample_ = Tensor();
    }

    const std::vector<float>& timesteps() const override { return timesteps_; }
    const std::vector<float>& sigmas() const override { return sigmas_; }
    float init_noise_sigma() const override { return 1.0f; }

    Tensor scale_model_input(const Tensor& sample, int step_index) override {
        require_step_index(step_index, "UniPC scale_model_input");
        return sample;
    }

    Tensor step(const Tensor& model_output, int step_index, const Tensor& sample_in, NoiseGenerator&) override {
        require_step_index(step_index, "UniPC step");
        const int i = step_index;
        const bool disabled = std::find(config_.disable_corrector.begin(), config_.disable_corrector.end(), i - 1) !=
                              config_.disable_corrector.end();
        const bool use_corrector = i > 0 && !disabled && has_last_sample_;

        const Tensor converted = convert_model_output(model_output, i, sample_in);
        Tensor sample = use_corrector ? corrector(converted, i, sample_in) : sample_in;

        std::rotate(model_outputs_.begin(), model_outputs_.begin() + 1, model_outputs_.end());
        model_outputs_.back() = converted;

        const int len = static_cast<int>(timesteps_.size());
        int order = config_.lower_order_final ? std::min(config_.solver_order, len - i) : config_.solver_order;
        this_order_ = std::min(order, lower_order_nums_ + 1);

        last_sample_ = sample;
        has_last_sample_ = true;
        Tensor prev = predictor(i, sample, this_order_);
        if (lower_order_nums_ < config_.solver_order) ++lower_order_nums_;
        return prev;
    }

    Tensor add_noise(const Tensor& original, const Tensor& noise, int step_index) const override {
        require_step_index(step_index, "UniPC add_noise");
        const SigmaPoint p = sigma_point(sigmas_[static_cast<size_t>(step_index)]);
        return map_elements(original, noise, [=](float x, float e) { return p.alpha * x + p.sigma * e; });
    }

private:
    bool predict_x0() const { return config_.predict_x0; }

    Tensor convert_model_output(const Tensor& model_output, int i, const Tensor& sample) const {
        const SigmaPoint p = sigma_point(sigmas_[static_cast<size_t>(i)]);
        const std::string& pt = config_.prediction_type;
        if (predict_x0()) {
            if (pt == "epsilon")
                return map_elements(sample, model_output, [=](float x, float e) { return (x - p.sigma * e) / p.alpha; });
            if (pt == "sample") return model_output;
            return map_elements(sample, model_output, [=](float x, float v) { return p.alpha * x - p.sigma * v; });
        }
        if (pt == "epsilon") return model_output;
        if (pt == "sample")
            return map_elements(sample, model_output, [=](float x, float x0) { return (x - p.alpha * x0) / p.sigma; });
        return map_elements(sample, model_output, [=](float x, float v) { return p.alpha * v + p.sigma * x; });
    }

    // x_t_ = (sigma_t/sigma_s0) x - (alpha_t h_phi_1) m0 for x0 prediction, the alpha/sigma mirror otherwise.
    void base_coefficients(const SigmaPoint& t, const SigmaPoint& s0, const Coefficients& c, float& c_x, float& c_m,
                           float& c_res) const {
        if (predict_x0()) {
            c_x = t.sigma / s0.sigma;
            c_m = t.alpha * c.h_phi_1;
            c_res = t.alpha * c.b_h;
        } else {
            c_x = t.alpha / s0.alpha;
            c_m = t.sigma * c.h_phi_1;
            c_res = t.sigma * c.b_h;
        }
    }

    // UniP: the sample at the next sigma from the current one and the stored model outputs.
    Tensor predictor(int i, const Tensor& x, int order) const {
        const SigmaPoint t = sigma_point(sigmas_[static_cast<size_t>(i) + 1]);
        const SigmaPoint s0 = sigma_point(sigmas_[static_cast<size_t>(i)]);
        const float h = t.lambda - s0.lambda;
        const Coefficients c = coefficients(h, predict_x0(), config_.solver_type == "bh1");
        float c_x, c_m, c_res;
        base_coefficients(t, s0, c, c_x, c_m, c_res);
        const Tensor& m0 = model_outputs_.back();
        if (order < 2) {
            // pred_res is the Python int 0: x_t_ - c_res * 0
            const float zero_term = c_res * 0.0f;
            return map_elements(x, m0, [=](float xv, float mv) { return (c_x * xv - c_m * mv) - zero_term; });
        }
        const SigmaPoint si = sigma_point(sigmas_[static_cast<size_t>(i) - 1]);
        const float rk = (si.lambda - s0.lambda) / h;
        const Tensor& m1 = model_outputs_[model_outputs_.size() - 2];
        const Tensor d1 = map_elements(m1, m0, [=](float a, float b) { return (a - b) / rk; });
        return map_elements(x, m0, d1, [=](float xv, float mv, float dv) {
            const float pred_res = 0.5f * dv;  // rhos_p = [0.5] for order 2
            return (c_x * xv - c_m * mv) - c_res * pred_res;
        });
    }

    // UniC: corrects the sample the last predictor produced, using the new model output.
    Tensor corrector(const Tensor& model_t, int i, const Tensor& this_sample) const {
        const int order = this_order_;
        const SigmaPoint t = sigma_point(sigmas_[static_cast<size_t>(i)]);
        const SigmaPoint s0 = sigma_point(sigmas_[static_cast<size_t>(i) - 1]);
        const float h = t.lambda - s0.lambda;
        const Coefficients c = coefficients(h, predict_x0(), config_.solver_type == "bh1");
        float c_x, c_m, c_res;
        base_coefficients(t, s0, c, c_x, c_m, c_res);
        const Tensor& m0 = model_outputs_.back();  // the previous step's output: not yet shifted
        const Tensor& x = last_sample_;
        require_same_shape(x, this_sample, "UniPC corrector");
        if (order < 2) {
            return map_elements(x, m0, model_t, [=](float xv, float mv, float mt) {
                const float d1_t = mt - mv;
                return (c_x * xv - c_m * mv) - c_res * (0.5f * d1_t);  // rhos_c = [0.5]
            });
        }
        const SigmaPoint si = sigma_point(sigmas_[static_cast<size_t>(i) - 2]);
        const float rk = (si.lambda - s0.lambda) / h;
        float rho0, rho1;
        solve_order2(rk, c.b[0], c.b[1], rho0, rho1);
        const Tensor& m1 = model_outputs_[model_outputs_.size() - 2];
        const Tensor d1 = map_elements(m1, m0, [=](float a, float b) { return (a - b) / rk; });
        const Tensor base = map_elements(x, m0, [=](float xv, float mv) { return c_x * xv - c_m * mv; });
        return map_elements(base, d1, map_elements(model_t, m0, [](float a, float b) { return a - b; }),
                            [=](float bv, float dv, float d1_t) {
                                const float corr_res = rho0 * dv;
                                return bv - c_res * (corr_res + rho1 * d1_t);
                            });
    }

    std::vector<float> alphas_cumprod_;
    std::vector<float> table_;
    std::vector<float> timesteps_;
    std::vector<float> sigmas_;
    std::vector<Tensor> model_outputs_;
    int lower_order_nums_ = 0;
    int this_order_ = 0;
    bool has_last_sample_ = false;
    Tensor last_sample_;
};

}  // namespace

std::unique_ptr<Scheduler> make_unipc_scheduler(const SchedulerConfig& config) {
    return std::make_unique<UniPcScheduler>(config);
}

}  // namespace kiln
