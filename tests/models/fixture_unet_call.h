// What the tests of other weight files share (GGUF, converted GGUF, .ckpt): a fixture model's UNet call ("sq";
// sd15-mini's unless named; SDXL's with its pooled text and time ids) as UNetInputs, and a bit-for-bit comparison of
// two outputs.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "common/fixtures.h"
#include "io/safetensors.h"
#include "models/unet/unet.h"

namespace kiln::test {

struct FixtureUNetCall {
    Tensor sample, context, timestep, text_embeds, time_ids;
    explicit FixtureUNetCall(const std::string& model = "sd15-mini") {
        const SafetensorsFile ref = SafetensorsFile::open(data_path(model + "/modules.safetensors"));
        sample = ref.load("unet.sq.sample");
        context = ref.load("unet.sq.context");
        timestep = ref.load("unet.sq.timestep");
        if (ref.has("unet.sq.text_embeds")) {
            text_embeds = ref.load("unet.sq.text_embeds");
            time_ids = ref.load("unet.sq.time_ids");
        }
    }
    UNetInputs inputs() const {
        UNetInputs in;
        in.sample = &sample;
        in.context = &context;
        in.timesteps = &timestep;
        if (text_embeds.numel() > 0) {
            in.text_embeds = &text_embeds;
            in.time_ids = &time_ids;
        }
        return in;
    }
};

inline void expect_identical(const Tensor& a, const Tensor& b, const std::string& what) {
    ASSERT_EQ(a.shape(), b.shape()) << what;
    for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a[i], b[i]) << what << " value " << i;
}

}  // namespace kiln::test
