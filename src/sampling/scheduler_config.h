// The scheduler settings of a model, resolved for one sampler the way diffusers'
// `<SchedulerClass>.from_config(model_scheduler_config)` resolves them.
#pragma once
#include <nlohmann/json.hpp>

#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

// Every key of diffusers' scheduler_config.json that one of kiln's schedulers reads. Which keys a
// given scheduler class has, and their defaults, differ per class (see scheduler_config.cpp); the
// fields of keys the class lacks keep the values below and are never read by that class.
struct SchedulerConfig {
    std::string sampler;     // kiln sampler name this config was resolved for, e.g. "dpmpp_2m_karras"
    std::string class_name;  // diffusers class, e.g. "DPMSolverMultistepScheduler"

    int num_train_timesteps = 1000;
    double beta_start = 0.0001;
    double beta_end = 0.02;
    std::string beta_schedule = "linear";  // "linear" | "scaled_linear" | "squaredcos_cap_v2" | "exp"
    std::optional<std::vector<double>> trained_betas;
    std::string prediction_type = "epsilon";  // "epsilon" | "v_prediction" | "sample"
    std::string timestep_spacing = "linspace";  // "leading" | "linspace" | "trailing"
    int steps_offset = 0;
    bool rescale_betas_zero_snr = false;

    bool set_alpha_to_one = false;
    bool clip_sample = false;
    double clip_sample_range = 1.0;
    bool thresholding = false;
    double dynamic_thresholding_ratio = 0.995;
    double sample_max_value = 1.0;
    bool skip_prk_steps = false;

    std::string interpolation_type = "linear";
    std::string timestep_type = "discrete";
    bool use_karras_sigmas = false;
    bool use_exponential_sigmas = false;
    bool use_beta_sigmas = false;
    bool use_lu_lambdas = false;
    bool use_flow_sigmas = false;
    std::optional<double> sigma_min;
    std::optional<double> sigma_max;
    std::string final_sigmas_type = "zero";  // "zero" | "sigma_min"

    int solver_order = 2;
    std::string algorithm_type = "dpmsolver++";
    std::string solver_type = "midpoint";
    bool lower_order_final = true;
    bool euler_at_final = false;
    double flow_shift = 1.0;
    double lambda_min_clipped = -std::numeric_limits<double>::infinity();
    std::optional<std::string> variance_type;
    bool use_dynamic_shifting = false;
    std::string time_shift_type = "exponential";
    bool predict_x0 = true;
    std::vector<int> disable_corrector;
    bool has_solver_p = false;
    std::optional<double> shift_terminal;

    int original_inference_steps = 50;
    double timestep_scaling = 10.0;

    // The class's full config as diffusers would report it (only the class's own keys, no
    // "_class_name" and friends); -infinity is stored as a JSON number.
    nlohmann::json values;
    // The class's keys that took the class default (diffusers' "_use_default_values").
    std::vector<std::string> defaulted_keys;
};

// The kiln sampler names scheduler_config_for accepts: ddim, pndm, euler, euler_a, heun, lms,
// dpmpp_2m, dpmpp_2m_karras, unipc, lcm, plus euler_karras, heun_karras, lms_karras, unipc_karras
// (the same class with use_karras_sigmas).
const std::vector<std::string>& kiln_sampler_names();

// Builds the config exactly as `<Class>.from_config(model_scheduler_config)`: keys the json holds are
// used when the target class has them, except keys the json itself lists in "_use_default_values"
// (diffusers' record that they were only the source class's defaults); every other key takes the
// target class's own default. `timestep_spacing_override` ("", "leading", "linspace", "trailing")
// is applied on top, like a keyword argument to from_config. Unknown sampler or a malformed value
// throws kiln::Error.
SchedulerConfig scheduler_config_for(const std::string& sampler, const nlohmann::json& model_scheduler_config,
                                     const std::string& timestep_spacing_override = "");

// Parses a scheduler_config.json text as Python's json module does: besides plain JSON it accepts
// the bare NaN, Infinity and -Infinity that diffusers writes (e.g. "lambda_min_clipped": -Infinity);
// they become the strings "NaN", "Infinity", "-Infinity", which scheduler_config_for understands.
nlohmann::json parse_scheduler_config_text(const std::string& text, const std::string& source_name);

}  // namespace kiln
