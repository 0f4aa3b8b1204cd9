#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kiln/error.h"
#include "randn_fixture.h"
#include "rng/cuda_float_math.h"
#include "rng/noise_generator_factory.h"
#include "rng/philox.h"
#include "rng/torch_cpu_generator.h"
#include "rng/torch_cuda_generator.h"

using namespace kiln;
using kiln::testing::bits_equal;
using kiln::testing::same_as_reference;
using kiln::testing::randn_fixture;

namespace {
const std::vector<float>& expected(const std::string& name) { return randn_fixture().tensors.at(name); }
constexpr int64_t kH200Threads = 132 * 2048;  // threads in torch's largest grid on an H200
}  // namespace

TEST(TorchCudaGenerator, MatchesTorchOnAnH200ForEveryFixtureCase) {
    ASSERT_EQ(randn_fixture().cases.size(), 25u);
    for (const auto& c : randn_fixture().cases) {
        TorchCudaGenerator gen(c.seed);
        const Tensor t = gen.randn(c.shape);
        EXPECT_EQ(t.shape(), c.shape);
        EXPECT_TRUE(same_as_reference("cuda." + c.key, t.data(), t.numel())) << c.key;
    }
}

// The whole 64-bit seed is the Philox key (unlike the CPU generator).
TEST(TorchCudaGenerator, UsesAll64SeedBits) {
    TorchCudaGenerator a(7), b((uint64_t{1} << 40) + 7);
    EXPECT_NE(a.randn({64}).values(), b.randn({64}).values());
}

// Each call advances the Philox offset by 4 per grid-stride trip (torch's get_offset()).
TEST(TorchCudaGenerator, OffsetAdvancesByFourPerTrip) {
    TorchCudaGenerator gen(1);
    EXPECT_EQ(gen.offset(), 0u);
    gen.randn({1, 4, 5, 7});
    EXPECT_EQ(gen.offset(), 4u);
    gen.randn({0});
    EXPECT_EQ(gen.offset(), 4u);  // empty: torch returns before reserving an offset
    gen.randn({kH200Threads * 4});
    EXPECT_EQ(gen.offset(), 8u);  // one trip: four values per thread of the full grid
    // The grid is capped at multiprocessors * (max threads / 256) blocks: a GPU with 2 SMs of 512
    // threads runs 1024 threads, so 4097 values take two trips.
    TorchCudaGenerator small_gpu(1, 2, 512);
    small_gpu.randn({4097});
    EXPECT_EQ(small_gpu.offset(), 8u);
    small_gpu.randn({4096});
    EXPECT_EQ(small_gpu.offset(), 12u);
}

// Below 256 * blocks threads every element is the first value of its own thread, so a shorter
// call is a prefix of a longer one (the fixture's 64x64, 96x64 and 2x128x128 agree).
TEST(TorchCudaGenerator, SmallTensorsArePrefixesOfLargerOnes) {
    const auto& big = expected("cuda.seed42_2x4x128x128");
    TorchCudaGenerator gen(42);
    const Tensor t = gen.randn({1, 4, 5, 7});
    EXPECT_TRUE(bits_equal(std::vector<float>(big.begin(), big.begin() + 140), t.data(), 140));
    // ...and on any GPU: the multiprocessor count only matters above that size.
    TorchCudaGenerator other_gpu(42, 16, 1024);
    EXPECT_EQ(other_gpu.randn({1, 4, 5, 7}).values(), t.values());
}

// What torch's layout implies for successive calls: a second call starts one Philox block later
// (offset 4), which is exactly where a single call of four grids' worth of values continues each
// thread. So randn(4T) then randn(m) equals randn(4T + m) for m <= T, with T the grid's threads.
TEST(TorchCudaGenerator, SecondCallContinuesWhereALongerCallWouldGo) {
    const int sms = 2, max_threads = 512;  // a tiny GPU keeps this fast: T = 1024
    const int64_t T = sms * max_threads;
    TorchCudaGenerator split(9, sms, max_threads), whole(9, sms, max_threads);
    const Tensor first = split.randn({4 * T});
    const Tensor second = split.randn({300});
    const Tensor all = whole.randn({4 * T + 300});
    EXPECT_TRUE(bits_equal(std::vector<float>(all.values().begin(), all.values().begin() + 4 * T), first.data(), 4 * T));
    EXPECT_TRUE(bits_equal(std::vector<float>(all.values().begin() + 4 * T, all.values().end()), second.data(), 300));
}

TEST(TorchCudaGenerator, BadArgumentsThrow) {
    EXPECT_THROW(TorchCudaGenerator(1, 0), Error);
    EXPECT_THROW(TorchCudaGenerator(1, 132, 128), Error);
    TorchCudaGenerator gen(1);
    EXPECT_THROW(gen.randn({4, -4}), Error);
    try {
        gen.randn({1 << 16, 1 << 16});  // 2^32 elements
        FAIL() << "no error for a 2^32-element request";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    }
    EXPECT_EQ(gen.offset(), 0u);  // failed calls reserve nothing
}

