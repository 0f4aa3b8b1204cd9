// The timesteps and sigmas of the k-diffusion style schedulers (Euler, Euler ancestral, Heun, LMS),
// which share diffusers' set_timesteps code up to the Karras/exponential conversion.
#pragma once
#include <vector>

#include "sampling/scheduler_config.h"

namespace kiln::schedule {

// Training timesteps for `n` steps by the config's timestep_spacing, as float32 (descending).
std::vector<float> discrete_timesteps_f32(const SchedulerConfig& config, int n);

// The maximum sigma and the noise the initial latent is scaled by: the max sigma itself for
// "linspace" and "trailing" spacing, sqrt(max^2 + 1) for "leading" (diffusers' init_noise_sigma).
float init_noise_sigma_for(const SchedulerConfig& config, const std::vector<float>& sigmas);

// sample / sqrt(sigma^2 + 1) denominator, in float32.
float input_scale_denominator(float sigma);

}  // namespace kiln::schedule
