// timestep_embedding (kernels.h) against ops::ref::timestep_embedding, which follows diffusers' float32
// arithmetic as ops::timestep_embedding does, in F32, F16 and BF16; dims 1 (only the zero column), 2, odd
// ones, 320 and 1280 (SD's), both orders of sin/cos, shifts 0 and 1, timesteps 0 .. 999 and fractional.
// Bound: the same float operations in the same order give the same floats; the two sides differ only in
// exp, sin and cos, evaluated in double by different libraries (glibc: under 1 ulp; CUDA: exp 1 ulp, sin
// and cos 2 ulp) and then rounded to float. Where the double result lies more than 8 double ulps from
// every midpoint between floats, both round to the same float, and then to the same storage value: the
// kernel must equal the reference rounded to the storage type bit for bit. Where it lies closer (found and
// counted here; rare), the float may differ by one ulp, 2^-23 |v|; a freq one ulp off moves arg by up to
// 2^-22 |arg| after its rounding, and sin/cos by as much: bound(type, ref, 0, those terms).
#include "cuda/kernel_test_support.h"
#include "ops/ref/ref_ops.h"

namespace kiln::cuda::test {
namespace {

// Whether two double approximations of v, each within a few ulps, could round to different floats.
bool near_float_midpoint(double v) {
    const float f = static_cast<float>(v);
    const double ulp = std::nextafter(std::fabs(v), INFINITY) - std::fabs(v);
    const double below = std::nextafter(f, -INFINITY), above = std::nextafter(f, INFINITY);
    const double gap = std::min(std::fabs(v - (double(f) + below) / 2), std::fabs(v - (double(f) + above) / 2));
    return gap <= 8 * ulp;
}

struct EmbeddingCase {
    std::vector<float> t;
    int dim;
    bool flip;
    float shift;
};

void check_embedding(DType type, const EmbeddingCase& ec, size_t& ambiguous) {
    const int64_t n = int64_t(ec.t.size());
    const std::string what = label(type, "timestep_embedding n " + std::to_string(n) + " dim " + std::to_string(ec.dim) +
                                             (ec.flip ? " cos|sin" : " sin|cos") + " shift " + std::to_string(ec.shift));
    DeviceBuffer ts(ec.t.size() * sizeof(float));
    ts.upload(ec.t.data(), ec.t.size() * sizeof(float));
    Output out(type, size_t(n * ec.dim));
    timestep_embedding(ts.as<float>(), out.get(), type, n, ec.dim, ec.flip, ec.shift, nullptr);

    const Tensor ref = ops::ref::timestep_embedding(ec.t, ec.dim, ec.flip, ec.shift);
    const Values stored = rounded(type, ref.values());
    // The reference's float steps again, to find the results that sit near a rounding boundary.
    const int half = ec.dim / 2;
    const float log_scalar = static_cast<float>(-std::log(10000.0));
    const float divisor = static_cast<float>(double(half) - double(ec.shift));
    std::vector<float> want(size_t(n * ec.dim));
    std::vector<double> bounds(want.size(), 0.0);
    for (int64_t r = 0; r < n; ++r)
        for (int j = 0; j < ec.dim; ++j) {
            const size_t at = size_t(r * ec.dim + j);
            want[at] = stored.f[at];
            if (j >= 2 * half) continue;  // the zero column: exactly 0
            const int sin_at = ec.flip ? half : 0, cos_at = ec.flip ? 0 : half;
            const bool is_sin = j >= sin_at && j < sin_at + half;
            const int col = is_sin ? j - sin_at : j - cos_at;  // the frequency index
            const float exponent = (log_scalar * static_cast<float>(col)) / divisor;
            const double e = std::exp(double(exponent));
            const float arg = ec.t[size_t(r)] * static_cast<float>(e);
            const double v = is_sin ? std::sin(double(arg)) : std::cos(double(arg));
            const bool freq_near = near_float_midpoint(e), value_near = near_float_midpoint(v);
            if (!freq_near && !value_near) continue;
            ++ambiguous;
            want[at] = ref[int64_t(at)];
            const double f_abs = 0x1p-23 * std::fabs(v) + (freq_near ? 0x1p-22 * std::fabs(double(arg)) : 0.0) + 0x1p-149;
            bounds[at] = bound(type, ref[int64_t(at)], 0.0, f_abs);
        }
    expect_within(what, out.values(), want, bounds);
    EXPECT_TRUE(out.guard_intact()) << what;
}

TEST(KernelsCuda, TimestepEmbeddingMatchesTheReference) {
    KILN_SKIP_WITHOUT_GPU();
    const std::vector<float> steps = {0.0f, 1.0f, 999.0f, 500.5f, 37.25f};
    size_t ambiguous = 0, total = 0;
    for (DType type : kStorageTypes) {
        for (int dim : {1, 2, 3, 31, 320, 1280})
            for (bool flip : {false, true})
                for (float shift : {0.0f, 1.0f}) {
                    if (dim / 2 == 1 && shift == 1.0f) continue;  // half - shift = 0: rejected (see the limits test)
                    check_embedding(type, {steps, dim, flip, shift}, ambiguous);
                    total += steps.size() * size_t(dim);
                }
        check_embedding(type, {{980.0f}, 320, true, 1.0f}, ambiguous);
        std::vector<float> many(70001);  // more rows than one grid dimension holds
        for (size_t i = 0; i < many.size(); ++i) many[i] = float(i % 1000);
        check_embedding(type, {many, 4, true, 0.0f}, ambiguous);
    }
    std::printf("[ figures  ] timestep_embedding: %zu of about %zu values near a rounding boundary\n", ambiguous, total);
}

}  // namespace
}  // namespace kiln::cuda::test
