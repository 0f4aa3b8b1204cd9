// Factories of the individual scheduler classes (one source file each); make_scheduler picks one.
#pragma once
#include <memory>

#include "sampling/scheduler.h"

namespace kiln {

std::unique_ptr<Scheduler> make_ddim_scheduler(const SchedulerConfig& config);
std::unique_ptr<Scheduler> make_pndm_scheduler(const SchedulerConfig& config);
std::unique_ptr<Scheduler> make_euler_scheduler(const SchedulerConfig& config);
std::unique_ptr<Scheduler> make_euler_ancestral_scheduler(const SchedulerConfig& config);
std::unique_ptr<Scheduler> make_heun_scheduler(const SchedulerConfig& config);
std::unique_ptr<Scheduler> make_lms_scheduler(const SchedulerConfig& config);
std::unique_ptr<Scheduler> make_dpm_multistep_scheduler(const SchedulerConfig& config);
std::unique_ptr<Scheduler> make_unipc_scheduler(const SchedulerConfig& config);
std::unique_ptr<Scheduler> make_lcm_scheduler(const SchedulerConfig& config);

// Throws kiln::Error(Unsupported) naming the option when `enabled`.
void reject_option(bool enabled, const SchedulerConfig& config, const std::string& option);

}  // namespace kiln
