#include <gtest/gtest.h>

#include "core/half.h"
#include "core/tensor.h"
#include "kiln/error.h"

using namespace kiln;

TEST(Tensor, ShapeAndReshape) {
    Tensor t({2, 3});
    EXPECT_EQ(t.numel(), 6);
    EXPECT_EQ(t.dim(-1), 3);
    Tensor r = t.reshaped({3, 2});
    EXPECT_EQ(r.dim(0), 3);
    EXPECT_THROW(t.reshaped({4, 2}), Error);
}

TEST(Half, RoundTripsEveryFiniteHalf) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        if (((h >> 10) & 0x1f) == 0x1f) continue;  // inf/nan
        EXPECT_EQ(float_to_half(half_to_float(static_cast<uint16_t>(h))), h) << h;
    }
}

TEST(Half, KnownValues) {
    EXPECT_EQ(half_to_float(0x3c00), 1.0f);
    EXPECT_EQ(half_to_float(0xc000), -2.0f);
    EXPECT_EQ(half_to_float(0x0001), 5.960464477539063e-08f);
    EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
    EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // rounds to infinity
}
