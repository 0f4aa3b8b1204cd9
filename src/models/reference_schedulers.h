// The scheduler configurations diffusers uses for each architecture's reference checkpoints
// (SD 1.5, SD 2.1, SDXL base 1.0): what a single file, which carries none, is sampled with.
#pragma once
#include <nlohmann/json.hpp>

namespace kiln {

enum class Architecture;

nlohmann::json reference_scheduler_config(Architecture arch);

}  // namespace kiln
