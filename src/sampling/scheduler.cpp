#include "sampling/scheduler.h"

#include <map>

#include "kiln/error.h"
#include "sampling/schedulers.h"

namespace kiln {

const std::vector<float>& Scheduler::sigmas() const {
    static const std::vector<float> none;
    return none;
}

void Scheduler::require_step_index(int step_index, const char* what) const {
    require(num_inference_steps_ > 0, ErrorKind::InvalidArgument,
            std::string(what) + ": set_timesteps must be called first");
    require(step_index >= 0 && step_index < static_cast<int>(timesteps().size()), ErrorKind::InvalidArgument,
            std::string(what) + ": step index " + std::to_string(step_index) + " is outside the " +
                std::to_string(timesteps().size()) + " timesteps");
}

void reject_option(bool enabled, const SchedulerConfig& config, const std::string& option) {
    require(!enabled, ErrorKind::Unsupported,
            config.class_name + " with " + option + " is not supported by kiln (sampler \"" + config.sampler + "\")");
}

std::unique_ptr<Scheduler> make_scheduler(const std::string& sampler, const SchedulerConfig& config) {
    using Factory = std::unique_ptr<Scheduler> (*)(const SchedulerConfig&);
    static const std::map<std::string, Factory> factories = {
        {"DDIMScheduler", make_ddim_scheduler},
        {"PNDMScheduler", make_pndm_scheduler},
        {"EulerDiscreteScheduler", make_euler_scheduler},
        {"EulerAncestralDiscreteScheduler", make_euler_ancestral_scheduler},
        {"HeunDiscreteScheduler", make_heun_scheduler},
        {"LMSDiscreteScheduler", make_lms_scheduler},
        {"DPMSolverMultistepScheduler", make_dpm_multistep_scheduler},
        {"UniPCMultistepScheduler", make_unipc_scheduler},
        {"LCMScheduler", make_lcm_scheduler},
    };
    require(sampler == config.sampler, ErrorKind::InvalidArgument,
            "make_scheduler(\"" + sampler + "\") was given a config resolved for sampler \"" + config.sampler +
                "\"; call scheduler_config_for with the same sampler");
    const auto it = factories.find(config.class_name);
    require(it != factories.end(), ErrorKind::InvalidArgument,
            "no scheduler class \"" + config.class_name + "\" for sampler \"" + sampler + "\"");
    return it->second(config);
}

}  // namespace kiln
