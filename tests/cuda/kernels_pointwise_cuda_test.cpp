// The elementwise kernels of kernels.h against the reference ops (ops::ref) in F32, F16 and BF16, on
// lengths around the block size (1, 31, 33, 257, ...) and shapes whose planes are 1 element or odd.
// Bounds (see kernel_test_support.h for bound() and rel_u()):
//  - convert: exact. Widening is exact and the narrowing is one round-to-nearest-even, so the result must
//    equal the host's conversion bit for bit (NaN only as NaN): all 65536 F16 and BF16 codes, and floats
//    chosen at the ties, overflow thresholds and subnormals of both 16-bit types.
//  - add, scale, add_channel_bias: one float operation on exact values: f_rel = rel_u(1).
//  - silu x / (1 + e^-x): expf 4u, the sum u (e's error passes through scaled by e/(1+e) <= 1), the
//    division u: f_rel = rel_u(6).
//  - gelu 0.5 x erfc(-x c): c = 1/sqrt 2 rounded and the product, 2u on the argument z, which moves erfc
//    by kappa(z) = |z erfc'(z) / erfc(z)| times that; erfcf 8u; the product u. f_rel = rel_u(2 kappa + 10)
//    (+1: kappa's change across the 2u interval and the exact 0.5 x, both far below 1).
//  - gelu_tanh x / (1 + e^(-2U)), U = k0 (x + a x^3): a x^3 four roundings, the sum (same signs) one, k0
//    and its product two, so U is off by rel_u(7) and e^(-2U) by 14 |U| u, plus expf 4u, the sum and the
//    division: f_rel = rel_u(14 |U| + 7).
//  - quick_gelu x / (1 + e^(-1.702 x)): 1.702 rounded and the product put 2u |1.702 x| on the exponent:
//    f_rel = rel_u(3.404 |x| + 7).
//  - geglu a * gelu(g): gelu's term plus the product: rel_u(2 kappa + 11).
//  Results below float's normal range (2^-126) may carry the absolute error of subnormal roundings inside
//  the float stage: f_abs = 2^-126. Inputs stay within |x| <= 9, where no exp overflows.
//  - find_nonfinite: exact (a flag).
#include <cfloat>
#include <iterator>
#include <limits>

#include "cuda/kernel_test_support.h"
#include "ops/ref/ref_ops.h"

