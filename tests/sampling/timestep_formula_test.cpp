// set_timesteps of every sampler, for every timestep_spacing and 1..50 steps, against the closed forms
// of diffusers' set_timesteps (each quoted below with its file and function). The fixtures pin 6 and 8
// steps only; these also cover step counts that do not divide 1000, where leading spacing floors the
// ratio and trailing spacing rounds fractional positions. Expectations are computed here from the
// formulas, independently of kiln's own numpy/torch helpers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kiln/error.h"
#include "sampling/noise_schedule.h"
#include "sampling/sampling_loop.h"
#include "sampling/scheduler.h"
#include "sampling_fixtures.h"

namespace kiln {
namespace {

constexpr int kMaxSteps = 50;
const char* const kSpacings[] = {"leading", "linspace", "trailing"};

// numpy.linspace(start, stop, num, endpoint): y_i = i * ((stop - start) / div) + start in float64,
// the last value replaced by `stop` when endpoint is set.
std::vector<double> linspace(double start, double stop, int num, bool endpoint = true) {
    const int div = endpoint ? num - 1 : num;
    std::vector<double> y(static_cast<size_t>(num));
    for (int i = 0; i < num; ++i) y[static_cast<size_t>(i)] = div > 0 ? i * ((stop - start) / div) + start : start;
    if (endpoint && num > 1) y.back() = stop;
    return y;
}

// numpy.arange(start, 0, -step) for a descending float step: ceil(start / step) values, filled as
// start + i * delta with delta = (start - step) - start (numpy derives the stride from the first two).
std::vector<double> arange_down(double start, double step) {
    const auto len = static_cast<int>(std::ceil(start / step));
    const double delta = (start - step) - start;
    std::vector<double> y;
    for (int i = 0; i < len; ++i) y.push_back(i == 0 ? start : start + i * delta);
    return y;
}

double np_round(double x) { return std::nearbyint(x); }  // round half to even

template <class T>
std::vector<T> reversed(std::vector<T> v) {
    std::reverse(v.begin(), v.end());
    return v;
}

// DDIMScheduler.set_timesteps (scheduling_ddim.py), integer timesteps:
//   linspace: np.linspace(0, N - 1, n).round()[::-1]
//   leading:  (np.arange(0, n) * (N // n)).round()[::-1] + steps_offset
//   trailing: np.round(np.arange(N, 0, -N / n)) - 1
// PNDM (scheduling_pndm.py) builds the same three schedules in ascending order.
std::vector<double> integer_schedule(const std::string& spacing, int N, int n, int offset) {
    std::vector<double> ts;
    if (spacing == "linspace") {
        for (double t : linspace(0, N - 1, n)) ts.push_back(np_round(t));
        return reversed(ts);
    }
    if (spacing == "leading") {
        for (int i = n - 1; i >= 0; --i) ts.push_back(static_cast<double>(i * (N / n) + offset));
        return ts;
    }
    for (double t : arange_down(N, static_cast<double>(N) / n)) ts.push_back(np_round(t) - 1);
    return ts;
}

// EulerDiscreteScheduler.set_timesteps (scheduling_euler_discrete.py; EulerAncestral, Heun and LMS
// have the same lines), float32 timesteps:
//   linspace: np.linspace(0, N - 1, n, dtype=np.float32)[::-1]
//   leading:  (np.arange(0, n) * (N // n)).round()[::-1].astype(np.float32) + steps_offset
//   trailing: np.arange(N, 0, -N / n).round().astype(np.float32) - 1
std::vector<float> float_schedule(const std::string& spacing, int N, int n, int offset) {
    std::vector<float> ts;
    if (spacing == "linspace") {
        for (double t : linspace(0, N - 1, n)) ts.push_back(static_cast<float>(t));
        return reversed(ts);
    }
    if (spacing == "leading") {
        for (int i = n - 1; i >= 0; --i) ts.push_back(static_cast<float>(i * (N / n)) + static_cast<float>(offset));
        return ts;
    }
    for (double t : arange_down(N, static_cast<double>(N) / n)) ts.push_back(static_cast<float>(np_round(t)) - 1.0f);
    return ts;
}

// DPMSolverMultistepScheduler / UniPCMultistepScheduler.set_timesteps (scheduling_dpmsolver_multistep.py,
// scheduling_unipc_multistep.py), n + 1 points with the last dropped; `last` is N unless
// lambda_min_clipped cuts the schedule (it does not for these configs):
//   linspace: np.linspace(0, last - 1, n + 1).round()[::-1][:-1]
//   leading:  (np.arange(0, n + 1) * (last // (n + 1))).round()[::-1][:-1] + steps_offset
//   trailing: np.arange(last, 0, -N / n).round() - 1
std::vector<double> multistep_schedule(const std::string& spacing, int N, int n, int offset) {
    std::vector<double> ts;
    if (spacing == "linspace") {
        for (double t : linspace(0, N - 1, n + 1)) ts.push_back(np_round(t));
        ts = reversed(ts);
        ts.pop_back();
        return ts;
    }
    if (spacing == "leading") {
        for (int i = n; i >= 1; --i) ts.push_back(static_cast<double>(i * (N / (n + 1)) + offset));
        return ts;
    }
    for (double t : arange_down(N, static_cast<double>(N) / n)) ts.push_back(np_round(t) - 1);
    return ts;
}

// np.interp(t, np.arange(len(table)), table) in float64, then .astype(np.float32).
std::vector<float> interp_f32(const std::vector<double>& ts, const std::vector<float>& table) {
    std::vector<float> out;
    for (double t : ts) {
        const auto j = static_cast<size_t>(std::floor(t));
        const double v = j + 1 >= table.size() ? table.back()
                         : t == static_cast<double>(j) ? table[j]
                                                      : (double(table[j + 1]) - table[j]) * (t - j) + table[j];
        out.push_back(static_cast<float>(v));
    }
    return out;
}

template <class T>
std::vector<double> as_double(const std::vector<T>& v) {
    return std::vector<double>(v.begin(), v.end());
}
template <class T>
std::vector<float> as_float(const std::vector<T>& v) {
    return std::vector<float>(v.begin(), v.end());
}

struct Expected {
    std::vector<float> timesteps;
    std::vector<float> sigmas;  // empty for the schedulers without sigmas
    float init_noise_sigma = 1.0f;
};

// The k-diffusion style schedulers start from sigma_max for linspace/trailing spacing and from
// sqrt(sigma_max^2 + 1) for leading (their init_noise_sigma properties).
float euler_init_sigma(const std::string& spacing, const std::vector<float>& sigmas) {
    const float m = *std::max_element(sigmas.begin(), sigmas.end());
    return spacing == "leading" ? std::sqrt(m * m + 1.0f) : m;
}

Expected expected_for(const std::string& sampler, const SchedulerConfig& c, int n) {
    const int N = c.num_train_timesteps, off = c.steps_offset;
    const std::string& sp = c.timestep_spacing;
    std::vector<float> table;  // sigma of each training timestep, torch float32: ((1 - a) / a) ** 0.5
    for (float a : schedule::alphas_cumprod(c)) table.push_back(std::sqrt((1.0f - a) / a));
    Expected e;
    if (sampler == "ddim") {
        e.timesteps = as_float(integer_schedule(sp, N, n, off));
    } else if (sampler == "pndm") {
        // skip_prk_steps: np.concatenate([_timesteps[:-1], _timesteps[-2:-1], _timesteps[-1:]])[::-1]
        const std::vector<double> asc = reversed(integer_schedule(sp, N, n, off));
        std::vector<double> plms(asc.begin(), asc.end() - 1);
        if (asc.size() >= 2) plms.push_back(asc[asc.size() - 2]);
        plms.push_back(asc.back());
        e.timesteps = as_float(reversed(plms));
    } else if (sampler == "euler" || sampler == "euler_a" || sampler == "lms") {
        e.timesteps = float_schedule(sp, N, n, off);
        e.sigmas = interp_f32(as_double(e.timesteps), table);
        e.sigmas.push_back(0.0f);
        e.init_noise_sigma = euler_init_sigma(sp, e.sigmas);
    } else if (sampler == "heun") {
        // timesteps[:1] + timesteps[1:].repeat_interleave(2); sigmas[:1] + sigmas[1:-1] twice + sigmas[-1:]
        const std::vector<float> ts = float_schedule(sp, N, n, off);
        std::vector<float> sig = interp_f32(as_double(ts), table);
        sig.push_back(0.0f);
        e.timesteps = {ts.front()};
        for (size_t i = 1; i < ts.size(); ++i) e.timesteps.insert(e.timesteps.end(), 2, ts[i]);
        e.sigmas = {sig.front()};
        for (size_t i = 1; i + 1 < sig.size(); ++i) e.sigmas.insert(e.sigmas.end(), 2, sig[i]);
        e.sigmas.push_back(sig.back());
        e.init_noise_sigma = euler_init_sigma(sp, e.sigmas);
    } else if (sampler == "dpmpp_2m" || sampler == "unipc") {
        const std::vector<double> ts = multistep_schedule(sp, N, n, off);
        e.timesteps = as_float(ts);
        e.sigmas = interp_f32(ts, table);
        e.sigmas.push_back(0.0f);  // final_sigmas_type "zero"
    } else if (sampler == "lcm") {
        // LCMScheduler.set_timesteps (scheduling_lcm.py), spacing-independent: the distillation
        // schedule np.arange(1, orig + 1) * (N // orig) - 1, reversed, indexed by
        // np.floor(np.linspace(0, orig, num=n, endpoint=False)).
        const int orig = c.original_inference_steps, k = N / orig;
        for (double v : linspace(0, orig, n, /*endpoint=*/false))
            e.timesteps.push_back(static_cast<float>((orig - static_cast<int>(std::floor(v))) * k - 1));
    }
    return e;
}

const char* const kSamplers[] = {"ddim", "pndm", "euler", "euler_a", "heun", "lms", "dpmpp_2m", "unipc", "lcm"};

TEST(TimestepFormula, EverySamplerSpacingAndStepCountMatchesDiffusersSetTimesteps) {
    for (const char* model : test::kModels) {
        const nlohmann::json input = test::loaded_model_scheduler_config(model);
        for (const char* sampler : kSamplers) {
            for (const char* spacing : kSpacings) {
                const SchedulerConfig c = scheduler_config_for(sampler, input, spacing);
                auto s = make_scheduler(sampler, c);
                const int max_steps = std::string(sampler) == "lcm" ? c.original_inference_steps : kMaxSteps;
                for (int n = 1; n <= max_steps; ++n) {
                    const std::string where =
                        std::string(model) + "/" + sampler + "/" + spacing + "/" + std::to_string(n) + " steps";
                    s->set_timesteps(n);
                    const Expected e = expected_for(sampler, c, n);
                    ASSERT_EQ(s->timesteps(), e.timesteps) << where;
                    ASSERT_EQ(s->sigmas(), e.sigmas) << where;
                    ASSERT_EQ(s->init_noise_sigma(), e.init_noise_sigma) << where;
                }
            }
        }
    }
}

// DDIMScheduler.step (scheduling_ddim.py) goes from t to prev_timestep = t - N // n (alphas_cumprod[0]
// below 0, set_alpha_to_one being false for SD), whatever the spacing; with the true noise as model
// output and eta = 0 the sample then lands exactly on the forward process at that alpha.
TEST(TimestepFormula, DdimStepsToTimestepMinusTheFlooredRatio) {
    const nlohmann::json input = test::loaded_model_scheduler_config("sd15-mini");
    const Shape shape = {1, 1, 2, 2};
    test::TestNoise rng(5);
    const Tensor x0 = rng.randn(shape);
    const Tensor eps = rng.randn(shape);
    for (const char* spacing : kSpacings) {
        auto s = make_scheduler("ddim", scheduler_config_for("ddim", input, spacing));
        const std::vector<float> ac = schedule::alphas_cumprod(s->config());
        for (int n = 1; n <= kMaxSteps; ++n) {
            s->set_timesteps(n);
            const auto& ts = s->timesteps();
            for (size_t i = 0; i < ts.size(); ++i) {
                const int prev = static_cast<int>(ts[i]) - 1000 / n;
                const double a = prev >= 0 ? ac[static_cast<size_t>(prev)] : ac[0];
                const Tensor x = s->add_noise(x0, eps, static_cast<int>(i));
                const Tensor next = s->step(eps, static_cast<int>(i), x, rng);
                for (int64_t k = 0; k < next.numel(); ++k)
                    ASSERT_NEAR(next[k], std::sqrt(a) * x0[k] + std::sqrt(1 - a) * eps[k], 2e-5)
                        << spacing << " " << n << " steps, step " << i;
            }
        }
    }
}

// img2img (StableDiffusionImg2ImgPipeline.get_timesteps): init_timestep = min(int(n * strength), n),
// t_start = max(n - init_timestep, 0), the loop runs timesteps[t_start * order:] and the noise is
// added at the first of them; nothing left there is an error. Every sampler, both spacings of the minis'
// configs, 1..25 steps.
TEST(TimestepFormula, Img2ImgStartsAtDiffusersFirstTimestepForEverySampler) {
    const nlohmann::json input = test::loaded_model_scheduler_config("sd15-mini");
    for (const char* sampler : kSamplers) {
        for (const char* spacing : {"leading", "linspace"}) {
            auto s = make_scheduler(sampler, scheduler_config_for(sampler, input, spacing));
            for (int n = 1; n <= 25; ++n) {
                for (double strength : {0.35, 0.6, 0.75, 1.0}) {
                    const int init_timestep = std::min(static_cast<int>(n * strength), n);
                    const int t_start = std::max(n - init_timestep, 0);
                    const std::string where = std::string(sampler) + "/" + spacing + "/" + std::to_string(n) +
                                              " steps/strength " + std::to_string(strength);
                    test::RecordingDenoiser rec;
                    test::TestNoise rng;
                    const Tensor init = Tensor::filled({1, 4, 2, 2}, 0.25f);
                    // diffusers' loop runs timesteps[t_start * order:]; when int(n * strength) is 0 that is empty
                    // (diffusers fails) but for PNDM, whose PLMS timesteps have n + 1 entries.
                    s->set_timesteps(n);
                    if (static_cast<size_t>(t_start * s->order()) >= s->timesteps().size()) {
                        EXPECT_THROW(run_img2img(*s, n, strength, init, rng,
                                                 [&](const Tensor& x, float t) { return rec(x, t); }),
                                     Error)
                            << where;
                        continue;
                    }
                    run_img2img(*s, n, strength, init, rng, [&](const Tensor& x, float t) { return rec(x, t); });
                    const auto& ts = s->timesteps();
                    const size_t begin = static_cast<size_t>(t_start * s->order());
                    ASSERT_EQ(rec.seen, std::vector<float>(ts.begin() + static_cast<std::ptrdiff_t>(begin), ts.end()))
                        << where;
                    EXPECT_EQ(s->begin_index(), static_cast<int>(begin)) << where;
                }
            }
        }
    }
}

}  // namespace
}  // namespace kiln
