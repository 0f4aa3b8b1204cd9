// Timesteps and sigmas of every sampler against diffusers (pipeline.json: 6 steps; img2img.json:
// 8 steps at strength 0.6), for the three model configs.
#include <gtest/gtest.h>

#include "sampling/sampling_loop.h"
#include "sampling/scheduler.h"
#include "sampling_fixtures.h"

namespace kiln {
namespace {

struct Case {
    std::string key;
    std::string sampler;
    std::string spacing;
};
const std::vector<Case> kCases = {
    {"ddim", "ddim", ""},         {"pndm", "pndm", ""},   {"euler", "euler", ""},
    {"euler_a", "euler_a", ""},   {"heun", "heun", ""},   {"lms", "lms", ""},
    {"dpmpp_2m", "dpmpp_2m", ""}, {"dpmpp_2m_karras", "dpmpp_2m_karras", ""},
    {"unipc", "unipc", ""},       {"lcm", "lcm", ""},     {"euler_trailing", "euler", "trailing"},
};

std::vector<float> as_floats(const nlohmann::json& list) {
    std::vector<float> out;
    for (const auto& v : list) out.push_back(v.get<float>());
    return out;
}

// kiln repeats diffusers' float64/float32 arithmetic operation by operation (torch's linspace with
// its FMA, the double-accumulated cumprod, numpy's interp and linspace), so the float32 values are
// expected to be identical, not merely close.
TEST(ScheduleFixtures, Txt2ImgTimestepsAndSigmasMatchDiffusers) {
    for (const char* model : test::kModels) {
        const nlohmann::json input = test::loaded_model_scheduler_config(model);
        const nlohmann::json pipeline = test::load_json(std::string(model) + "/pipeline.json");
        const int steps = pipeline.at("_call").at("steps");
        for (const auto& c : kCases) {
            const std::string where = std::string(model) + "/" + c.key;
            auto s = make_scheduler(c.sampler, scheduler_config_for(c.sampler, input, c.spacing));
            s->set_timesteps(steps);
            EXPECT_EQ(s->timesteps(), as_floats(pipeline.at(c.key).at("timesteps"))) << where;
            const auto& sig = pipeline.at(c.key).at("sigmas");
            if (sig.is_null()) {
                EXPECT_TRUE(s->sigmas().empty()) << where;
            } else {
                EXPECT_EQ(s->sigmas(), as_floats(sig)) << where;
            }
        }
    }
}

TEST(ScheduleFixtures, InitNoiseSigmaFollowsSpacing) {
    // Euler-type schedulers start from sigma_max for linspace/trailing spacing and from
    // sqrt(sigma_max^2 + 1) for leading (SDXL); the VP schedulers from 1.
    const nlohmann::json sd15 = test::loaded_model_scheduler_config("sd15-mini");
    const nlohmann::json sdxl = test::loaded_model_scheduler_config("sdxl-mini");
    auto euler15 = make_scheduler("euler", scheduler_config_for("euler", sd15));
    euler15->set_timesteps(6);
    EXPECT_EQ(euler15->init_noise_sigma(), euler15->sigmas().front());
    auto eulerxl = make_scheduler("euler", scheduler_config_for("euler", sdxl));
    eulerxl->set_timesteps(6);
    const float smax = eulerxl->sigmas().front();
    EXPECT_EQ(eulerxl->init_noise_sigma(), std::sqrt(smax * smax + 1.0f));
    for (const char* name : {"ddim", "pndm", "dpmpp_2m", "unipc", "lcm"}) {
        auto s = make_scheduler(name, scheduler_config_for(name, sd15));
        s->set_timesteps(6);
        EXPECT_EQ(s->init_noise_sigma(), 1.0f) << name;
    }
}

TEST(ScheduleFixtures, Img2ImgTimestepsMatchDiffusers) {
    for (const char* model : test::kModels) {
        // img2img loaded the pipeline from the diffusers folder: the saved config, explicit spacing.
        const nlohmann::json disk = test::load_json(std::string(model) + "/diffusers/scheduler/scheduler_config.json");
        const nlohmann::json img = test::load_json(std::string(model) + "/img2img.json");
        const int steps = img.at("_call").at("steps");
        const double strength = img.at("_call").at("strength");
        for (const auto& [key, entry] : img.items()) {
            if (key[0] == '_') continue;
            const std::string where = std::string(model) + "/img2img/" + key;
            auto s = make_scheduler(key, scheduler_config_for(key, disk));
            EXPECT_EQ(s->config().class_name, entry.at("class")) << where;
            s->set_timesteps(steps);
            const std::vector<float> full = as_floats(entry.at("timesteps_full"));
            EXPECT_EQ(s->timesteps(), full) << where;

            // The loop must call the model with diffusers' timesteps[t_start * order:], where
            // t_start = steps - int(steps * strength) = 8 - 4.
            test::RecordingDenoiser rec;
            test::TestNoise rng;
            const Tensor init = Tensor::filled({1, 4, 2, 2}, 0.5f);
            run_img2img(*s, steps, strength, init, rng, [&](const Tensor& x, float t) { return rec(x, t); });
            const int begin = 4 * s->order();
            EXPECT_EQ(rec.seen, std::vector<float>(full.begin() + begin, full.end())) << where;
            EXPECT_GE(rng.calls, 1) << where << ": the add_noise draw";
        }
    }
}

TEST(ScheduleFixtures, Txt2ImgLoopCallsTheModelAtEveryTimestepAndReportsProgress) {
    const nlohmann::json input = test::loaded_model_scheduler_config("sd15-mini");
    for (const char* name : {"heun", "pndm", "euler_a", "lcm", "dpmpp_2m_karras"}) {
        auto s = make_scheduler(name, scheduler_config_for(name, input));
        test::RecordingDenoiser rec;
        test::TestNoise rng;
        std::vector<std::pair<int, int>> progress;
        run_txt2img(*s, 6, Tensor::filled({1, 4, 2, 2}, 1.0f), [&](const Tensor& x, float t) { return rec(x, t); }, rng,
                    [&](int i, int n) { progress.emplace_back(i, n); });
        EXPECT_EQ(rec.seen, s->timesteps()) << name;
        ASSERT_EQ(progress.size(), s->timesteps().size()) << name;
        EXPECT_EQ(progress.back().first, progress.back().second) << name;
        // Stochastic samplers draw fresh noise per step as diffusers does: euler_a on every step,
        // LCM on every step but the last.
        if (std::string(name) == "euler_a") EXPECT_EQ(rng.calls, 6);
        else if (std::string(name) == "lcm") EXPECT_EQ(rng.calls, 5);
        else EXPECT_EQ(rng.calls, 0) << name;
    }
}

}  // namespace
}  // namespace kiln
