#include "sampling/scheduler_config.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "kiln/error.h"

namespace kiln {
namespace {

struct SamplerClass {
    const char* class_name;
    bool karras;  // the sampler name asks for use_karras_sigmas on top of the model's config
};

// Each diffusers class's __init__ keys and defaults (diffusers 0.40; the fixtures' pipeline.json
// lists, per class, which keys took these defaults, and the tests check every one of them).
const std::map<std::string, nlohmann::json>& class_defaults() {
    static const std::map<std::string, nlohmann::json> table = {
        {"DDIMScheduler", nlohmann::json::parse(R"({
            "num_train_timesteps": 1000, "beta_start": 0.0001, "beta_end": 0.02, "beta_schedule": "linear",
            "trained_betas": null, "clip_sample": true, "set_alpha_to_one": true, "steps_offset": 0,
            "prediction_type": "epsilon", "thresholding": false, "dynamic_thresholding_ratio": 0.995,
            "clip_sample_range": 1.0, "sample_max_value": 1.0, "timestep_spacing": "leading",
            "rescale_betas_zero_snr": false})")},
        {"PNDMScheduler", nlohmann::json::parse(R"({
            "num_train_timesteps": 1000, "beta_start": 0.0001, "beta_end": 0.02, "beta_schedule": "linear",
            "trained_betas": null, "skip_prk_steps": false, "set_alpha_to_one": false,
            "prediction_type": "epsilon", "timestep_spacing": "leading", "steps_offset": 0})")},
        {"EulerDiscreteScheduler", nlohmann::json::parse(R"({
            "num_train_timesteps": 1000, "beta_start": 0.0001, "beta_end": 0.02, "beta_schedule": "linear",
            "trained_betas": null, "prediction_type": "epsilon", "interpolation_type": "linear",
            "use_karras_sigmas": false, "use_exponential_sigmas": false, "use_beta_sigmas": false,
            "sigma_min": null, "sigma_max": null, "timestep_spacing": "linspace", "timestep_type": "discrete",
            "steps_offset": 0, "rescale_betas_zero_snr": false, "final_sigmas_type": "zero"})")},
        {"EulerAncestralDiscreteScheduler", nlohmann::json::parse(R"({
            "num_train_timesteps": 1000, "beta_start": 0.0001, "beta_end": 0.02, "beta_schedule": "linear",
            "trained_betas": null, "prediction_type": "epsilon", "timestep_spacing": "linspace",
            "steps_offset": 0, "rescale_betas_zero_snr": false})")},
        {"HeunDiscreteScheduler", nlohmann::json::parse(R"({
            "num_train_timesteps": 1000, "beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "linear",
            "trained_betas": null, "prediction_type": "epsilon", "use_karras_sigmas": false,
            "use_exponential_sigmas": false, "use_beta_sigmas": false, "clip_sample": false,
            "clip_sample_range": 1.0, "timestep_spacing": "linspace", "steps_offset": 0})")},
        {"LMSDiscreteScheduler", nlohmann::json::parse(R"({
            "num_train_timesteps": 1000, "beta_start": 0.0001, "beta_end": 0.02, "beta_schedule": "linear",
            "trained_betas": null, "use_karras_sigmas": false, "use_exponential_sigmas": false,
            "use_beta_sigmas": false, "prediction_type": "epsilon", "timestep_spacing": "linspace",
            "steps_offset": 0})")},
        {"DPMSolverMultistepScheduler", nlohmann::json::parse(R"({
            "num_train_timesteps": 1000, "beta_start": 0.0001, "beta_end": 0.02, "beta_schedule": "linear",
            "trained_betas": null, "solver_order": 2, "prediction_type": "epsilon", "thresholding": false,
            "dynamic_thresholding_ratio": 0.995, "sample_max_value": 1.0, "algorithm_type": "dpmsolver++",
            "solver_type": "midpoint", "lower_order_final": true, "euler_at_final": false,
            "use_karras_sigmas": false, "use_exponential_sigmas": false, "use_beta_sigmas": false,
            "use_lu_lambdas": false, "use_flow_sigmas": false, "flow_shift": 1.0, "final_sigmas_type": "zero",
            "lambda_min_clipped": "-Infinity", "variance_type": null, "timestep_spacing": "linspace",
            "steps_offset": 0, "rescale_betas_zero_snr": false, "use_dynamic_shifting": false,
            "time_shift_type": "exponential"})")},
        {"UniPCMultistepScheduler", nlohmann::json::parse(R"({
            "num_train_timesteps": 1000, "beta_start": 0.0001, "beta_end": 0.02, "beta_schedule": "linear",
            "trained_betas": null, "solver_order": 2, "prediction_type": "epsilon", "thresholding": false,
            "dynamic_thresholding_ratio": 0.995, "sample_max_value": 1.0, "predict_x0": true,
            "solver_type": "bh2", "lower_order_final": true, "disable_corrector": [], "solver_p": null,
            "use_karras_sigmas": false, "use_exponential_sigmas": false, "use_beta_sigmas": false,
            "use_flow_sigmas": false, "flow_shift": 1.0, "timestep_spacing": "linspace", "steps_offset": 0,
            "final_sigmas_type": "zero", "rescale_betas_zero_snr": false, "use_dynamic_shifting": false,
            "time_shift_type": "exponential", "sigma_min": null, "sigma_max": null, "shift_terminal": null})")},
        {"LCMScheduler", nlohmann::json::parse(R"({
            "num_train_timesteps": 1000, "beta_start": 0.00085, "beta_end": 0.012,
            "beta_schedule": "scaled_linear", "trained_betas": null, "original_inference_steps": 50,
            "clip_sample": false, "clip_sample_range": 1.0, "set_alpha_to_one": true, "steps_offset": 0,
            "prediction_type": "epsilon", "thresholding": false, "dynamic_thresholding_ratio": 0.995,
            "sample_max_value": 1.0, "timestep_spacing": "leading", "timestep_scaling": 10.0,
            "rescale_betas_zero_snr": false})")},
    };
    return table;
}

const std::map<std::string, SamplerClass>& sampler_classes() {
    static const std::map<std::string, SamplerClass> table = {
        {"ddim", {"DDIMScheduler", false}},
        {"pndm", {"PNDMScheduler", false}},
        {"euler", {"EulerDiscreteScheduler", false}},
        {"euler_karras", {"EulerDiscreteScheduler", true}},
        {"euler_a", {"EulerAncestralDiscreteScheduler", false}},
        {"heun", {"HeunDiscreteScheduler", false}},
        {"heun_karras", {"HeunDiscreteScheduler", true}},
        {"lms", {"LMSDiscreteScheduler", false}},
        {"lms_karras", {"LMSDiscreteScheduler", true}},
        {"dpmpp_2m", {"DPMSolverMultistepScheduler", false}},
        {"dpmpp_2m_karras", {"DPMSolverMultistepScheduler", true}},
        {"unipc", {"UniPCMultistepScheduler", false}},
        {"unipc_karras", {"UniPCMultistepScheduler", true}},
        {"lcm", {"LCMScheduler", false}},
    };
    return table;
}

std::string joined(const std::vector<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
    return s;
}

[[noreturn]] void bad_value(const std::string& key, const nlohmann::json& value, const std::string& expected) {
    fail(ErrorKind::InvalidModel,
         "scheduler config: \"" + key + "\" is " + value.dump() + ", expected " + expected);
}

// Reads the non-finite numbers diffusers writes, whether the json kept them as strings or numbers.
double number_or_nonfinite(const std::string& key, const nlohmann::json& v) {
    if (v.is_number()) return v.get<double>();
    if (v.is_string()) {
        const auto& s = v.get_ref<const std::string&>();
        if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
        if (s == "Infinity") return std::numeric_limits<double>::infinity();
        if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    }
    bad_value(key, v, "a number");
}

class Reader {
public:
    explicit Reader(const nlohmann::json& values) : values_(values) {}
    bool has(const char* key) const { return values_.contains(key); }
    const nlohmann::json& at(const char* key) const { return values_.at(key); }

