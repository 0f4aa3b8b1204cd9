#include "sampling/noise_schedule.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kiln/error.h"
#include "sampling/float_math.h"  // last: turns off FMA contraction below

namespace kiln::schedule {

std::vector<float> torch_linspace_f32(double start_d, double end_d, int64_t steps) {
    std::vector<float> out(static_cast<size_t>(std::max<int64_t>(steps, 0)));
    if (steps <= 0) return out;
    const float start = static_cast<float>(start_d);
    const float end = static_cast<float>(end_d);
    if (steps == 1) {
        out[0] = start;
        return out;
    }
    // torch's CPU kernel walks from `start` for the first half and back from `end` for the second,
    // and its build fuses `start + step * i` into one FMA. Checked bit for bit: with these rules the
    // fixtures' float32 sigmas at 19 different timesteps come out identical (without the FMA or with
    // a float accumulator in the cumprod, some differ by an ulp).
    const float step = (end - start) / static_cast<float>(steps - 1);
    const int64_t halfway = steps / 2;
    for (int64_t i = 0; i < steps; ++i) {
        out[static_cast<size_t>(i)] = i < halfway ? std::fma(step, static_cast<float>(i), start)
                                                  : std::fma(-step, static_cast<float>(steps - i - 1), end);
    }
    return out;
}

namespace {

// diffusers' betas_for_alpha_bar: a Python float loop, then torch.tensor(..., dtype=float32).
std::vector<float> betas_for_alpha_bar(int n, bool exp_transform) {
    auto alpha_bar = [&](double t) {
        if (exp_transform) return std::exp(t * -12.0);
        const double c = std::cos((t + 0.008) / 1.008 * M_PI / 2);
        return c * c;
    };
    std::vector<float> betas(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
        const double t1 = static_cast<double>(i) / n;
        const double t2 = static_cast<double>(i + 1) / n;
        betas[static_cast<size_t>(i)] = static_cast<float>(std::min(1 - alpha_bar(t2) / alpha_bar(t1), 0.999));
    }
    return betas;
}

// torch.cumprod on the CPU accumulates float32 in double and rounds each prefix product.
std::vector<float> cumprod_f32(const std::vector<float>& xs) {
    std::vector<float> out(xs.size());
    double acc = 1.0;
    for (size_t i = 0; i < xs.size(); ++i) {
        acc *= static_cast<double>(xs[i]);
        out[i] = static_cast<float>(acc);
    }
    return out;
}

std::vector<float> one_minus(const std::vector<float>& xs) {
    std::vector<float> out(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) out[i] = 1.0f - xs[i];
    return out;
}

// diffusers' rescale_zero_terminal_snr (Lin et al. 2023, Algorithm 1), in torch float32.
std::vector<float> rescale_zero_terminal_snr(const std::vector<float>& betas) {
    const std::vector<float> ac = cumprod_f32(one_minus(betas));
    std::vector<float> sq(ac.size());
    for (size_t i = 0; i < ac.size(); ++i) sq[i] = sqrt_f32(ac[i]);
    const float first = sq.front();
    const float last = sq.back();
    for (float& v : sq) v = v - last;
    const float scale = first / (first - last);
    for (float& v : sq) v = v * scale;
    std::vector<float> alphas_bar(sq.size());
    for (size_t i = 0; i < sq.size(); ++i) alphas_bar[i] = sq[i] * sq[i];
    std::vector<float> out(betas.size());
    out[0] = 1.0f - alphas_bar[0];
    for (size_t i = 1; i < alphas_bar.size(); ++i) out[i] = 1.0f - alphas_bar[i] / alphas_bar[i - 1];
    return out;
}

}  // namespace

std::vector<float> betas(const SchedulerConfig& c, bool allow_exp) {
    const int n = c.num_train_timesteps;
    std::vector<float> b;
    if (c.trained_betas) {
        for (double v : *c.trained_betas) b.push_back(static_cast<float>(v));
    } else if (c.beta_schedule == "linear") {
        b = torch_linspace_f32(c.beta_start, c.beta_end, n);
    } else if (c.beta_schedule == "scaled_linear") {
        b = torch_linspace_f32(std::sqrt(c.beta_start), std::sqrt(c.beta_end), n);
        for (float& v : b) v = v * v;
    } else if (c.beta_schedule == "squaredcos_cap_v2") {
        b = betas_for_alpha_bar(n, false);
    } else if (c.beta_schedule == "exp" && allow_exp) {
        b = betas_for_alpha_bar(n, true);
    } else {
        fail(ErrorKind::Unsupported, "beta_schedule \"" + c.beta_schedule + "\" is not implemented for " + c.class_name);
    }
    if (c.rescale_betas_zero_snr) b = rescale_zero_terminal_snr(b);
    return b;
}

std::vector<float> alphas_cumprod(const SchedulerConfig& c, bool allow_exp, bool pin_last_for_zero_snr) {
    std::vector<float> ac = cumprod_f32(one_minus(betas(c, allow_exp)));
    // Close to 0 without being 0, so that the first sigma is finite (diffusers' choice: 2**-24).
    if (c.rescale_betas_zero_snr && pin_last_for_zero_snr) ac.back() = std::ldexp(1.0f, -24);
    return ac;
}

std::vector<float> sigmas_from_alphas_cumprod(const std::vector<float>& ac) {
    std::vector<float> s(ac.size());
    for (size_t i = 0; i < ac.size(); ++i) s[i] = sqrt_f32((1.0f - ac[i]) / ac[i]);
    return s;
}

std::vector<float> log_f32(const std::vector<float>& xs) {
    std::vector<float> out(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) out[i] = static_cast<float>(std::log(static_cast<double>(xs[i])));
    return out;
}

std::vector<double> np_linspace(double start, double stop, int64_t num, bool endpoint) {
    std::vector<double> y(static_cast<size_t>(std::max<int64_t>(num, 0)));
    if (num <= 0) return y;
    const int64_t div = endpoint ? num - 1 : num;
    const double delta = stop - start;
    if (div > 0) {
        const double step = delta / static_cast<double>(div);
        for (int64_t i = 0; i < num; ++i) {
            const double v = step == 0 ? static_cast<double>(i) / div * delta : static_cast<double>(i) * step;
            y[static_cast<size_t>(i)] = v + start;
        }
    } else {
        for (int64_t i = 0; i < num; ++i) y[static_cast<size_t>(i)] = static_cast<double>(i) * delta + start;
    }
    if (endpoint && num > 1) y.back() = stop;
    return y;
}

std::vector<double> np_arange(double start, double stop, double step) {
    const double len_f = std::ceil((stop - start) / step);
    std::vector<double> y;
    if (!(len_f > 0)) return y;
    const auto len = static_cast<size_t>(len_f);
    y.resize(len);
    y[0] = start;
    if (len > 1) {
        // numpy fills from the first two values: delta = (start + step) - start.
        y[1] = start + step;
        const double delta = y[1] - start;
        for (size_t i = 2; i < len; ++i) y[i] = start + static_cast<double>(i) * delta;
    }
    return y;
}

double np_round(double x) { return std::nearbyint(x); }

std::vector<double> np_interp_on_index(const std::vector<double>& x, const std::vector<float>& fp) {
    std::vector<double> out(x.size());
    const auto n = static_cast<int64_t>(fp.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const double v = x[i];
        if (v <= 0) {
            out[i] = fp.front();
        } else if (v >= static_cast<double>(n - 1)) {
            out[i] = fp.back();
        } else {
            const auto j = static_cast<int64_t>(std::floor(v));
            const double y0 = fp[static_cast<size_t>(j)];
            const double y1 = fp[static_cast<size_t>(j + 1)];
            if (v == static_cast<double>(j)) {
                out[i] = y0;
            } else {
                const double slope = (y1 - y0) / 1.0;  // xp[j+1] - xp[j] == 1
                out[i] = slope * (v - static_cast<double>(j)) + y0;
            }
        }
    }
    return out;
}

std::vector<double> multistep_timesteps(const SchedulerConfig& config, int64_t last, int n) {
    const int64_t N = config.num_train_timesteps;
    std::vector<double> ts;
    if (config.timestep_spacing == "linspace") {
        ts = np_linspace(0, static_cast<double>(last - 1), n + 1);
        for (double& t : ts) t = np_round(t);
        std::reverse(ts.begin(), ts.end());
        ts.pop_back();
    } else if (config.timestep_spacing == "leading") {
        const int64_t ratio = last / (n + 1);
        for (int64_t i = n; i >= 1; --i) ts.push_back(static_cast<double>(i * ratio + config.steps_offset));
    } else {
        ts = np_arange(static_cast<double>(last), 0, -static_cast<double>(N) / n);
        for (double& t : ts) t = np_round(t) - 1;
    }
    return ts;
}

std::vector<double> karras_sigmas(double sigma_min, double sigma_max, int64_t n) {
    const double rho = 7.0;
    const std::vector<double> ramp = np_linspace(0, 1, n);
    const double min_inv_rho = std::pow(sigma_min, 1 / rho);
    const double max_inv_rho = std::pow(sigma_max, 1 / rho);
    std::vector<double> out(ramp.size());
    for (size_t i = 0; i < ramp.size(); ++i)
        out[i] = std::pow(max_inv_rho + ramp[i] * (min_inv_rho - max_inv_rho), rho);
    return out;
}

std::vector<double> exponential_sigmas(double sigma_min, double sigma_max, int64_t n) {
    std::vector<double> out = np_linspace(std::log(sigma_max), std::log(sigma_min), n);
    for (double& v : out) v = std::exp(v);
    return out;
}

double sigma_to_t(double sigma, const std::vector<float>& log_sigmas) {
    const double log_sigma = std::log(std::max(sigma, 1e-10));
    // The last index whose log sigma is <= log_sigma (0 if none), clipped to leave a right neighbour.
    const auto n = static_cast<int64_t>(log_sigmas.size());
    int64_t low = 0;
    int64_t count = 0;
    int64_t best = 0;
    for (int64_t i = 0; i < n; ++i) {
        if (log_sigma - static_cast<double>(log_sigmas[static_cast<size_t>(i)]) >= 0) {
            ++count;
            if (count > best) {
                best = count;
                low = i;
            }
        }
    }
    low = std::min(low, n - 2);
    const int64_t high = low + 1;
    const double lo = log_sigmas[static_cast<size_t>(low)];
    const double hi = log_sigmas[static_cast<size_t>(high)];
    double w = (lo - log_sigma) / (lo - hi);
    w = std::clamp(w, 0.0, 1.0);
    return (1 - w) * static_cast<double>(low) + w * static_cast<double>(high);
}

void require_valid_steps(int num_inference_steps, const SchedulerConfig& c) {
    require(num_inference_steps >= 1, ErrorKind::InvalidArgument,
            "number of sampling steps must be at least 1, got " + std::to_string(num_inference_steps));
    require(num_inference_steps <= c.num_train_timesteps, ErrorKind::InvalidArgument,
            "number of sampling steps (" + std::to_string(num_inference_steps) +
                ") cannot exceed the model's num_train_timesteps (" + std::to_string(c.num_train_timesteps) + ")");
}

std::vector<float> to_f32(const std::vector<double>& xs) {
    std::vector<float> out(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) out[i] = static_cast<float>(xs[i]);
    return out;
}

}  // namespace kiln::schedule
