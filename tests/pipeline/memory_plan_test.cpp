// The CPU memory plan (pipeline/memory_plan.h): sizes as users write them, the choice of the fastest plan that
// fits a budget, the error that names the smallest budget that would, and a budgeted generation that streams
// the UNet's weights and decodes in bands giving the same image as an unbudgeted one.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/fixtures.h"
#include "kiln/error.h"
#include "pipeline/generate.h"
#include "pipeline/gpu_memory_plan.h"
#include "pipeline/memory_plan.h"

using namespace kiln;

namespace {

constexpr int64_t kMiB = 1 << 20;

const StableDiffusionModel& demo() {
    static const StableDiffusionModel model = [] {
        LoadOptions o;
        o.vae_encoder = false;
        return load_model(KILN_DEMO_MODEL, o);
    }();
    return model;
}

std::string error_of(const std::vector<MemoryPlan>& plans, int64_t budget) {
    try {
        (void)choose_memory_plan(plans, budget);
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory);
        return e.what();
    }
    return "";
}

}  // namespace

TEST(MemoryPlan, ParsesSizesAsUsersWriteThem) {
    EXPECT_EQ(parse_byte_size("512M", "--memory"), 512 * kMiB);
    EXPECT_EQ(parse_byte_size("400MiB", "--memory"), 400 * kMiB);
    EXPECT_EQ(parse_byte_size("3GB", "--memory"), 3 * 1024 * kMiB);
    EXPECT_EQ(parse_byte_size("1.5g", "--memory"), 1536 * kMiB);
    EXPECT_EQ(parse_byte_size("2048K", "--memory"), 2 * kMiB);
    EXPECT_EQ(parse_byte_size("123", "--memory"), 123);
    for (const char* bad : {"", "G", "abc", "0", "-1G", "1X", "nanG", "infG", "1e30G", "0.5"}) {
        try {
            (void)parse_byte_size(bad, "--memory");
            ADD_FAILURE() << "'" << bad << "' was accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << bad;
            EXPECT_NE(std::string(e.what()).find("--memory '" + std::string(bad) + "'"), std::string::npos) << e.what();
        }
    }
}

TEST(MemoryPlan, ABudgetPicksTheFastestPlanThatFits) {
    // At 1024x1024 the decode in bands holds less than the whole one (at small sizes its band and scratch do not).
    const std::vector<MemoryPlan> plans = cpu_memory_plans(demo(), 1024, 1024, 1, VaeTiling::Auto, 100 * kMiB);
    ASSERT_EQ(plans.size(), 4u);
    EXPECT_FALSE(plans[0].stream_unet);
    EXPECT_FALSE(plans[0].vae_tiled);
    EXPECT_TRUE(plans[3].stream_unet);
    EXPECT_TRUE(plans[3].vae_tiled);
    // Streaming holds one block's pages in the denoise stage; banding shrinks the decode's activations.
    EXPECT_LT(plans[2].stages[1].pages, plans[0].stages[1].pages);
    EXPECT_LT(plans[1].stages[2].activations, plans[0].stages[2].activations);
    for (const MemoryPlan& p : plans) EXPECT_EQ(p.stages.size(), 3u);

    EXPECT_FALSE(choose_memory_plan(plans, -1).stream_unet);  // no budget: all resident
    for (const MemoryPlan& p : plans) {
        const MemoryPlan chosen = choose_memory_plan(plans, p.peak());
        EXPECT_LE(chosen.peak(), p.peak());
        // Every plan before the chosen one (a faster one) exceeds the budget.
        for (const MemoryPlan& q : plans) {
            if (q.stream_unet == chosen.stream_unet && q.vae_tiled == chosen.vae_tiled) break;
            EXPECT_GT(q.peak(), p.peak());
        }
    }
}

TEST(MemoryPlan, TooSmallABudgetNamesTheSmallestThatFits) {
    const std::vector<MemoryPlan> plans = cpu_memory_plans(demo(), 512, 512, 1, VaeTiling::Auto, 100 * kMiB);
    int64_t leanest = plans.front().peak();
    for (const MemoryPlan& p : plans) leanest = std::min(leanest, p.peak());
    const std::string message = error_of(plans, leanest - 1);
    const size_t at = message.find("(--memory ");
    ASSERT_NE(at, std::string::npos) << message;
    const int64_t suggested = std::stoll(message.substr(at + 10)) * kMiB;
    EXPECT_GE(suggested, leanest);
    EXPECT_LT(suggested, leanest + kMiB);
    EXPECT_NO_THROW((void)choose_memory_plan(plans, suggested));
    // --vae-tiling off leaves only whole decodes to choose from, and the message says so.
    const std::vector<MemoryPlan> whole = cpu_memory_plans(demo(), 512, 512, 1, VaeTiling::Off, 100 * kMiB);
    ASSERT_EQ(whole.size(), 2u);
    EXPECT_NE(error_of(whole, 1).find("VAE decode whole"), std::string::npos);
}

TEST(MemoryPlan, ABudgetedGenerationGivesTheSameImage) {
    GenerationRequest r;
    r.prompt = "a red circle on a blue background";
    r.width = r.height = 64;  // small enough that the denoise stage, with the UNet's pages, is the peak
    r.steps = 2;
    r.seed = 3;
    const GenerationResult free_run = generate(demo(), r);

    // The leanest plan's budget, with a margin for the resident set moving between this measurement and the
    // generation's own (far less than the UNet's pages, which streaming saves).
    const std::vector<MemoryPlan> plans =
        cpu_memory_plans(demo(), r.width, r.height, 1, VaeTiling::Auto, measure_fixed_bytes(demo()));
    const MemoryPlan* leanest = &plans.front();
    for (const MemoryPlan& p : plans) leanest = p.peak() < leanest->peak() ? &p : leanest;
    ASSERT_TRUE(leanest->stream_unet) << leanest->describe();
    r.memory_budget = leanest->peak() + 2 * kMiB;
    for (const MemoryPlan& p : plans)
        if (!p.stream_unet) ASSERT_LT(r.memory_budget, p.peak()) << "the UNet's pages should exceed the margin";
    std::vector<std::string> notices;
    r.notice = [&](const std::string& line) { notices.push_back(line); };
    const GenerationResult budgeted = generate(demo(), r);
    ASSERT_EQ(notices.size(), 1u);
    EXPECT_NE(notices[0].find("block by block"), std::string::npos) << notices[0];
    EXPECT_EQ(budgeted.final_latent.values(), free_run.final_latent.values());
    EXPECT_EQ(budgeted.image.values(), free_run.image.values());

    r.memory_budget = 1 * kMiB;  // below what the process holds before any work
    try {
        (void)generate(demo(), r);
        ADD_FAILURE() << "a 1 MiB budget was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory);
        EXPECT_NE(std::string(e.what()).find("--memory "), std::string::npos) << e.what();
    }
}

// The placement a request may force (GenerationRequest::gpu_weights): the four names, anything else an error
// naming them.
TEST(GpuMemoryPlan, PlacementNames) {
    EXPECT_EQ(parse_gpu_weight_placement("resident"), GpuWeightPlacement::Resident);
    EXPECT_EQ(parse_gpu_weight_placement("stages"), GpuWeightPlacement::Stages);
    EXPECT_EQ(parse_gpu_weight_placement("each_stage"), GpuWeightPlacement::EachStage);
    EXPECT_EQ(parse_gpu_weight_placement("streamed"), GpuWeightPlacement::Streamed);
    try {
        (void)parse_gpu_weight_placement("Streamed");
        ADD_FAILURE() << "an unknown placement was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("each_stage"), std::string::npos) << e.what();
    }
}
