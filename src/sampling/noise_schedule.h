// The noise-schedule arithmetic shared by the schedulers, each function reproducing the exact
// numpy (float64) or torch (float32) computation diffusers performs, including its rounding.
#pragma once
#include <cstdint>
#include <vector>

#include "sampling/scheduler_config.h"

namespace kiln::schedule {

// torch.linspace(start, end, steps, dtype=torch.float32) on the CPU, bit for bit (see the .cpp).
std::vector<float> torch_linspace_f32(double start, double end, int64_t steps);

// `self.betas` of a diffusers scheduler (float32): trained_betas, "linear", "scaled_linear",
// "squaredcos_cap_v2" or "exp" (HeunDiscreteScheduler only; pass allow_exp).
std::vector<float> betas(const SchedulerConfig& config, bool allow_exp = false);

// torch.cumprod(1 - betas) as torch computes it on the CPU (float32 values, double accumulator),
// after rescale_betas_zero_snr when the config asks for it. `pin_last_for_zero_snr` sets the last
// value to 2**-24 as Euler, Euler-ancestral, DPM-Solver and UniPC do when rescaling.
std::vector<float> alphas_cumprod(const SchedulerConfig& config, bool allow_exp = false,
                                  bool pin_last_for_zero_snr = false);

// ((1 - alphas_cumprod) / alphas_cumprod) ** 0.5 in float32, indexed by training timestep.
std::vector<float> sigmas_from_alphas_cumprod(const std::vector<float>& alphas_cumprod);

// numpy.log of a float32 array (float32 results).
std::vector<float> log_f32(const std::vector<float>& xs);

// numpy.linspace(start, stop, num, endpoint) in float64.
std::vector<double> np_linspace(double start, double stop, int64_t num, bool endpoint = true);

// numpy.arange(start, stop, step) in float64 (numpy's length rule and fill arithmetic).
std::vector<double> np_arange(double start, double stop, double step);

// numpy.round / numpy.rint: round half to even.
double np_round(double x);

// numpy.interp(x, arange(len(fp)), fp) in float64.
std::vector<double> np_interp_on_index(const std::vector<double>& x, const std::vector<float>& fp);

// Karras et al. (2022) schedule with rho = 7 between sigma_max and sigma_min, float64.
// The timesteps of diffusers' multistep solvers (DPM-Solver++, UniPC) for n steps over the first
// `last` training timesteps, by the config's timestep_spacing (linspace, leading or trailing).
std::vector<double> multistep_timesteps(const SchedulerConfig& config, int64_t last, int n);

std::vector<double> karras_sigmas(double sigma_min, double sigma_max, int64_t num_inference_steps);

// exp(linspace(log(sigma_max), log(sigma_min), n)), float64.
std::vector<double> exponential_sigmas(double sigma_min, double sigma_max, int64_t num_inference_steps);

// diffusers' _sigma_to_t: the fractional training timestep of `sigma`, interpolating log sigmas.
double sigma_to_t(double sigma, const std::vector<float>& log_sigmas);

// Checks a step count against the model's training schedule; throws kiln::Error naming the problem.
void require_valid_steps(int num_inference_steps, const SchedulerConfig& config);

// float32 of a float64 vector, as numpy's .astype(np.float32).
std::vector<float> to_f32(const std::vector<double>& xs);

}  // namespace kiln::schedule
