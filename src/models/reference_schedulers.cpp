#include "models/reference_schedulers.h"

#include "models/model.h"

namespace kiln {

nlohmann::json reference_scheduler_config(Architecture arch) {
    // SD 1.5's and SD 2.1's PNDM configs are the same but for prediction_type, which the caller sets
    // for SD 2.x. Neither sets timestep_spacing, so other samplers take their own default.
    static const char* kPndm = R"({"_class_name": "PNDMScheduler", "beta_end": 0.012, "beta_schedule": "scaled_linear",
      "beta_start": 0.00085, "clip_sample": false, "num_train_timesteps": 1000, "prediction_type": "epsilon",
      "set_alpha_to_one": false, "skip_prk_steps": true, "steps_offset": 1, "trained_betas": null})";
    static const char* kSdxlEuler = R"({"_class_name": "EulerDiscreteScheduler", "beta_end": 0.012,
      "beta_schedule": "scaled_linear", "beta_start": 0.00085, "clip_sample": false, "interpolation_type": "linear",
      "num_train_timesteps": 1000, "prediction_type": "epsilon", "sample_max_value": 1.0, "set_alpha_to_one": false,
      "skip_prk_steps": true, "steps_offset": 1, "timestep_spacing": "leading", "trained_betas": null,
      "use_karras_sigmas": false})";
    return nlohmann::json::parse(arch == Architecture::SDXL ? kSdxlEuler : kPndm);
}

}  // namespace kiln