namespace kiln::cuda::test {
namespace {

// ------------------------------------------------------------------------------------------- convert

uint16_t bits16(const std::vector<uint8_t>& b, size_t i) { return uint16_t(b[2 * i] | (b[2 * i + 1] << 8)); }
bool is_nan16(DType t, uint16_t b) {
    return t == DType::F16 ? (b & 0x7c00) == 0x7c00 && (b & 0x3ff) : (b & 0x7f80) == 0x7f80 && (b & 0x7f);
}

// The expected codes of converting `from` (as float values `f`) to `to`, by the host's conversions.
std::vector<uint8_t> host_convert(const std::vector<float>& f, DType to) {
    std::vector<uint8_t> out(f.size() * dtype_size(to));
    if (!f.empty()) encode_from_float(to, f.data(), out.data(), f.size());
    return out;
}

void check_convert(const Values& src, DType to) {
    const std::string what = std::string(dtype_name(src.type)) + " -> " + dtype_name(to) + " of " +
                             std::to_string(src.size());
    DeviceBuffer in(src);
    Output out(to, src.size());
    convert(in.get(), src.type, out.get(), to, int64_t(src.size()), nullptr);
    const std::vector<uint8_t> got = out.bytes(), want = host_convert(src.f, to);
    const std::vector<float> got_f = out.values();
    size_t failures = 0;
    std::string report;
    for (size_t i = 0; i < src.size(); ++i) {
        bool ok;
        if (std::isnan(src.f[i])) {  // any NaN will do: payloads are not part of the contract
            ok = to == DType::F32 ? std::isnan(got_f[i]) : is_nan16(to, bits16(got, i));
        } else {
            ok = std::memcmp(&got[i * dtype_size(to)], &want[i * dtype_size(to)], dtype_size(to)) == 0;
        }
        if (!ok && failures++ < 5) report += "  element " + std::to_string(i) + " (" + std::to_string(src.f[i]) + ")\n";
    }
    EXPECT_EQ(failures, 0u) << what << "\n" << report;
    EXPECT_TRUE(out.guard_intact()) << what;
}

Values every_code(DType type) {
    Values v;
    v.type = type;
    v.bytes.resize(2 * 65536);
    for (uint32_t c = 0; c < 65536; ++c) {
        v.bytes[2 * c] = uint8_t(c);
        v.bytes[2 * c + 1] = uint8_t(c >> 8);
    }
    v.f.resize(65536);
    decode_to_float(type, v.bytes.data(), v.f.data(), 65536);
    return v;
}

// Floats at the edges of F16 and BF16 rounding: exact ties both ways, just either side of them, the
// overflow thresholds, subnormals of each type and of float, signed zeros, infinities and NaN.
std::vector<float> edge_floats() {
    std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            65504.0f, 65519.996f, 65520.0f, -65520.0f, 1e5f, FLT_MAX, -FLT_MAX, FLT_MIN,
                            std::numeric_limits<float>::denorm_min(), 1e-40f, -3e-39f,
                            0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-26f, 0x1.ffcp-15f, 0x1p-14f, 6e-8f, -6e-8f,
                            3.4e38f, 0x1.fffffep127f};
    for (float base : {1.0f, 3.0f, 1024.0f, 0x1p-20f, 0x1p100f}) {
        for (int e : {11, 8}) {  // ties of F16 (2^-11 of a binade) and BF16 (2^-8)
            const float ulp_half = std::ldexp(base, -e);
            for (float off : {ulp_half, 3 * ulp_half, ulp_half * 1.000001f, ulp_half * 0.999999f})
                for (float sign : {1.0f, -1.0f}) v.push_back(sign * (base + off));
        }
    }
    Rng rng{42};
    for (int i = 0; i < 4000; ++i) {  // random bit patterns: every exponent
        const uint32_t u = uint32_t(rng.unit() * 4294967296.0);
        float f;
        std::memcpy(&f, &u, 4);
        v.push_back(f);
    }
    return v;
}

TEST(KernelsCuda, ConvertRoundsOnceToNearestEven) {
    KILN_SKIP_WITHOUT_GPU();
    for (DType from : {DType::F16, DType::BF16})
        for (DType to : kStorageTypes) check_convert(every_code(from), to);
    const std::vector<float> edges = edge_floats();
    for (DType to : kStorageTypes) check_convert(rounded(DType::F32, edges), to);
    for (size_t n : {size_t(1), size_t(33)})
        for (DType from : kStorageTypes)
            for (DType to : kStorageTypes) check_convert(random_values(from, n, 7 + n, -3, 3), to);
}

TEST(KernelsCuda, ConvertInPlaceOfOneTypeLeavesTheData) {
    KILN_SKIP_WITHOUT_GPU();
    const Values v = random_values(DType::F16, 1000, 3, -2, 2);
    DeviceBuffer buf(v);
    convert(buf.get(), DType::F16, buf.get(), DType::F16, 1000, nullptr);
    EXPECT_EQ(buf.download(v.bytes.size()), v.bytes);
}

// ------------------------------------------------------------------------------------- find_nonfinite

int run_find_nonfinite(const Values& v, int initial) {
    DeviceBuffer x(v), flag(sizeof(int));
    flag.upload(&initial, sizeof(int));
    find_nonfinite(x.get(), v.type, int64_t(v.size()), flag.as<int>(), nullptr);
    int result = 0;
    const std::vector<uint8_t> b = flag.download(sizeof(int));
    std::memcpy(&result, b.data(), sizeof(int));
    return result;
}

TEST(KernelsCuda, FindNonfiniteSeesEveryNanAndInfinityAndNothingElse) {
    KILN_SKIP_WITHOUT_GPU();
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    for (DType type : kStorageTypes)
        for (size_t n : {size_t(1), size_t(33), size_t(100003)}) {
            SCOPED_TRACE(label(type, "n " + std::to_string(n)));
            std::vector<float> v = random_values(DType::F32, n, n, -1, 1).f;
            // The largest finite value of each type stays finite.
            v[0] = type == DType::F16 ? 65504.0f : type == DType::BF16 ? 0x1.fep127f : FLT_MAX;
            if (n > 2) v[1] = type == DType::F16 ? 6e-8f : 1e-40f;  // and the subnormals
            if (type == DType::F32 && n > 2) v[2] = 65520.0f;  // infinite in F16 only
            EXPECT_EQ(run_find_nonfinite(rounded(type, v), 0), 0);
            EXPECT_EQ(run_find_nonfinite(rounded(type, v), 7), 7) << "the flag is left alone without a find";
            for (size_t at : {size_t(0), n / 2, n - 1})
                for (float bad : {nan, inf, -inf}) {
                    std::vector<float> w = v;
                    w[at] = bad;
                    EXPECT_EQ(run_find_nonfinite(rounded(type, w), 0), 1) << "at " << at << ": " << bad;
                }
        }
}

// ---------------------------------------------------------------------------------------- activations

constexpr double kPi = 3.14159265358979323846;

double kappa_erfc(double z) { return std::fabs(z) * 2.0 / std::sqrt(kPi) * std::exp(-z * z) / std::erfc(z); }

double activation_f_rel(Activation f, double x) {
    switch (f) {
        case Activation::Silu: return rel_u(6);
        case Activation::Gelu: return rel_u(2 * kappa_erfc(-x / std::sqrt(2.0)) + 10);
        case Activation::GeluTanh: return rel_u(14 * std::fabs(0.7978845608028654 * (x + 0.044715 * x * x * x)) + 7);
        case Activation::QuickGelu: return rel_u(3.404 * std::fabs(x) + 7);
    }
    return 1.0;
}

void reference_activation(Activation f, Tensor& x) {
    switch (f) {
        case Activation::Silu: ops::ref::silu_(x); return;
        case Activation::Gelu: ops::ref::gelu_(x); return;
        case Activation::GeluTanh: ops::ref::gelu_tanh_(x); return;
        case Activation::QuickGelu: ops::ref::quick_gelu_(x); return;
    }
}

const char* activation_name(Activation f) {
    switch (f) {
        case Activation::Silu: return "silu";
        case Activation::Gelu: return "gelu";
        case Activation::GeluTanh: return "gelu_tanh";
        case Activation::QuickGelu: return "quick_gelu";
    }
    return "?";
}

TEST(KernelsCuda, ActivationsMatchTheReference) {
    KILN_SKIP_WITHOUT_GPU();
    for (Activation f : {Activation::Silu, Activation::Gelu, Activation::GeluTanh, Activation::QuickGelu})
        for (DType type : kStorageTypes)
            for (size_t n : {size_t(1), size_t(31), size_t(33), size_t(257), size_t(100003)}) {
                std::vector<float> v = random_values(DType::F32, n, 11 * n, -9, 9).f;
                const float specials[] = {0.0f, -0.0f, 1e-5f, -1e-5f, 9.0f, -9.0f, 3.0f, -3.0f};
                for (size_t i = 0; i < n && i < std::size(specials); ++i) v[i] = specials[i];
                const Values x = rounded(type, v);
                DeviceBuffer buf(x);
                activation(buf.get(), type, int64_t(n), f, nullptr);
                std::vector<float> got(n);
                const std::vector<uint8_t> b = buf.download(x.bytes.size());
                decode_to_float(type, b.data(), got.data(), n);

                Tensor ref = x.tensor({int64_t(n)});
                reference_activation(f, ref);
                std::vector<double> bounds(n);
                for (size_t i = 0; i < n; ++i) bounds[i] = bound(type, ref[i], activation_f_rel(f, x.f[i]), 0x1p-126);
                expect_within(label(type, std::string(activation_name(f)) + " n " + std::to_string(n)), got, ref.values(),
                              bounds);
            }
}

TEST(KernelsCuda, GegluMatchesTheReference) {
    KILN_SKIP_WITHOUT_GPU();
    // rows, half; 640, 8, 1288 and 1280 go in 16-byte loads (4 and 12 too for float32), 1288 over blocks of 192
    // threads; 4099 x 1280 is SD 1.5's 64x64 level's shape with an odd row count.
    const std::pair<int64_t, int64_t> shapes[] = {{1, 1},  {31, 33}, {3, 1},  {77, 640},  {70001, 2},
                                                  {3, 4},  {5, 8},   {3, 12}, {2, 1288}, {4099, 1280}};
    for (DType type : kStorageTypes)
        for (auto [rows, half] : shapes) {
            const Values x = random_values(type, size_t(rows * 2 * half), uint64_t(rows * 100 + half), -9, 9);
            DeviceBuffer in(x);
            Output out(type, size_t(rows * half));
            geglu(in.get(), out.get(), type, rows, half, nullptr);
            const Tensor ref = ops::ref::geglu(x.tensor({rows, 2 * half}));
            std::vector<double> bounds(ref.numel());
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t j = 0; j < half; ++j) {
                    const double g = x.f[size_t(r * 2 * half + half + j)];
                    bounds[size_t(r * half + j)] =
                        bound(type, ref[r * half + j], rel_u(2 * kappa_erfc(-g / std::sqrt(2.0)) + 11), 0x1p-126);
                }
            expect_within(label(type, "geglu " + std::to_string(rows) + " x " + std::to_string(half)), out.values(),
                          ref.values(), bounds);
            EXPECT_TRUE(out.guard_intact());
        }
}

