// Bad input gives kiln::Error with a clear message, never a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/error.h"
#include "sampling/sampling_loop.h"
#include "sampling/scheduler.h"
#include "sampling_fixtures.h"

namespace kiln {
namespace {

Tensor zeros_like(const Tensor& x, float) { return Tensor(x.shape()); }

ErrorKind kind_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.kind();
    }
    ADD_FAILURE() << "no kiln::Error thrown";
    return ErrorKind::IO;
}

TEST(BadInput, StepCounts) {
    const nlohmann::json cfg = test::loaded_model_scheduler_config("sd15-mini");
    for (const auto& name : kiln_sampler_names()) {
        auto s = make_scheduler(name, scheduler_config_for(name, cfg));
        EXPECT_EQ(kind_of([&] { s->set_timesteps(0); }), ErrorKind::InvalidArgument) << name;
        EXPECT_EQ(kind_of([&] { s->set_timesteps(-3); }), ErrorKind::InvalidArgument) << name;
        EXPECT_EQ(kind_of([&] { s->set_timesteps(1001); }), ErrorKind::InvalidArgument) << name;
    }
    // LCM can take at most original_inference_steps (50).
    auto lcm = make_scheduler("lcm", scheduler_config_for("lcm", cfg));
    EXPECT_EQ(kind_of([&] { lcm->set_timesteps(51); }), ErrorKind::InvalidArgument);
    // PNDM's Runge-Kutta warm-up needs 4 steps.
    nlohmann::json prk = cfg;
    prk["skip_prk_steps"] = false;
    auto pndm = make_scheduler("pndm", scheduler_config_for("pndm", prk));
    EXPECT_EQ(kind_of([&] { pndm->set_timesteps(3); }), ErrorKind::InvalidArgument);
}

TEST(BadInput, Strength) {
    for (double strength : {0.0, -0.5, 1.5, std::numeric_limits<double>::quiet_NaN()})
        EXPECT_EQ(kind_of([&] { img2img_start(10, strength, 1); }), ErrorKind::InvalidArgument) << strength;
    EXPECT_EQ(img2img_start(5, 0.1, 1).begin_index, 5);  // int(5 * 0.1) = 0: every step skipped
    EXPECT_EQ(img2img_start(8, 0.6, 2).begin_index, 8);
    EXPECT_EQ(img2img_start(10, 1.0, 1).begin_index, 0);
    // Python's int(10 * 0.7) is 7 (10 * 0.7 rounds to 7.0 in double), so 3 steps are skipped.
    EXPECT_EQ(img2img_start(10, 0.7, 1).t_start, 3);

    const nlohmann::json cfg = test::loaded_model_scheduler_config("sd15-mini");
    test::TestNoise rng;
    SamplingRequest req;
    req.sampler = "Euler";
    req.steps = 10;
    req.img2img = true;
    req.strength = 1.2;
    EXPECT_EQ(kind_of([&] { sample_latents(req, cfg, Tensor::filled({1, 4, 2, 2}, 0), rng, zeros_like); }),
              ErrorKind::InvalidArgument);
    // int(5 * 0.1) = 0 leaves Euler no timestep (diffusers fails on it too); PNDM's PLMS timesteps have one
    // entry more than the steps, and diffusers runs that last one (the conformance sweep found it: call 1-43).
    req.steps = 5;
    req.strength = 0.1;
    EXPECT_EQ(kind_of([&] { sample_latents(req, cfg, Tensor::filled({1, 4, 2, 2}, 0), rng, zeros_like); }),
              ErrorKind::InvalidArgument);
    req.sampler = "pndm";
    int calls = 0;
    sample_latents(req, cfg, Tensor::filled({1, 4, 2, 2}, 0), rng, [&](const Tensor& x, float t) {
        ++calls;
        EXPECT_EQ(t, 1.0f) << "the last PLMS timestep of SD's config (steps_offset 1)";
        return zeros_like(x, t);
    });
    EXPECT_EQ(calls, 1);
}

