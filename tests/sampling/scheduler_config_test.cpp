// scheduler_config_for against diffusers: for every model and sampler of the fixtures, the resolved
// config must equal the full config diffusers' from_config produced (pipeline.json), key by key,
// including which keys fell back to the class defaults.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "kiln/error.h"
#include "sampling/scheduler_config.h"
#include "sampling_fixtures.h"

namespace kiln {
namespace {

// The fixtures' sampler keys and how kiln asks for them.
struct FixtureSampler {
    std::string key;
    std::string sampler;
    std::string spacing_override;
};
const std::vector<FixtureSampler> kFixtureSamplers = {
    {"ddim", "ddim", ""},         {"pndm", "pndm", ""},   {"euler", "euler", ""},
    {"euler_a", "euler_a", ""},   {"heun", "heun", ""},   {"lms", "lms", ""},
    {"dpmpp_2m", "dpmpp_2m", ""}, {"dpmpp_2m_karras", "dpmpp_2m_karras", ""},
    {"unipc", "unipc", ""},       {"lcm", "lcm", ""},     {"euler_trailing", "euler", "trailing"},
};

double as_number(const nlohmann::json& v) {
    if (v.is_string()) {
        if (v == "-Infinity") return -std::numeric_limits<double>::infinity();
        if (v == "Infinity") return std::numeric_limits<double>::infinity();
    }
    return v.get<double>();
}

void expect_same_value(const std::string& where, const nlohmann::json& ours, const nlohmann::json& theirs) {
    const bool numeric = (ours.is_number() || ours.is_string()) && (theirs.is_number() || theirs.is_string()) &&
                         (ours.is_number() || theirs.is_number());
    if (numeric) {
        EXPECT_EQ(as_number(ours), as_number(theirs)) << where;
    } else {
        EXPECT_EQ(ours, theirs) << where;
    }
}

TEST(SchedulerConfig, ReproducesDiffusersFromConfigForEveryModelAndSampler) {
    for (const char* model : test::kModels) {
        const nlohmann::json input = test::loaded_model_scheduler_config(model);
        const nlohmann::json pipeline = test::load_json(std::string(model) + "/pipeline.json");
        for (const auto& fs : kFixtureSamplers) {
            const std::string where = std::string(model) + "/" + fs.key;
            const nlohmann::json& expected = pipeline.at(fs.key).at("config");
            const SchedulerConfig c = scheduler_config_for(fs.sampler, input, fs.spacing_override);
            EXPECT_EQ(c.class_name, pipeline.at(fs.key).at("class")) << where;
            // Every key of the class, with diffusers' value.
            for (const auto& [key, value] : c.values.items()) {
                ASSERT_TRUE(expected.contains(key)) << where << ": diffusers has no key " << key;
                expect_same_value(where + "." + key, value, expected.at(key));
            }
            // The rest of diffusers' config: bookkeeping, or keys the model config carried that this
            // class does not take (diffusers keeps them as hidden entries).
            for (const auto& [key, value] : expected.items()) {
                if (key[0] == '_' || c.values.contains(key)) continue;
                EXPECT_TRUE(input.contains(key)) << where << ": class key " << key << " missing from kiln's config";
            }
            // Which keys took the class defaults.
            std::set<std::string> ours(c.defaulted_keys.begin(), c.defaulted_keys.end());
            std::set<std::string> theirs;
            for (const auto& k : expected.at("_use_default_values")) theirs.insert(k.get<std::string>());
            EXPECT_EQ(ours, theirs) << where;
        }
    }
}

TEST(SchedulerConfig, TypedFieldsFollowTheResolvedValues) {
    const nlohmann::json input = test::loaded_model_scheduler_config("sd2-mini");
    const SchedulerConfig euler = scheduler_config_for("euler", input);
    EXPECT_EQ(euler.prediction_type, "v_prediction");  // from the model
    EXPECT_EQ(euler.timestep_spacing, "linspace");      // Euler's default: PNDM's "leading" was only a default
    EXPECT_EQ(euler.steps_offset, 1);
    EXPECT_EQ(euler.beta_schedule, "scaled_linear");
    const SchedulerConfig karras = scheduler_config_for("dpmpp_2m_karras", input);
    EXPECT_TRUE(karras.use_karras_sigmas);
    EXPECT_EQ(karras.lambda_min_clipped, -std::numeric_limits<double>::infinity());
    EXPECT_EQ(scheduler_config_for("euler", input, "trailing").timestep_spacing, "trailing");
}

TEST(SchedulerConfig, OnDiskConfigKeepsItsExplicitSpacing) {
    // The saved scheduler_config.json lists timestep_spacing explicitly (no _use_default_values), so
    // every class takes "leading" from it: what the img2img fixtures were made with.
    const nlohmann::json disk = test::load_json("sd15-mini/diffusers/scheduler/scheduler_config.json");
    EXPECT_EQ(scheduler_config_for("euler", disk).timestep_spacing, "leading");
    EXPECT_EQ(scheduler_config_for("dpmpp_2m_karras", disk).timestep_spacing, "leading");
}

TEST(SchedulerConfig, BadInputIsAnError) {
    const nlohmann::json input = test::loaded_model_scheduler_config("sd15-mini");
    EXPECT_THROW(scheduler_config_for("euler_b", input), Error);
    try {
        scheduler_config_for("nope", input);
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("dpmpp_2m_karras"), std::string::npos) << "lists valid names";
    }
    EXPECT_THROW(scheduler_config_for("euler", input, "sideways"), Error);
    nlohmann::json bad = input;
    bad["steps_offset"] = "one";
    EXPECT_THROW(scheduler_config_for("ddim", bad), Error);
    bad = input;
    bad["prediction_type"] = "flow";
    EXPECT_THROW(scheduler_config_for("ddim", bad), Error);
    bad = input;
    bad.erase("_use_default_values");  // else trained_betas is dropped as PNDM's default
    bad["trained_betas"] = nlohmann::json::array({0.1, 0.2});
    EXPECT_THROW(scheduler_config_for("ddim", bad), Error);  // 2 betas for 1000 timesteps
    EXPECT_THROW(scheduler_config_for("ddim", nlohmann::json::array()), Error);
    EXPECT_THROW(parse_scheduler_config_text("{\"a\": ", "broken.json"), Error);
}

TEST(SchedulerConfig, ParsesPythonNonFiniteLiterals) {
    const nlohmann::json j =
        parse_scheduler_config_text(R"({"lambda_min_clipped": -Infinity, "name": "NaN -Infinity"})", "x.json");
    EXPECT_EQ(j["lambda_min_clipped"], "-Infinity");
    EXPECT_EQ(j["name"], "NaN -Infinity");  // untouched inside strings
    const SchedulerConfig c = scheduler_config_for("dpmpp_2m", j);
    EXPECT_EQ(c.lambda_min_clipped, -std::numeric_limits<double>::infinity());
}

}  // namespace
}  // namespace kiln
