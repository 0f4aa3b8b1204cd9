#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kiln/error.h"
#include "randn_fixture.h"
#include "rng/avx2_cephes_math.h"
#include "rng/mt19937.h"
#include "rng/torch_cpu_generator.h"

using namespace kiln;
using kiln::testing::bits_equal;
using kiln::testing::same_as_reference;
using kiln::testing::randn_fixture;

namespace {
const std::vector<float>& expected(const std::string& name) { return randn_fixture().tensors.at(name); }
}  // namespace

// Every case of the fixture, each on a fresh generator, bit for bit: sizes >= 16 that are and are
// not multiples of 16 (1x4x5x7 = 140 redraws its last block), and the small double-precision path.
TEST(TorchCpuGenerator, MatchesTorchForEveryFixtureCase) {
    ASSERT_EQ(randn_fixture().cases.size(), 25u);
    for (const auto& c : randn_fixture().cases) {
        TorchCpuGenerator gen(c.seed);
        const Tensor t = gen.randn(c.shape);
        EXPECT_EQ(t.shape(), c.shape);
        EXPECT_TRUE(same_as_reference("cpu." + c.key, t.data(), t.numel())) << c.key;
    }
}

// torch draws the uniforms of the block path in order and transforms whole 16-blocks, so calls whose
// sizes are multiples of 16 continue one stream: 16384 then 8192 values are the 24576 of one call.
TEST(TorchCpuGenerator, SuccessiveBlockCallsContinueTheStream) {
    for (uint64_t seed : {0ull, 42ull}) {
        TorchCpuGenerator gen(seed);
        const Tensor a = gen.randn({1, 4, 64, 64});
        const Tensor b = gen.randn({2, 4, 32, 32});
        std::vector<float> joined(a.values());
        joined.insert(joined.end(), b.values().begin(), b.values().end());
        EXPECT_TRUE(same_as_reference("cpu.seed" + std::to_string(seed) + "_1x4x96x64", joined.data(), joined.size()))
            << seed;
    }
}

// The small path caches the second value of each Box-Muller pair in the generator, across calls:
// randn(1) three times, or randn(2) then randn(1), gives torch's randn(3).
TEST(TorchCpuGenerator, SmallCallsShareTheCachedNormal) {
    for (const auto& c : randn_fixture().cases) {
        if (c.shape != Shape{3}) continue;
        const auto& ref = expected("cpu." + c.key);
        TorchCpuGenerator ones(c.seed);
        std::vector<float> got;
        for (int i = 0; i < 3; ++i) got.push_back(ones.randn({1})[0]);
        EXPECT_TRUE(bits_equal(ref, got.data(), 3)) << c.key;

        TorchCpuGenerator two_one(c.seed);
        const Tensor a = two_one.randn({2});
        const Tensor b = two_one.randn({1});
        const float joined[3] = {a[0], a[1], b[0]};
        EXPECT_TRUE(bits_equal(ref, joined, 3)) << c.key;
    }
}

// A 140-value call redraws 16 uniforms for its last, partial block (values 124..139, overwriting
// 124..127), so only its first 124 values are a prefix of a longer call from the same seed.
TEST(TorchCpuGenerator, PartialBlockIsNotAPrefixOfALongerCall) {
    const auto& small = expected("cpu.seed42_1x4x5x7");
    const auto& large = expected("cpu.seed42_1x4x64x64");
    TorchCpuGenerator gen(42);
    const Tensor t = gen.randn({140});
    EXPECT_TRUE(bits_equal(small, t.data(), 140));
    EXPECT_TRUE(bits_equal(std::vector<float>(large.begin(), large.begin() + 124), t.data(), 124));
    for (int i = 124; i < 140; ++i) EXPECT_NE(t[i], large[i]) << i;
}

TEST(TorchCpuGenerator, OnlyTheLow32BitsOfTheSeedMatter) {
    // CPUGeneratorImpl seeds its mt19937 with seed & 0xffffffff.
    TorchCpuGenerator a(7), b((uint64_t{1} << 40) + 7);
    EXPECT_EQ(a.randn({37}).values(), b.randn({37}).values());
}

TEST(TorchCpuGenerator, EmptyShapesConsumeNothing) {
    TorchCpuGenerator a(5), b(5);
    EXPECT_EQ(a.randn({0, 4}).numel(), 0);
    EXPECT_EQ(a.randn({}).numel(), 1);  // a 0-d tensor holds one value
    EXPECT_EQ(b.randn({}).numel(), 1);
    EXPECT_EQ(a.randn({20}).values(), b.randn({20}).values());
}

TEST(TorchCpuGenerator, BadShapesThrow) {
    TorchCpuGenerator gen(1);
    EXPECT_THROW(gen.randn({2, -1}), Error);
    EXPECT_THROW(gen.randn({-3, 0}), Error);
    try {
        gen.randn({1 << 20, 1 << 20, 1 << 20});
        FAIL() << "no error for an overflowing shape";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("shape"), std::string::npos);
    }
}

// First-principles checks of the pieces.
TEST(Mt19937, MatchesTheReferenceMersenneTwister) {
    // std::mt19937 is the reference MT19937 with the same 32-bit seeding; the C++ standard fixes
    // its 10000th output for seed 5489 at 4123659995 ([rand.predef]).
    for (uint32_t seed : {5489u, 0u, 42u, 4294967295u}) {
        Mt19937 ours(seed);
        std::mt19937 ref(seed);
        for (int i = 0; i < 2000; ++i) ASSERT_EQ(ours.next_u32(), ref()) << seed << " at " << i;
    }
    Mt19937 m(5489);
    uint32_t v = 0;
    for (int i = 0; i < 10000; ++i) v = m.next_u32();
    EXPECT_EQ(v, 4123659995u);
}

TEST(Avx2CephesMath, IsAccurateFloatMath) {
    // Cephes documents ~1e-7 relative accuracy for these; 4e-7 absolute on values of magnitude <= 1
    // and 2e-7 relative for log allows the few float ulps such polynomials keep.
    for (int i = 1; i <= 10000; ++i) {
        const float x = static_cast<float>(i) / 10000.0f;
        EXPECT_NEAR(avx2_cephes_log(x), std::log(static_cast<double>(x)), 2e-7 * std::fabs(std::log(x)) + 1e-9) << x;
        const float a = static_cast<float>(2.0 * M_PI) * x;
        float s, c;
        avx2_cephes_sincos(a, &s, &c);
        EXPECT_NEAR(s, std::sin(static_cast<double>(a)), 4e-7) << a;
        EXPECT_NEAR(c, std::cos(static_cast<double>(a)), 4e-7) << a;
    }
}