TEST(BadInput, UnknownSamplerAndSpacing) {
    const nlohmann::json cfg = test::loaded_model_scheduler_config("sd15-mini");
    test::TestNoise rng;
    SamplingRequest req;
    req.sampler = "Euler b";
    EXPECT_EQ(kind_of([&] { sample_latents(req, cfg, Tensor::filled({1, 4, 2, 2}, 0), rng, zeros_like); }),
              ErrorKind::InvalidArgument);
    req.sampler = "euler";
    req.timestep_spacing = "quadratic";
    EXPECT_EQ(kind_of([&] { sample_latents(req, cfg, Tensor::filled({1, 4, 2, 2}, 0), rng, zeros_like); }),
              ErrorKind::InvalidArgument);
    EXPECT_EQ(kind_of([&] { make_scheduler("euler", scheduler_config_for("ddim", cfg)); }), ErrorKind::InvalidArgument);
}

TEST(BadInput, UnsupportedOptionsAreReported) {
    nlohmann::json cfg = test::loaded_model_scheduler_config("sd15-mini");
    cfg["thresholding"] = true;
    EXPECT_EQ(kind_of([&] { make_scheduler("ddim", scheduler_config_for("ddim", cfg)); }), ErrorKind::Unsupported);
    cfg = test::loaded_model_scheduler_config("sd15-mini");
    cfg["algorithm_type"] = "sde-dpmsolver++";
    EXPECT_EQ(kind_of([&] { make_scheduler("dpmpp_2m", scheduler_config_for("dpmpp_2m", cfg)); }),
              ErrorKind::Unsupported);
    cfg = test::loaded_model_scheduler_config("sd15-mini");
    cfg["beta_schedule"] = "exp";  // only Heun has it
    EXPECT_EQ(kind_of([&] { make_scheduler("euler", scheduler_config_for("euler", cfg)); }), ErrorKind::Unsupported);
    EXPECT_NO_THROW(make_scheduler("heun", scheduler_config_for("heun", cfg)));
}

TEST(BadInput, StepMisuse) {
    const nlohmann::json cfg = test::loaded_model_scheduler_config("sd15-mini");
    test::TestNoise rng;
    auto s = make_scheduler("euler", scheduler_config_for("euler", cfg));
    const Tensor x = Tensor::filled({1, 4, 2, 2}, 1.0f);
    EXPECT_EQ(kind_of([&] { s->step(x, 0, x, rng); }), ErrorKind::InvalidArgument);  // before set_timesteps
    s->set_timesteps(6);
    EXPECT_EQ(kind_of([&] { s->step(x, 6, x, rng); }), ErrorKind::InvalidArgument);
    EXPECT_EQ(kind_of([&] { s->step(x, -1, x, rng); }), ErrorKind::InvalidArgument);
    EXPECT_EQ(kind_of([&] { s->step(Tensor::filled({1, 4, 2, 3}, 0), 0, x, rng); }), ErrorKind::InvalidArgument);
    EXPECT_EQ(kind_of([&] { s->add_noise(x, Tensor::filled({1, 4, 2, 3}, 0), 0); }), ErrorKind::InvalidArgument);
    // A denoiser that returns the wrong shape, and empty latents.
    auto wrong = [](const Tensor&, float) { return Tensor::filled({1, 1}, 0); };
    EXPECT_EQ(kind_of([&] { run_txt2img(*s, 6, x, wrong, rng); }), ErrorKind::InvalidArgument);
    EXPECT_EQ(kind_of([&] { run_txt2img(*s, 6, Tensor(), zeros_like, rng); }), ErrorKind::InvalidArgument);
    EXPECT_EQ(kind_of([&] { run_txt2img(*s, 6, x, Denoiser(), rng); }), ErrorKind::InvalidArgument);
}

}  // namespace
}  // namespace kiln
