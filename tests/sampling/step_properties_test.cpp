// The step arithmetic against properties derived from first principles, with synthetic denoisers
// (the real UNet lives elsewhere). Each test states what it proves.
#include <gtest/gtest.h>

#include <cmath>

#include "sampling/noise_schedule.h"
#include "sampling/sampling_loop.h"
#include "sampling/scheduler.h"
#include "sampling_fixtures.h"

namespace kiln {
namespace {

Tensor ramp(const Shape& shape, float lo, float hi) {
    Tensor t(shape);
    for (int64_t i = 0; i < t.numel(); ++i) t[i] = lo + (hi - lo) * static_cast<float>(i) / static_cast<float>(t.numel() - 1);
    return t;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
    double m = 0;
    for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
    return m;
}

// The exact denoiser of a data distribution concentrated on one point x0. Every model input is a
// variance-preserving sample alpha*x0 + s*eps (Euler-type schedulers divide by sqrt(sigma^2+1) to get
// there), so the model's eps, v or x0 prediction follows in closed form (computed in double).
class PointMassOracle {
public:
    PointMassOracle(const Scheduler& s, Tensor x0)
        : s_(s), x0_(std::move(x0)), ac_(schedule::alphas_cumprod(s.config(), true)) {}
    Tensor operator()(const Tensor& x_in, float t) {
        const int i = call_++;
        double alpha, sig;
        if (!s_.sigmas().empty()) {
            const double sg = s_.sigmas()[static_cast<size_t>(i)];
            alpha = 1 / std::sqrt(1 + sg * sg);
            sig = sg * alpha;
        } else {
            const double a = ac_[static_cast<size_t>(t)];
            alpha = std::sqrt(a);
            sig = std::sqrt(1 - a);
        }
        Tensor out(x_in.shape());
        const std::string& p = s_.config().prediction_type;
        for (int64_t k = 0; k < out.numel(); ++k) {
            const double eps = (x_in[k] - alpha * x0_[k]) / sig;
            out[k] = static_cast<float>(p == "epsilon" ? eps : p == "sample" ? x0_[k] : alpha * eps - sig * x0_[k]);
        }
        return out;
    }

private:
    const Scheduler& s_;
    Tensor x0_;
    std::vector<float> ac_;
    int call_ = 0;
};

// For a point mass every probability-flow trajectory is a straight line towards x0 in the
// sigma-parameterisation (constant eps, constant x0 prediction), which Euler, Heun, LMS, DDIM, PLMS,
// DPM-Solver++ and UniPC all integrate exactly, and Euler ancestral's noise vanishes at sigma 0. So
// from any starting noise every sampler must land on x0: this checks each update rule, the
// prediction-type conversions and the final-sigma handling, for every model's config.
TEST(StepProperties, EverySamplerLandsOnAPointMass) {
    const Shape shape = {1, 4, 4, 4};
    const Tensor x0 = ramp(shape, -1.0f, 1.0f);
    for (const char* model : test::kModels) {
        nlohmann::json input = test::loaded_model_scheduler_config(model);
        // The last DDIM/PLMS step goes to alphas_cumprod[0] unless set_alpha_to_one; with it the
        // chain ends at alpha = 1, i.e. exactly on x0.
        input["set_alpha_to_one"] = true;
        for (const std::string prediction : {"model", "sample"}) {
            nlohmann::json cfg = input;
            if (prediction == "sample") cfg["prediction_type"] = "sample";
            for (const std::string& name : kiln_sampler_names()) {
                if (prediction == "sample" && (name == "pndm" || name == "euler_a")) continue;  // diffusers lacks it
                // PLMS combines raw v predictions of earlier timesteps and converts the mix to eps
                // with the current sample; v (unlike eps) changes along the trajectory, so v-PLMS
                // is not exact here (diffusers' algorithm, not a rounding matter).
                if (name == "pndm" && cfg["prediction_type"] == "v_prediction") continue;
                const std::string where = std::string(model) + "/" + name + "/" + cfg["prediction_type"].get<std::string>();
                auto s = make_scheduler(name, scheduler_config_for(name, cfg));
                PointMassOracle oracle(*s, x0);
                test::TestNoise rng(7);
                const Tensor noise = rng.randn(shape);
                const Tensor out = run_txt2img(*s, 6, noise, [&](const Tensor& x, float t) { return oracle(x, t); }, rng);
                // Intermediates reach |x| <= sigma_max * max|noise| ~ 15 * 4 = 60, where float32's
                // spacing is 3.8e-6; a few roundings per model call over at most 11 calls stay below
                // 1e-4. LCM ends at c_out*x0 + c_skip*x with c_skip = 0.25/(1790^2+0.25) ~ 8e-8.
                EXPECT_LT(max_abs_diff(out, x0), 1e-4) << where;
            }
        }
    }
}

// Euler with zero model output: the x0 prediction is the sample itself, the derivative is 0, and the
// sample must come back bit for bit unchanged.
TEST(StepProperties, EulerWithZeroModelOutputKeepsTheSample) {
    auto s = make_scheduler("euler", scheduler_config_for("euler", test::loaded_model_scheduler_config("sd15-mini")));
    s->set_timesteps(6);
    test::TestNoise rng;
    const Tensor x = rng.randn({1, 4, 3, 5});
    for (int i = 0; i < static_cast<int>(s->timesteps().size()); ++i) {
        const Tensor next = s->step(Tensor(x.shape()), i, x, rng);
        EXPECT_EQ(next.values(), x.values()) << "step " << i;
    }
}

// With epsilon prediction the Euler-type derivative (x - x0_pred)/sigma is the model output itself,
// so scripting the output as f(sigma) turns the sampler into a quadrature rule for the integral of f
// over sigma. Heun (trapezoid) is exact for linear f on every full step.
TEST(StepProperties, HeunIntegratesALinearDerivativeExactly) {
    auto s = make_scheduler("heun", scheduler_config_for("heun", test::loaded_model_scheduler_config("sd15-mini")));
    s->set_timesteps(6);
    const auto& sig = s->sigmas();
    auto f = [](double sigma) { return 0.3 - 0.2 * sigma; };
    test::TestNoise rng;
    Tensor x = Tensor::filled({1, 1, 1, 1}, 2.0f);
    Tensor start = x;
    for (int i = 0; i + 1 < static_cast<int>(s->timesteps().size()); ++i) {
        const double sigma_in = sig[static_cast<size_t>(i)];  // the sigma the model is evaluated at
        x = s->step(Tensor::filled({1, 1, 1, 1}, static_cast<float>(f(sigma_in))), i, x, rng);
        if (i % 2 == 1) {  // a full Heun step from sig[i-1] to sig[i]
            const double a = sig[static_cast<size_t>(i) - 1], b = sig[static_cast<size_t>(i)];
            const double exact = 0.3 * (b - a) - 0.1 * (b * b - a * a);
            // The derivative is recovered as (x - (x - sigma*f))/sigma: the subtraction cancels and
            // leaves the rounding of x (relative 2^-23) divided by sigma, times the
            // step, plus a few roundings of the update itself.
            const double eps32 = std::ldexp(1.0, -23);
            const double tol = 2 * eps32 * std::fabs(x[0]) * (1 + std::fabs(b - a) / std::min(a, b)) + 1e-6;
            EXPECT_NEAR(x[0] - start[0], exact, tol) << "step " << i;
            start = x;
        }
    }
}

// LMS uses the last k derivatives with Lagrange-polynomial weights integrated over the step, so from
// its third step on (order >= 3) it integrates a quadratic derivative exactly.
TEST(StepProperties, LmsIntegratesAQuadraticDerivativeExactly) {
    auto s = make_scheduler("lms", scheduler_config_for("lms", test::loaded_model_scheduler_config("sd15-mini")));
    s->set_timesteps(8);
    const auto& sig = s->sigmas();
    auto f = [](double sigma) { return 0.5 - 0.3 * sigma + 0.02 * sigma * sigma; };
    test::TestNoise rng;
    Tensor x = Tensor::filled({1, 1, 1, 1}, 1.0f);
    for (int i = 0; i < static_cast<int>(s->timesteps().size()); ++i) {
        const Tensor before = x;
        x = s->step(Tensor::filled({1, 1, 1, 1}, static_cast<float>(f(sig[static_cast<size_t>(i)]))), i, x, rng);
        if (i >= 2) {
            const double a = sig[static_cast<size_t>(i)], b = sig[static_cast<size_t>(i) + 1];
            auto F = [](double t) { return 0.5 * t - 0.15 * t * t + 0.02 / 3 * t * t * t; };
            // Derivatives are float32 (relative 6e-8) and so are the coefficients; |x| stays < 10.
            EXPECT_NEAR(x[0] - before[0], F(b) - F(a), 5e-6) << "step " << i;
        }
    }
}

// DPM-Solver++(2M) as published (Lu et al. 2022, "DPM-Solver++", Algorithm 2), evaluated in double:
// x_{i+1} = (s_{i+1}/s_i) x_i - a_{i+1} (e^{-h_i} - 1) D_i with D_0 = x0_0 and, later,
// D_i = (1 + 1/(2 r_i)) x0_i - 1/(2 r_i) x0_{i-1}, r_i = h_{i-1}/h_i; the final step (to sigma 0) is
// first order. Model outputs are scripted x0 predictions (prediction_type "sample").
TEST(StepProperties, DpmSolverPlusPlus2MFollowsThePublishedUpdate) {
    for (const char* name : {"dpmpp_2m", "dpmpp_2m_karras"}) {
        nlohmann::json cfg = test::loaded_model_scheduler_config("sd15-mini");
        cfg["prediction_type"] = "sample";
        auto s = make_scheduler(name, scheduler_config_for(name, cfg));
        s->set_timesteps(7);
        const auto& sig = s->sigmas();
        auto alpha = [&](size_t i) { return 1 / std::sqrt(1 + double(sig[i]) * sig[i]); };
        auto sigma_vp = [&](size_t i) { return double(sig[i]) * alpha(i); };
        auto lambda = [&](size_t i) { return std::log(alpha(i)) - std::log(sigma_vp(i)); };
        test::TestNoise rng;
        Tensor x = Tensor::filled({1, 1, 1, 1}, 3.0f);
        double xd = 3.0, prev_x0 = 0, prev_h = 0;
        const size_t n = s->timesteps().size();
        for (size_t i = 0; i < n; ++i) {
            const double x0 = std::sin(static_cast<double>(i) + 0.5);  // any scripted prediction
            x = s->step(Tensor::filled({1, 1, 1, 1}, static_cast<float>(x0)), static_cast<int>(i), x, rng);
            if (i + 1 == n) {
                xd = x0;  // sigma 0: the prediction itself
            } else {
                const double h = lambda(i + 1) - lambda(i);
                double d = x0;
                if (i > 0) {
                    const double r = prev_h / h;
                    d = (1 + 1 / (2 * r)) * x0 - 1 / (2 * r) * prev_x0;
                }
                xd = sigma_vp(i + 1) / sigma_vp(i) * xd - alpha(i + 1) * (std::exp(-h) - 1) * d;
                prev_h = h;
            }
            prev_x0 = x0;
            // float32 coefficients and updates on |x| <= 4: relative error of a few 1e-7 per step.
            EXPECT_NEAR(x[0], xd, 1e-5) << name << " step " << i;
        }
    }
}

// DDIM is deterministic (eta = 0) and, given the true noise, moves a sample along the forward
// process: x_t = sqrt(a_t) x0 + sqrt(1 - a_t) eps at every timestep it visits.
TEST(StepProperties, DdimWithTheTrueNoiseStaysOnTheForwardProcess) {
    auto s = make_scheduler("ddim", scheduler_config_for("ddim", test::loaded_model_scheduler_config("sd15-mini")));
    s->set_timesteps(6);
    const std::vector<float> ac = schedule::alphas_cumprod(s->config());
    const Shape shape = {1, 2, 2, 2};
    const Tensor x0 = ramp(shape, -0.8f, 0.9f);
    test::TestNoise rng(3);
    const Tensor eps = rng.randn(shape);
    Tensor x = s->add_noise(x0, eps, 0);
    const auto& ts = s->timesteps();
    for (size_t i = 0; i < ts.size(); ++i) {
        x = s->step(eps, static_cast<int>(i), x, rng);
        // next timestep, or alphas_cumprod[0] after the last (set_alpha_to_one is false for SD)
        const double a = i + 1 < ts.size() ? ac[static_cast<size_t>(ts[i + 1])] : ac[0];
        for (int64_t k = 0; k < x.numel(); ++k)
            EXPECT_NEAR(x[k], std::sqrt(a) * x0[k] + std::sqrt(1 - a) * eps[k], 2e-6) << "after step " << i;
    }
}

}  // namespace
}  // namespace kiln