    void get(const char* key, int& out) const {
        if (!has(key)) return;
        const auto& v = at(key);
        // Python configs sometimes carry integral floats (1000.0); diffusers accepts them.
        if (v.is_number_integer()) out = v.get<int>();
        else if (v.is_number_float() && v.get<double>() == std::floor(v.get<double>())) out = static_cast<int>(v.get<double>());
        else bad_value(key, v, "an integer");
    }
    void get(const char* key, double& out) const {
        if (has(key)) out = number_or_nonfinite(key, at(key));
    }
    void get(const char* key, bool& out) const {
        if (!has(key)) return;
        if (!at(key).is_boolean()) bad_value(key, at(key), "true or false");
        out = at(key).get<bool>();
    }
    void get(const char* key, std::string& out) const {
        if (!has(key)) return;
        if (!at(key).is_string()) bad_value(key, at(key), "a string");
        out = at(key).get<std::string>();
    }
    void get(const char* key, std::optional<double>& out) const {
        if (!has(key) || at(key).is_null()) return;
        out = number_or_nonfinite(key, at(key));
    }
    void get(const char* key, std::optional<std::string>& out) const {
        if (!has(key) || at(key).is_null()) return;
        if (!at(key).is_string()) bad_value(key, at(key), "a string or null");
        out = at(key).get<std::string>();
    }
    void get(const char* key, std::optional<std::vector<double>>& out) const {
        if (!has(key) || at(key).is_null()) return;
        const auto& v = at(key);
        if (!v.is_array()) bad_value(key, v, "a list of numbers or null");
        std::vector<double> xs;
        for (const auto& x : v) {
            if (!x.is_number()) bad_value(key, v, "a list of numbers or null");
            xs.push_back(x.get<double>());
        }
        out = std::move(xs);
    }
    void get(const char* key, std::vector<int>& out) const {
        if (!has(key) || at(key).is_null()) return;
        const auto& v = at(key);
        if (!v.is_array()) bad_value(key, v, "a list of integers");
        out.clear();
        for (const auto& x : v) {
            if (!x.is_number_integer()) bad_value(key, v, "a list of integers");
            out.push_back(x.get<int>());
        }
    }

private:
    const nlohmann::json& values_;
};

void require_one_of(const std::string& key, const std::string& value, const std::vector<std::string>& allowed) {
    for (const auto& a : allowed)
        if (value == a) return;
    fail(ErrorKind::InvalidModel,
         "scheduler config: \"" + key + "\" is \"" + value + "\", expected one of " + joined(allowed));
}

}  // namespace

const std::vector<std::string>& kiln_sampler_names() {
    static const std::vector<std::string> names = {"ddim",         "pndm",     "euler",      "euler_karras",
                                                   "euler_a",      "heun",     "heun_karras", "lms",
                                                   "lms_karras",   "dpmpp_2m", "dpmpp_2m_karras", "unipc",
                                                   "unipc_karras", "lcm"};
    return names;
}

SchedulerConfig scheduler_config_for(const std::string& sampler, const nlohmann::json& model_config,
                                     const std::string& timestep_spacing_override) {
    const auto found = sampler_classes().find(sampler);
    require(found != sampler_classes().end(), ErrorKind::InvalidArgument,
            "unknown sampler \"" + sampler + "\"; valid samplers: " + joined(kiln_sampler_names()));
    require(model_config.is_object() || model_config.is_null(), ErrorKind::InvalidModel,
            "scheduler config must be a JSON object, got " + std::string(model_config.type_name()));
    require(timestep_spacing_override.empty() || timestep_spacing_override == "leading" ||
                timestep_spacing_override == "linspace" || timestep_spacing_override == "trailing",
            ErrorKind::InvalidArgument,
            "timestep spacing \"" + timestep_spacing_override + "\" is not one of leading, linspace, trailing");

    const std::string class_name = found->second.class_name;
    const nlohmann::json& defaults = class_defaults().at(class_name);

    // diffusers drops the keys the source class only held as its own defaults, so that switching
    // classes picks up the new class's defaults (e.g. PNDM's "leading" spacing does not leak into Euler).
    std::vector<std::string> used_defaults;
    if (model_config.is_object() && model_config.contains("_use_default_values")) {
        const auto& list = model_config["_use_default_values"];
        require(list.is_array(), ErrorKind::InvalidModel, "scheduler config: \"_use_default_values\" must be a list");
        for (const auto& k : list)
            if (k.is_string()) used_defaults.push_back(k.get<std::string>());
    }
    auto listed_as_default = [&](const std::string& key) {
        for (const auto& k : used_defaults)
            if (k == key) return true;
        return false;
    };

    nlohmann::json values = nlohmann::json::object();
    std::vector<std::string> defaulted;
    for (const auto& [key, def] : defaults.items()) {
        if (model_config.is_object() && model_config.contains(key) && !listed_as_default(key)) {
            values[key] = model_config[key];
        } else {
            values[key] = def;
            defaulted.push_back(key);
        }
    }
    // Keyword arguments to from_config: they count as passed, not as defaults.
    auto pass = [&](const std::string& key, const nlohmann::json& v) {
        values[key] = v;
        defaulted.erase(std::remove(defaulted.begin(), defaulted.end(), key), defaulted.end());
    };
    if (found->second.karras) pass("use_karras_sigmas", true);
    if (!timestep_spacing_override.empty()) pass("timestep_spacing", timestep_spacing_override);

    SchedulerConfig c;
    c.sampler = sampler;
    c.class_name = class_name;
    const Reader r(values);
    r.get("num_train_timesteps", c.num_train_timesteps);
    r.get("beta_start", c.beta_start);
    r.get("beta_end", c.beta_end);
    r.get("beta_schedule", c.beta_schedule);
    r.get("trained_betas", c.trained_betas);
    r.get("prediction_type", c.prediction_type);
    r.get("timestep_spacing", c.timestep_spacing);
    r.get("steps_offset", c.steps_offset);
    r.get("rescale_betas_zero_snr", c.rescale_betas_zero_snr);
    r.get("set_alpha_to_one", c.set_alpha_to_one);
    r.get("clip_sample", c.clip_sample);
    r.get("clip_sample_range", c.clip_sample_range);
    r.get("thresholding", c.thresholding);
    r.get("dynamic_thresholding_ratio", c.dynamic_thresholding_ratio);
    r.get("sample_max_value", c.sample_max_value);
    r.get("skip_prk_steps", c.skip_prk_steps);
    r.get("interpolation_type", c.interpolation_type);
    r.get("timestep_type", c.timestep_type);
    r.get("use_karras_sigmas", c.use_karras_sigmas);
    r.get("use_exponential_sigmas", c.use_exponential_sigmas);
    r.get("use_beta_sigmas", c.use_beta_sigmas);
    r.get("use_lu_lambdas", c.use_lu_lambdas);
    r.get("use_flow_sigmas", c.use_flow_sigmas);
    r.get("sigma_min", c.sigma_min);
    r.get("sigma_max", c.sigma_max);
    r.get("final_sigmas_type", c.final_sigmas_type);
    r.get("solver_order", c.solver_order);
    r.get("algorithm_type", c.algorithm_type);
    r.get("solver_type", c.solver_type);
    r.get("lower_order_final", c.lower_order_final);
    r.get("euler_at_final", c.euler_at_final);
    r.get("flow_shift", c.flow_shift);
    r.get("lambda_min_clipped", c.lambda_min_clipped);
    r.get("variance_type", c.variance_type);
    r.get("use_dynamic_shifting", c.use_dynamic_shifting);
    r.get("time_shift_type", c.time_shift_type);
    r.get("predict_x0", c.predict_x0);
    r.get("disable_corrector", c.disable_corrector);
    r.get("shift_terminal", c.shift_terminal);
    r.get("original_inference_steps", c.original_inference_steps);
    r.get("timestep_scaling", c.timestep_scaling);
    c.has_solver_p = values.contains("solver_p") && !values["solver_p"].is_null();
    if (values.contains("lambda_min_clipped")) values["lambda_min_clipped"] = c.lambda_min_clipped;

    require(c.num_train_timesteps >= 2, ErrorKind::InvalidModel,
            "scheduler config: \"num_train_timesteps\" is " + std::to_string(c.num_train_timesteps) +
                ", expected at least 2");
    require(c.steps_offset >= 0, ErrorKind::InvalidModel, "scheduler config: \"steps_offset\" must not be negative");
    require_one_of("prediction_type", c.prediction_type, {"epsilon", "v_prediction", "sample"});
    require_one_of("timestep_spacing", c.timestep_spacing, {"leading", "linspace", "trailing"});
    require_one_of("beta_schedule", c.beta_schedule, {"linear", "scaled_linear", "squaredcos_cap_v2", "exp"});
    require_one_of("final_sigmas_type", c.final_sigmas_type, {"zero", "sigma_min"});
    if (c.trained_betas)
        require(static_cast<int>(c.trained_betas->size()) == c.num_train_timesteps, ErrorKind::InvalidModel,
                "scheduler config: \"trained_betas\" holds " + std::to_string(c.trained_betas->size()) +
                    " values but \"num_train_timesteps\" is " + std::to_string(c.num_train_timesteps));
    c.values = std::move(values);
    c.defaulted_keys = std::move(defaulted);
    return c;
}

nlohmann::json parse_scheduler_config_text(const std::string& text, const std::string& source_name) {
    // Quote Python's bare non-finite literals outside strings so a JSON parser takes them.
    std::string out;
    out.reserve(text.size() + 16);
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char ch = text[i];
        if (in_string) {
            out += ch;
            if (ch == '\\' && i + 1 < text.size()) out += text[++i];
            else if (ch == '"') in_string = false;
            continue;
        }
        if (ch == '"') {
            in_string = true;
            out += ch;
            continue;
        }
        bool replaced = false;
        for (const char* word : {"-Infinity", "Infinity", "NaN"}) {
            const std::string w(word);
            if (text.compare(i, w.size(), w) == 0) {
                out += '"' + w + '"';
                i += w.size() - 1;
                replaced = true;
                break;
            }
        }
        if (!replaced) out += ch;
    }
    try {
        return nlohmann::json::parse(out);
    } catch (const nlohmann::json::parse_error& e) {
        fail(ErrorKind::InvalidModel, source_name + ": not valid JSON (" + e.what() + ")");
    }
}

}  // namespace kiln
