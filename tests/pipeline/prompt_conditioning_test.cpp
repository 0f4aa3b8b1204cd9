// Conditioning of AUTOMATIC1111-syntax prompts against the webui's own computation (a1111_conditioning.tar.xz,
// by make_conditioning.py in tools/prompt-syntax/scripts.tar.xz), and plain prompts bit for bit as before.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>

#include "common/fixtures.h"
#include "kiln/error.h"
#include "pipeline/conditioning.h"
#include "pipeline/prompt_encoding.h"

using namespace kiln;
using kiln::test::data_path;

namespace {

const StableDiffusionModel& fixture_model(const std::string& name) {
    static std::map<std::string, std::unique_ptr<StableDiffusionModel>> models;
    auto& m = models[name];
    if (!m) m = std::make_unique<StableDiffusionModel>(load_model(data_path(name + "/diffusers")));
    return *m;
}

// The digest's pseudo-random coefficients and positions, as the script computes them.
double coefficient(int64_t i, int k) {
    const uint32_t h = static_cast<uint32_t>(static_cast<uint64_t>(i) * 2654435761ull + (k + 1) * 40503ull);
    return static_cast<double>(h >> 8) / static_cast<double>(1 << 23) - 1.0;
}
int64_t position(int64_t j, int64_t n) { return static_cast<int64_t>((static_cast<uint64_t>(j) * 2654435761ull + 12345) % n); }

// Tolerance: the encoders differ from torch's only in the order of float32 sums, <= 2e-6 of the largest
// magnitude (derived in tests/models/clip_text_test.cpp on these encoders). The emphasis adds its two means'
// error: torch's pairwise float32 sum of n terms is off by <= ~log2(n) * 2^-24 of the sum of magnitudes, so a
// mean by log2(n) * 2^-24 * cond, cond = mean |z| / |mean z| (the script records it per prompt).
double element_bound(double max_abs, double cond, double n) {
    const double u = std::ldexp(1.0, -24);
    return max_abs * (2e-6 + 2.0 * std::ceil(std::log2(n)) * u * cond + 4.0 * u);
}

void expect_digest(const Tensor& t, const nlohmann::json& d, double bound, const std::string& what) {
    std::vector<int64_t> shape = d.at("shape").get<std::vector<int64_t>>();
    ASSERT_EQ(t.dim(-1), shape.back()) << what;
    int64_t expected_numel = 1;
    for (int64_t s : shape) expected_numel *= s;
    ASSERT_EQ(t.numel(), expected_numel) << what << ": " << shape_str(t.shape());
    const int64_t n = t.numel();
    const float* v = t.data();
    double sum = 0, sum_sq = 0, sum_abs = 0;
    std::vector<double> proj(d.at("projections").size(), 0.0), coef_abs(proj.size(), 0.0);
    for (int64_t i = 0; i < n; ++i) {
        sum += v[i];
        sum_sq += static_cast<double>(v[i]) * v[i];
        sum_abs += std::fabs(v[i]);
        for (size_t k = 0; k < proj.size(); ++k) {
            const double c = coefficient(i, static_cast<int>(k));
            proj[k] += c * v[i];
            coef_abs[k] += std::fabs(c);
        }
    }
    // Each value is within `bound`; sums of them within the sum of the bounds their coefficients scale.
    for (size_t j = 0; j < d.at("samples").size(); ++j) {
        const int64_t p = position(static_cast<int64_t>(j), n);
        EXPECT_NEAR(v[p], d.at("samples")[j].get<double>(), bound) << what << " sample " << j << " at " << p;
    }
    EXPECT_NEAR(sum, d.at("sum").get<double>(), bound * static_cast<double>(n)) << what;
    EXPECT_NEAR(sum_sq, d.at("sum_sq").get<double>(), bound * (2.0 * sum_abs + bound * static_cast<double>(n))) << what;
    for (size_t k = 0; k < proj.size(); ++k)
        EXPECT_NEAR(proj[k], d.at("projections")[k].get<double>(), bound * coef_abs[k]) << what << " projection " << k;
}

const nlohmann::json& oracle() {
    static const nlohmann::json j = kiln::test::read_json(KILN_PROMPT_CONDITIONING_DATA);
    return j;
}

TEST(PromptConditioning, MatchesTheWebuiOnItsOwnEncoders) {
    const nlohmann::json& cases = oracle().at("cases");
    ASSERT_GE(cases.size(), 30u);
    for (const nlohmann::json& c : cases) {
        const std::string prompt = c.at("prompt");
        const std::string what = c.at("model").get<std::string>() + " \"" + prompt.substr(0, 60) + "\"";
        PromptEncodingOptions options;
        options.clip_skip = c.at("clip_skip");
        options.schedule_steps = c.at("steps");
        const StableDiffusionModel& model = fixture_model(c.at("model"));
        const std::vector<ScheduledEncoding> got = encode_prompt_schedules(model, {prompt}, options).at(0);
        const nlohmann::json& want = c.at("schedule");
        ASSERT_EQ(got.size(), want.size()) << what;
        for (size_t s = 0; s < got.size(); ++s) {
            EXPECT_EQ(got[s].end_step, want[s].at("end_step").get<int>()) << what;
            const nlohmann::json& ctx = want[s].at("context");
            // The mean is over every text of the prompt's schedule and one chunk's 77 tokens.
            const double n = static_cast<double>(want.size()) * 77.0 * static_cast<double>(got[s].context.dim(-1));
            expect_digest(got[s].context, ctx,
                          element_bound(ctx.at("max_abs"), c.at("emphasis_condition"), n), what + " context");
            if (want[s].contains("pooled")) {
                const nlohmann::json& pooled = want[s].at("pooled");
                expect_digest(got[s].pooled, pooled, element_bound(pooled.at("max_abs"), 0.0, 1.0), what + " pooled");
            }
        }
    }
}

// Plain prompts of <= 75 tokens (without "!", which OpenCLIP's diffusers tokenizer takes for its pad token)
// are conditioned exactly as diffusers' reading conditions them.
TEST(PromptConditioning, PlainPromptsAreConditionedBitForBitAsBefore) {
    const std::vector<std::pair<std::string, std::optional<std::string>>> prompts = {
        {"a photo of an astronaut riding a horse on mars", std::string("blurry, low quality")},
        {"", std::string("")},
        {"a cat", std::nullopt},
        {"red, green, blue, yellow, and a very long list of colours that still fits in one chunk of tokens",
         std::string("ugly")},
    };
    for (const char* name : {"sd15-mini", "sd2-mini", "sdxl-mini"}) {
        const StableDiffusionModel& model = fixture_model(name);
        for (const auto& [prompt, negative] : prompts)
            for (bool guidance : {true, false})
                for (int clip_skip : {1, 2}) {
                    PromptEncodingOptions a1111;
                    a1111.clip_skip = clip_skip;
                    const ConditioningSchedule s =
                        encode_conditioning_schedule(model, prompt, negative, guidance, a1111, 64, 96);
                    ASSERT_EQ(s.parts.size(), 1u);
                    ASSERT_FALSE(s.parts[0].negative.has_value());
                    const Conditioning& got = s.parts[0].joint;
                    const Conditioning want =
                        encode_conditioning(model, prompt, negative, guidance, clip_skip, 64, 96);
                    for (const auto& [g, w] : {std::pair(&got.context, &want.context),
                                               std::pair(&got.text_embeds, &want.text_embeds),
                                               std::pair(&got.time_ids, &want.time_ids)}) {
                        ASSERT_EQ(g->shape(), w->shape()) << name << " " << prompt;
                        if (w->empty()) continue;
                        EXPECT_EQ(std::memcmp(g->data(), w->data(), sizeof(float) * w->numel()), 0)
                            << name << " \"" << prompt << "\" guidance " << guidance << " clip skip " << clip_skip;
                    }
                }
    }
}

// Which schedule entry each model call gets: the webui's reconstruct_cond_batch over its call counter.
TEST(PromptConditioning, EachCallTakesTheEntryTheWebuiTakes) {
    const StableDiffusionModel& model = fixture_model("sd15-mini");
    PromptEncodingOptions options;
    options.schedule_steps = 10;
    const ConditioningSchedule s =
        encode_conditioning_schedule(model, "a [cat:dog:3]", std::string("[x|y]"), true, options, 64, 64);
    ASSERT_EQ(s.positive_ends.at(0), (std::vector<int>{3, 10}));
    ASSERT_EQ(s.negative_ends, (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
    const auto enc = encode_prompt_schedules(model, {"[x|y]", "a [cat:dog:3]"}, options);
    for (int call = 0; call <= 12; ++call) {
        // The first entry whose end step is >= call, else the first.
        const size_t neg = call <= 10 ? static_cast<size_t>(std::max(call - 1, 0)) : 0;
        const size_t pos = call <= 3 ? 0 : call <= 10 ? 1 : 0;
        const Conditioning& c = s.parts.at(s.part_for_call(call)).joint;
        ASSERT_EQ(c.context.dim(0), 2);
        const int64_t per = c.context.numel() / 2;
        EXPECT_EQ(std::memcmp(c.context.data(), enc[0][neg].context.data(), sizeof(float) * per), 0) << call;
        EXPECT_EQ(std::memcmp(c.context.data() + per, enc[1][pos].context.data(), sizeof(float) * per), 0) << call;
    }
}

// A negative and a positive prompt of different chunk counts are not padded (the webui's default): the
// UNet runs on each apart.
TEST(PromptConditioning, DifferentLengthsRunApart) {
    const StableDiffusionModel& model = fixture_model("sdxl-mini");
    PromptEncodingOptions options;
    const ConditioningSchedule s =
        encode_conditioning_schedule(model, "a cat BREAK a dog", std::string("blurry"), true, options, 64, 64);
    ASSERT_EQ(s.parts.size(), 1u);
    ASSERT_TRUE(s.parts[0].negative.has_value());
    EXPECT_EQ(s.parts[0].joint.context.shape(), (Shape{1, 154, 80}));
    EXPECT_EQ(s.parts[0].negative->context.shape(), (Shape{1, 77, 80}));
    EXPECT_EQ(s.parts[0].negative->text_embeds.dim(0), 1);
    EXPECT_EQ(s.parts[0].negative->time_ids.dim(0), 1);
    // An absent negative on SDXL is zeros of the positive's shape, so one batch.
    const ConditioningSchedule z = encode_conditioning_schedule(model, "a cat BREAK a dog", std::nullopt, true, options, 64, 64);
    EXPECT_FALSE(z.parts[0].negative.has_value());
    EXPECT_EQ(z.parts[0].joint.context.shape(), (Shape{2, 154, 80}));
}

void expect_invalid(const std::function<void()>& f, const std::string& part) {
    try {
        f();
        ADD_FAILURE() << "no error; expected one mentioning " << part;
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
}

TEST(PromptConditioning, HostileWeightsAreClearErrors) {
    const StableDiffusionModel& model = fixture_model("sd15-mini");
    PromptEncodingOptions options;
    // 400 digits: Python's float() gives inf, and the webui would sample on NaN.
    expect_invalid([&] { encode_prompt_schedules(model, {"(a:" + std::string(400, '9') + ")"}, options); },
                   "not a finite number");
    // 1e50 is a double but no float32 (torch's multipliers): infinite, then NaN after the rescaling.
    expect_invalid([&] { encode_prompt_schedules(model, {"(a:1" + std::string(50, '0') + ")"}, options); },
                   "infinite or NaN");
    expect_invalid([&] { encode_prompt_schedules(model, {"(a:1.2.3)"}, options); }, "1.2.3");
    // Words, not weights, for the webui's pattern (digits and dots only): encoded without trouble.
    for (const char* words : {"(a:nan)", "(a:inf)", "(a:1e3)", "((((((((((a))))))))))", "[[[[[[[[[[a"})
        EXPECT_NO_THROW(encode_prompt_schedules(model, {words}, options)) << words;
}

TEST(PromptConditioning, EmphasisRestoresTheMean) {
    // z = [[1, 2], [3, 4]] with weights 2 and 1: multiplied [[2, 4], [3, 4]] (mean 3.25), times 2.5 / 3.25.
    Tensor z(Shape{1, 2, 2}, {1, 2, 3, 4});
    apply_original_emphasis(z, {2.0, 1.0});
    const float ratio = 2.5f / 3.25f;
    EXPECT_EQ(z[0], 2.0f * ratio);
    EXPECT_EQ(z[1], 4.0f * ratio);
    EXPECT_EQ(z[2], 3.0f * ratio);
    EXPECT_EQ(z[3], 4.0f * ratio);
    double mean = 0;
    for (int i = 0; i < 4; ++i) mean += z[i] / 4.0;
    EXPECT_NEAR(mean, 2.5, 1e-6);
}

}  // namespace

// The webui's other emphasis modes ("No norm", "Ignore", "None") against its own code with that setting
// (make_emphasis_conditioning.py), and whether the PNG parameters record the mode ("Emphasis").
TEST(PromptConditioning, EmphasisModesMatchTheWebui) {
    const nlohmann::json j = kiln::test::read_json(std::string(KILN_PROMPT_AND_DATA) + "/a1111_emphasis.json");
    const std::map<std::string, EmphasisMode> modes = {{"Original", EmphasisMode::Original},
                                                       {"No norm", EmphasisMode::NoNorm},
                                                       {"Ignore", EmphasisMode::Ignore},
                                                       {"None", EmphasisMode::None}};
    ASSERT_GE(j.at("cases").size(), 12u);
    for (const nlohmann::json& c : j.at("cases")) {
        const std::string prompt = c.at("prompt");
        const std::string what = c.at("model").get<std::string>() + " " + c.at("emphasis").get<std::string>() + " \"" + prompt + "\"";
        PromptEncodingOptions options;
        options.schedule_steps = c.at("steps");
        options.emphasis = modes.at(c.at("emphasis"));
        bool brackets = false;
        options.texts_with_brackets = &brackets;
        const std::vector<ScheduledEncoding> got = encode_prompt_schedules(fixture_model(c.at("model")), {prompt}, options).at(0);
        const nlohmann::json& want = c.at("schedule");
        ASSERT_EQ(got.size(), want.size()) << what;
        // "Original" is here for the parameters only (its conditioning is MatchesTheWebuiOnItsOwnEncoders').
        for (size_t s = 0; s < got.size() && options.emphasis != EmphasisMode::Original; ++s) {
            const nlohmann::json& ctx = want[s].at("context");
            // No mean is taken outside "Original": the encoder's error and the multiply's one rounding (4u).
            expect_digest(got[s].context, ctx, element_bound(ctx.at("max_abs"), 0.0, 1.0), what + " context");
            if (want[s].contains("pooled"))
                expect_digest(got[s].pooled, want[s].at("pooled"),
                              element_bound(want[s].at("pooled").at("max_abs"), 0.0, 1.0), what + " pooled");
        }
        const bool recorded = c.at("infotext").is_string();
        EXPECT_EQ(recorded, brackets && options.emphasis != EmphasisMode::Original) << what;
        if (recorded) EXPECT_EQ(c.at("infotext").get<std::string>(), emphasis_mode_label(options.emphasis)) << what;
    }
}
