// LMSDiscreteScheduler: linear multistep over the last (up to 4) derivatives, with coefficients
// integrated the way diffusers gets them from scipy.integrate.quad.
#include <algorithm>
#include <cmath>
#include <deque>

#include "sampling/noise_schedule.h"
#include "sampling/schedulers.h"
#include "sampling/sigma_schedule.h"
#include "sampling/float_math.h"  // last: turns off FMA contraction below

namespace kiln {
namespace {

// QUADPACK's 21-point Gauss-Kronrod rule (dqk21), published constants.
constexpr double kXgk[11] = {0.995657163025808080735527280689003, 0.973906528517171720077964012084452,
                             0.930157491355708226001207180059508, 0.865063366688984510732096688423493,
                             0.780817726586416897063717578345042, 0.679409568299024406234327365114874,
                             0.562757134668604683339000099272694, 0.433395394129247190799265943165784,
                             0.294392862701460198131126603103866, 0.148874338981631210884826001129720,
                             0.000000000000000000000000000000000};
constexpr double kWgk[11] = {0.011694638867371874278064396062192, 0.032558162307964727478818972459390,
                             0.054755896574351996031381300244580, 0.075039674810919952767043140916190,
                             0.093125454583697605535065465083366, 0.109387158802297641899210590325805,
                             0.123491976262065851077958109831074, 0.134709217311473325928054001771707,
                             0.142775938577060080797094273138717, 0.147739104901338491374841515972068,
                             0.149445554002916905664936468389821};

// scipy.integrate.quad(f, a, b, epsrel=1e-4) for the Lagrange basis polynomials LMS integrates: the
// integrand has degree <= 3, so QUADPACK's first 21-point Kronrod estimate already meets the
// tolerance and is what quad returns. The sum runs in QUADPACK's order (centre, then the Gauss
// abscissae, then the Kronrod ones) so the double result matches to the last bit.
template <class F>
double quad_kronrod21(F f, double a, double b) {
    const bool flip = b < a;  // quad integrates over [min, max] and negates
    if (flip) std::swap(a, b);
    const double centr = 0.5 * (a + b);
    const double hlgth = 0.5 * (b - a);
    double resk = kWgk[10] * f(centr);
    for (int j = 1; j <= 5; ++j) {
        const int jtw = 2 * j - 1;  // 0-based index of xgk(2j)
        const double absc = hlgth * kXgk[jtw];
        const double fsum = f(centr - absc) + f(centr + absc);
        resk = resk + kWgk[jtw] * fsum;
    }
    for (int j = 1; j <= 5; ++j) {
        const int jtwm1 = 2 * j - 2;  // 0-based index of xgk(2j-1)
        const double absc = hlgth * kXgk[jtwm1];
        const double fsum = f(centr - absc) + f(centr + absc);
        resk = resk + kWgk[jtwm1] * fsum;
    }
    const double result = resk * hlgth;
    return flip ? -result : result;
}

class LmsScheduler final : public Scheduler {
public:
    explicit LmsScheduler(const SchedulerConfig& c) : Scheduler(c) {
        reject_option(c.use_beta_sigmas, c, "use_beta_sigmas");
        require(static_cast<int>(c.use_karras_sigmas) + c.use_exponential_sigmas + c.use_beta_sigmas <= 1,
                ErrorKind::InvalidModel,
                "scheduler config: only one of use_karras_sigmas, use_exponential_sigmas, use_beta_sigmas can be set");
        alphas_cumprod_ = schedule::alphas_cumprod(c);
        table_ = schedule::sigmas_from_alphas_cumprod(alphas_cumprod_);
    }

    void set_timesteps(int n) override {
        schedule::require_valid_steps(n, config_);
        const std::vector<float> ts = schedule::discrete_timesteps_f32(config_, n);
        const std::vector<float> log_table = schedule::log_f32(table_);
        std::vector<double> sig = schedule::np_interp_on_index(std::vector<double>(ts.begin(), ts.end()), table_);
        timesteps_ = ts;
        if (config_.use_karras_sigmas || config_.use_exponential_sigmas) {
            sig = config_.use_karras_sigmas ? schedule::karras_sigmas(sig.back(), sig.front(), n)
                                            : schedule::exponential_sigmas(sig.back(), sig.front(), n);
            std::vector<double> t_conv;
            for (double s : sig) t_conv.push_back(schedule::sigma_to_t(s, log_table));
            timesteps_ = schedule::to_f32(t_conv);
        }
        sigmas_ = schedule::to_f32(sig);
        sigmas_.push_back(0.0f);
        num_inference_steps_ = n;
        begin_index_ = 0;
        derivatives_.clear();
    }

