#include "sampling/sigma_schedule.h"

#include <algorithm>

#include "sampling/noise_schedule.h"
#include "sampling/float_math.h"  // last: turns off FMA contraction below

namespace kiln::schedule {

std::vector<float> discrete_timesteps_f32(const SchedulerConfig& c, int n) {
    const int64_t N = c.num_train_timesteps;
    std::vector<float> ts;
    if (c.timestep_spacing == "linspace") {
        // np.linspace(..., dtype=np.float32): computed in float64, then rounded to float32.
        for (double t : np_linspace(0, static_cast<double>(N - 1), n)) ts.push_back(static_cast<float>(t));
        std::reverse(ts.begin(), ts.end());
    } else if (c.timestep_spacing == "leading") {
        const int64_t ratio = N / n;
        for (int64_t i = n - 1; i >= 0; --i)
            ts.push_back(static_cast<float>(i * ratio) + static_cast<float>(c.steps_offset));
    } else {
        for (double t : np_arange(static_cast<double>(N), 0, -static_cast<double>(N) / n))
            ts.push_back(static_cast<float>(np_round(t)) - 1.0f);
    }
    return ts;
}

float init_noise_sigma_for(const SchedulerConfig& c, const std::vector<float>& sigmas) {
    const float max_sigma = sigmas.empty() ? 1.0f : *std::max_element(sigmas.begin(), sigmas.end());
    if (c.timestep_spacing == "linspace" || c.timestep_spacing == "trailing") return max_sigma;
    return sqrt_f32(max_sigma * max_sigma + 1.0f);
}

float input_scale_denominator(float sigma) { return sqrt_f32(sigma * sigma + 1.0f); }

}  // namespace kiln::schedule
