#include "rng/avx2_cephes_math.h"

#include <cmath>

#include "rng/fp_exact.h"

namespace kiln {

namespace {

// Cephes logf: log(1 + m) = m - m^2/2 + m^3 * P(m) on m in [sqrt(1/2) - 1, sqrt(2) - 1].
constexpr float kLogPoly[] = {7.0376836292E-2f,  -1.1514610310E-1f, 1.1676998740E-1f,
                              -1.2420140846E-1f, 1.4249322787E-1f,  -1.6668057665E-1f,
                              2.0000714765E-1f,  -2.4999993993E-1f, 3.3333331174E-1f};
constexpr float kLn2Hi = 0.693359375f;      // ln 2 split into an exact high part...
constexpr float kLn2Lo = -2.12194440e-4f;   // ...and the rest
constexpr float kSqrtHalf = 0.707106781186547524f;

// Cephes sinf/cosf: reduction by multiples of pi/4 in three exact-ish pieces, then one of two
// polynomials on [-pi/4, pi/4].
constexpr float kFourOverPi = 1.27323954473516f;
constexpr float kPiOver4A = -0.78515625f;
constexpr float kPiOver4B = -2.4187564849853515625e-4f;
constexpr float kPiOver4C = -3.77489497744594108e-8f;
constexpr float kSinPoly[] = {-1.9515295891E-4f, 8.3321608736E-3f, -1.6666654611E-1f};
constexpr float kCosPoly[] = {2.443315711809948E-005f, -1.388731625493765E-003f, 4.166664568298827E-002f};

}  // namespace

float avx2_cephes_log(float x) {
    // Split x = 2^e * m with m in [0.5, 1) by bit manipulation (x is a normal float here).
    const uint32_t ix = fp::bits(x);
    float e = static_cast<float>(static_cast<int32_t>(ix >> 23) - 0x7f);
    float m = fp::from_bits((ix & ~0x7f800000u) | fp::bits(0.5f));
    e = e + 1.0f;
    // Move m into [sqrt(1/2), sqrt(2)) - 1, adjusting e (the vector code does this with masks).
    const bool small = m < kSqrtHalf;
    const float extra = small ? m : 0.0f;
    m = m - 1.0f;
    e = e - (small ? 1.0f : 0.0f);
    m = m + extra;

    const float z = m * m;
    float y = kLogPoly[0];
    for (int i = 1; i < 9; ++i) y = std::fma(y, m, kLogPoly[i]);
    y = y * m;
    y = std::fma(y, z, e * kLn2Lo);  // GCC fused y*z into the add of e*ln2_lo
    y = y - z * 0.5f;                // z*0.5 is exact, fused or not
    return std::fma(e, kLn2Hi, m + y);
}

void avx2_cephes_sincos(float x, float* sin_out, float* cos_out) {
    // Octant j (made even), so that x - j*pi/4 lies in [-pi/4, pi/4].
    int32_t j = static_cast<int32_t>(x * kFourOverPi);
    j = (j + 1) & ~1;
    const float y = static_cast<float>(j);
    const bool sin_negative = (j & 4) != 0;
    const bool use_sin_poly_for_sin = (j & 2) == 0;
    const bool cos_negative = ((~(j - 2)) & 4) != 0;

    float r = std::fma(y, kPiOver4A, x);
    r = std::fma(y, kPiOver4B, r);
    r = std::fma(y, kPiOver4C, r);

    const float z = r * r;
    float c = kCosPoly[0];
    c = std::fma(c, z, kCosPoly[1]);
    c = std::fma(c, z, kCosPoly[2]);
    c = c * z;
    c = std::fma(c, z, -(z * 0.5f));
    c = c + 1.0f;

    float s = kSinPoly[0];
    s = std::fma(s, z, kSinPoly[1]);
    s = std::fma(s, z, kSinPoly[2]);
    s = s * z;
    s = std::fma(s, r, r);

    const float sin_mag = use_sin_poly_for_sin ? s : c;
    const float cos_mag = use_sin_poly_for_sin ? c : s;
    *sin_out = sin_negative ? -sin_mag : sin_mag;
    *cos_out = cos_negative ? -cos_mag : cos_mag;
}

}  // namespace kiln
