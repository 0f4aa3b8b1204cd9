// Sampler names: kiln names and AUTOMATIC1111 labels in, kiln names out, and back to A1111 labels.
#include <gtest/gtest.h>

#include "kiln/error.h"
#include "sampling/sampler_names.h"
#include "sampling/scheduler_config.h"

namespace kiln {
namespace {

TEST(SamplerNames, ParsesA1111LabelsCaseInsensitively) {
    EXPECT_EQ(parse_sampler("Euler a"), "euler_a");
    EXPECT_EQ(parse_sampler("euler A"), "euler_a");
    EXPECT_EQ(parse_sampler("Euler"), "euler");
    EXPECT_EQ(parse_sampler("Heun"), "heun");
    EXPECT_EQ(parse_sampler("LMS"), "lms");
    EXPECT_EQ(parse_sampler("DDIM"), "ddim");
    EXPECT_EQ(parse_sampler("PLMS"), "pndm");
    EXPECT_EQ(parse_sampler("DPM++ 2M"), "dpmpp_2m");
    EXPECT_EQ(parse_sampler("dpm++ 2m karras"), "dpmpp_2m_karras");
    EXPECT_EQ(parse_sampler("LMS Karras"), "lms_karras");
    EXPECT_EQ(parse_sampler("UniPC"), "unipc");
    EXPECT_EQ(parse_sampler("LCM"), "lcm");
    EXPECT_EQ(parse_sampler("  k_euler_a "), "euler_a");
}

TEST(SamplerNames, AcceptsEveryKilnName) {
    for (const auto& name : kiln_sampler_names()) {
        EXPECT_EQ(parse_sampler(name), name);
        EXPECT_EQ(parse_sampler(name, "Automatic"), name);
    }
    EXPECT_EQ(parse_sampler("DPMPP-2M-KARRAS"), "dpmpp_2m_karras");
}

TEST(SamplerNames, ScheduleTypeSelectsKarras) {
    EXPECT_EQ(parse_sampler("DPM++ 2M", "Karras"), "dpmpp_2m_karras");
    EXPECT_EQ(parse_sampler("Euler", "karras"), "euler_karras");
    EXPECT_EQ(parse_sampler("DPM++ 2M Karras", "Karras"), "dpmpp_2m_karras");
    EXPECT_EQ(parse_sampler("DPM++ 2M Karras", "Automatic"), "dpmpp_2m_karras");  // old combined label
    EXPECT_EQ(parse_sampler("UniPC", ""), "unipc");
    EXPECT_THROW(parse_sampler("Euler a", "Karras"), Error);  // diffusers has no Karras Euler ancestral
    EXPECT_THROW(parse_sampler("DDIM", "Karras"), Error);
    EXPECT_THROW(parse_sampler("Euler", "Exponential"), Error);
}

TEST(SamplerNames, UnknownNameListsValidNames) {
    try {
        parse_sampler("DPM++ 3M SDE");
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        const std::string msg = e.what();
        EXPECT_NE(msg.find("DPM++ 3M SDE"), std::string::npos);
        EXPECT_NE(msg.find("Euler a"), std::string::npos);
        EXPECT_NE(msg.find("dpmpp_2m_karras"), std::string::npos);
    }
    EXPECT_THROW(parse_sampler(""), Error);
}

TEST(SamplerNames, BackToA1111Labels) {
    auto label = a1111_sampler_label("dpmpp_2m_karras");
    EXPECT_EQ(label.sampler, "DPM++ 2M");
    EXPECT_EQ(label.schedule_type, "Karras");
    label = a1111_sampler_label("euler_a");
    EXPECT_EQ(label.sampler, "Euler a");
    EXPECT_EQ(label.schedule_type, "Automatic");
    EXPECT_EQ(a1111_sampler_label("pndm").sampler, "PLMS");
    // Round trip for every kiln name.
    for (const auto& name : kiln_sampler_names()) {
        const auto l = a1111_sampler_label(name);
        EXPECT_EQ(parse_sampler(l.sampler, l.schedule_type), name) << name;
    }
    EXPECT_THROW(a1111_sampler_label("Euler a"), Error);  // labels are not kiln names
    EXPECT_THROW(a1111_sampler_label("ddim_karras"), Error);
}

}  // namespace
}  // namespace kiln

// AUTOMATIC1111 builds prompt-editing schedules over SamplerData.total_steps: twice the steps for samplers
// its table marks "second_order" (Heun), the steps for the others (modules/sd_samplers_common.py,
// modules/sd_samplers_kdiffusion.py).
TEST(SamplerNames, PromptScheduleStepsAsTheWebuiCountsThem) {
    EXPECT_EQ(kiln::a1111_schedule_steps("heun", 20), 40);
    EXPECT_EQ(kiln::a1111_schedule_steps("heun_karras", 7), 14);
    for (const char* first_order : {"euler", "euler_a", "ddim", "pndm", "lms", "dpmpp_2m", "dpmpp_2m_karras", "unipc", "lcm"})
        EXPECT_EQ(kiln::a1111_schedule_steps(first_order, 20), 20) << first_order;
}