TEST(MakeNoiseGenerator, BuildsBothKindsAndRejectsOthers) {
    auto cpu = make_noise_generator("cpu", 42);
    auto cuda = make_noise_generator("cuda", 42);
    EXPECT_TRUE(bits_equal(expected("cpu.seed42_3"), cpu->randn({3}).data(), 3));
    EXPECT_TRUE(bits_equal(expected("cuda.seed42_3"), cuda->randn({3}).data(), 3));
    try {
        make_noise_generator("mps", 1);
        FAIL() << "no error for an unknown kind";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("mps"), std::string::npos);
    }
    EXPECT_THROW(make_noise_generator("", 1), Error);
    EXPECT_THROW(make_noise_generator("CPU", 1), Error);
}

// First-principles checks of the pieces.
TEST(Philox, MatchesRandom123KnownAnswers) {
    // Random123's kat_vectors for philox4x32 with 10 rounds (counter words, key words, output).
    EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, 0, 0), (Philox4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
    EXPECT_EQ(philox4x32_10({~0u, ~0u, ~0u, ~0u}, ~0u, ~0u), (Philox4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
    EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, 0xa4093822, 0x299f31d0),
              (Philox4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(CurandPhilox, SubsequenceAndOffsetPlaceTheCounter) {
    // curand_init(seed, subsequence, offset): counter = (offset / 4, subsequence) as 64-bit halves.
    CurandPhilox s(0x0123456789abcdefull, (uint64_t{5} << 32) | 3, (uint64_t{7} << 32 | 9) * 4);
    EXPECT_EQ(s.next4(), philox4x32_10({9, 7, 3, 5}, 0x89abcdef, 0x01234567));
    EXPECT_EQ(s.next4(), philox4x32_10({10, 7, 3, 5}, 0x89abcdef, 0x01234567));
    CurandPhilox wrap(1, 0, uint64_t{0xffffffff} * 4);  // the next block carries into word 1
    wrap.next4();
    EXPECT_EQ(wrap.next4(), philox4x32_10({0, 1, 0, 0}, 1, 0));
}

TEST(CudaFloatMath, StaysWithinNvidiasDocumentedErrorBounds) {
    // CUDA C++ Programming Guide, intrinsic functions: for x in [-pi, pi] the maximum absolute error
    // of __sinf(x) is 2^-21.41 and of __cosf(x) 2^-21.19; logf has a maximum error of 1 ulp. This
    // also covers the cosine half of the MUFU model, which the fixtures cannot confirm.
    double worst_sin = 0, worst_cos = 0;
    for (int i = 0; i <= 200000; ++i) {
        const float x = static_cast<float>(M_PI) * static_cast<float>(i) / 200000.0f;
        float s, c;
        cuda_sincosf_approx(x, &s, &c);
        worst_sin = std::max(worst_sin, std::fabs(s - std::sin(static_cast<double>(x))));
        worst_cos = std::max(worst_cos, std::fabs(c - std::cos(static_cast<double>(x))));
    }
    EXPECT_LE(worst_sin, std::exp2(-21.41));
    EXPECT_LE(worst_cos, std::exp2(-21.19));
    for (uint32_t b = 0x2f000000u; b <= 0x3f800000u; b += 997) {  // [2^-33, 1]: the Box-Muller inputs
        float x;
        std::memcpy(&x, &b, 4);
        const double exact = std::log(static_cast<double>(x));
        const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(exact)) - 23);
        ASSERT_LE(std::fabs(cuda_logf(x) - exact), ulp) << x;
    }
    EXPECT_EQ(cuda_logf(1.0f), 0.0f);
    EXPECT_TRUE(std::isinf(cuda_logf(0.0f)) && cuda_logf(0.0f) < 0);
    EXPECT_TRUE(std::isnan(cuda_logf(-1.0f)));
}

TEST(CudaFloatMath, MufuModelHasTheSymmetriesOfSine) {
    EXPECT_EQ(mufu_sin(0.0f), 0.0f);
    for (int k : {1, 4097, 300001, 1234567, 4000000}) {  // t = k * 2^-24, so t + 1/4 and t + 1/2 are exact
        const float t = std::ldexp(static_cast<float>(k), -24);
        EXPECT_EQ(mufu_sin(t + 0.5f), -mufu_sin(t)) << t;  // half a turn negates (exact in the table)
        EXPECT_EQ(mufu_cos(t), mufu_sin(t + 0.25f)) << t;
    }
    // FMUL.RZ: the float of largest magnitude not beyond the exact product.
    int rounded_up_by_nearest = 0;
    for (int i = 1; i < 5000; ++i) {
        const float a = 1.0f + static_cast<float>(i) * 0.000731f, b = 0.1591549f * static_cast<float>(i % 97 + 1);
        const double exact = static_cast<double>(a) * b;
        const float r = mul_round_toward_zero(a, b);
        ASSERT_LE(static_cast<double>(r), exact);
        ASSERT_GT(static_cast<double>(std::nextafter(r, INFINITY)), exact);
        rounded_up_by_nearest += static_cast<double>(a * b) > exact;
    }
    EXPECT_GT(rounded_up_by_nearest, 0);  // the sweep does include products where RN and RZ differ
}