// ------------------------------------------------------------------------------------------ arithmetic

std::vector<float> download_values(const DeviceBuffer& buf, DType type, size_t n) {
    const std::vector<uint8_t> b = buf.download(n * dtype_size(type));
    std::vector<float> out(n);
    if (n) decode_to_float(type, b.data(), out.data(), n);
    return out;
}

std::vector<double> one_rounding_bounds(DType type, const Tensor& ref) {
    std::vector<double> b(ref.numel());
    for (int64_t i = 0; i < ref.numel(); ++i) b[size_t(i)] = bound(type, ref[i], rel_u(1));
    return b;
}

TEST(KernelsCuda, AddAndScaleMatchTheReference) {
    KILN_SKIP_WITHOUT_GPU();
    for (DType type : kStorageTypes)
        for (size_t n : {size_t(1), size_t(33), size_t(65537), size_t(65536), size_t(4)}) {  // the last two in quads
            const Values a = random_values(type, n, n, -4, 4);
            std::vector<float> bv = random_values(DType::F32, n, n + 1, -4, 4).f;
            for (size_t i = 0; i < n; i += 3) bv[i] = -a.f[i];  // exact cancellation to +0
            const Values b = rounded(type, bv);
            DeviceBuffer da(a), db(b);
            add(da.get(), db.get(), type, int64_t(n), nullptr);
            Tensor ref = a.tensor({int64_t(n)});
            ops::ref::add_(ref, b.tensor({int64_t(n)}));
            expect_within(label(type, "add n " + std::to_string(n)), download_values(da, type, n), ref.values(),
                          one_rounding_bounds(type, ref));

            for (float s : {0.7f, -3.0f}) {
                DeviceBuffer dx(a);
                scale(dx.get(), type, int64_t(n), s, nullptr);
                Tensor sref = a.tensor({int64_t(n)});
                ops::ref::scale_(sref, s);
                expect_within(label(type, "scale n " + std::to_string(n) + " by " + std::to_string(s)),
                              download_values(dx, type, n), sref.values(), one_rounding_bounds(type, sref));
            }
        }
}

