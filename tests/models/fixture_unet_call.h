// What the tests of other weight files share (GGUF, converted GGUF, .ckpt): sd15-mini's fixture UNet call
// ("sq") as UNetInputs, and a bit-for-bit comparison of two outputs.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "common/fixtures.h"
#include "io/safetensors.h"
#include "models/unet/unet.h"

namespace kiln::test {

struct FixtureUNetCall {
    Tensor sample, context, timestep;
    FixtureUNetCall() {
        const SafetensorsFile ref = SafetensorsFile::open(data_path("sd15-mini/modules.safetensors"));
        sample = ref.load("unet.sq.sample");
        context = ref.load("unet.sq.context");
        timestep = ref.load("unet.sq.timestep");
    }
    UNetInputs inputs() const {
        UNetInputs in;
        in.sample = &sample;
        in.context = &context;
        in.timesteps = &timestep;
        return in;
    }
};

inline void expect_identical(const Tensor& a, const Tensor& b, const std::string& what) {
    ASSERT_EQ(a.shape(), b.shape()) << what;
    for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a[i], b[i]) << what << " value " << i;
}

}  // namespace kiln::test