    const std::vector<float>& timesteps() const override { return timesteps_; }
    const std::vector<float>& sigmas() const override { return sigmas_; }
    float init_noise_sigma() const override { return schedule::init_noise_sigma_for(config_, sigmas_); }

    Tensor scale_model_input(const Tensor& sample, int step_index) override {
        require_step_index(step_index, "LMS scale_model_input");
        const float d = schedule::input_scale_denominator(sigmas_[static_cast<size_t>(step_index)]);
        return map_elements(sample, [=](float x) { return x / d; });
    }

    Tensor step(const Tensor& model_output, int step_index, const Tensor& sample, NoiseGenerator&) override {
        require_step_index(step_index, "LMS step");
        const float sigma = sigmas_[static_cast<size_t>(step_index)];
        Tensor pred_x0;
        if (config_.prediction_type == "epsilon") {
            pred_x0 = map_elements(sample, model_output, [=](float x, float e) { return x - sigma * e; });
        } else if (config_.prediction_type == "v_prediction") {
            const float c_out = -sigma / schedule::input_scale_denominator(sigma);
            const float c_skip_den = sigma * sigma + 1.0f;
            pred_x0 = map_elements(model_output, sample, [=](float v, float x) { return v * c_out + x / c_skip_den; });
        } else {
            pred_x0 = model_output;
        }
        derivatives_.push_back(map_elements(sample, pred_x0, [=](float x, float x0) { return (x - x0) / sigma; }));
        if (derivatives_.size() > kMaxOrder) derivatives_.pop_front();

        // diffusers takes the order from the absolute step index, so an img2img run that starts
        // partway uses high-order coefficients with fewer stored derivatives (zip truncates).
        const int order = std::min(step_index + 1, kMaxOrder);
        const size_t terms = std::min(static_cast<size_t>(order), derivatives_.size());
        Tensor sum;
        for (size_t k = 0; k < terms; ++k) {
            const auto coeff = static_cast<float>(lms_coefficient(order, step_index, static_cast<int>(k)));
            const Tensor& d = derivatives_[derivatives_.size() - 1 - k];
            sum = k == 0 ? map_elements(d, [=](float v) { return coeff * v; })
                         : map_elements(sum, d, [=](float s, float v) { return s + coeff * v; });
        }
        return map_elements(sample, sum, [](float x, float s) { return x + s; });
    }

    Tensor add_noise(const Tensor& original, const Tensor& noise, int step_index) const override {
        require_step_index(step_index, "LMS add_noise");
        const float sigma = sigmas_[static_cast<size_t>(step_index)];
        return map_elements(original, noise, [=](float x, float e) { return x + e * sigma; });
    }

private:
    // Integral from sigma[t] to sigma[t+1] of the Lagrange basis polynomial of `current` over the
    // last `order` sigmas. The integrand runs on float32 0-dim tensors in diffusers, so it is
    // evaluated here in float32 too (tau rounded to float32 first).
    double lms_coefficient(int order, int t, int current) const {
        auto basis = [&](double tau_d) -> double {
            const auto tau = static_cast<float>(tau_d);
            bool any = false;
            float prod = 1.0f;
            for (int k = 0; k < order; ++k) {
                if (k == current) continue;
                const float sk = sigmas_[static_cast<size_t>(t - k)];
                const float factor = (tau - sk) / (sigmas_[static_cast<size_t>(t - current)] - sk);
                prod = any ? prod * factor : factor;
                any = true;
            }
            return any ? static_cast<double>(prod) : 1.0;
        };
        return quad_kronrod21(basis, sigmas_[static_cast<size_t>(t)], sigmas_[static_cast<size_t>(t) + 1]);
    }

    static constexpr int kMaxOrder = 4;
    std::vector<float> alphas_cumprod_;
    std::vector<float> table_;
    std::vector<float> timesteps_;
    std::vector<float> sigmas_;
    std::deque<Tensor> derivatives_;
};

}  // namespace

std::unique_ptr<Scheduler> make_lms_scheduler(const SchedulerConfig& config) {
    return std::make_unique<LmsScheduler>(config);
}

}  // namespace kiln