TEST(KernelsCuda, ChannelBiasMatchesTheReference) {
    KILN_SKIP_WITHOUT_GPU();
    // n, c, inner; planes of a multiple of 8 (or 4) values take 16-byte accesses: 4096, 1024, 12
    const int64_t shapes[][3] = {{1, 1, 1},     {2, 3, 31},    {1, 33, 65},  {3, 5, 4097},
                                 {1, 70001, 3}, {2, 320, 4096}, {2, 7, 1024}, {1, 9, 12}};
    for (DType type : kStorageTypes)
        for (const auto& s : shapes) {
            const int64_t n = s[0], c = s[1], inner = s[2];
            const Values x = random_values(type, size_t(n * c * inner), uint64_t(n * c + inner), -4, 4);
            const Values bias = random_values(type, size_t(n * c), uint64_t(c), -4, 4);
            DeviceBuffer dx(x), db(bias);
            add_channel_bias(dx.get(), db.get(), type, n, c, inner, nullptr);
            Tensor ref = x.tensor({n, c, inner});
            ops::ref::add_channel_bias_(ref, bias.tensor({n, c}));
            expect_within(label(type, "add_channel_bias " + std::to_string(n) + "x" + std::to_string(c) + "x" +
                                          std::to_string(inner)),
                          download_values(dx, type, x.size()), ref.values(), one_rounding_bounds(type, ref));
            // per_channel: bias [c] for every image, as the [n, c] bias that repeats it.
            DeviceBuffer dy(x), dc(bias);
            add_channel_bias(dy.get(), dc.get(), type, n, c, inner, nullptr, true);
            Tensor repeated({n, c});
            for (int64_t i = 0; i < n * c; ++i) repeated[i] = bias.f[size_t(i % c)];
            Tensor ref_c = x.tensor({n, c, inner});
            ops::ref::add_channel_bias_(ref_c, repeated);
            expect_within(label(type, "add_channel_bias per channel " + std::to_string(n) + "x" + std::to_string(c) +
                                          "x" + std::to_string(inner)),
                          download_values(dy, type, x.size()), ref_c.values(), one_rounding_bounds(type, ref_c));
        }
}

}  // namespace
}  // namespace kiln::cuda::test
