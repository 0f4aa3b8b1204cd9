#include "rng/cuda_float_math.h"

#include <algorithm>
#include <cmath>

#include "rng/fp_exact.h"

namespace kiln {

namespace {

// ---- MUFU.SIN / MUFU.COS model -------------------------------------------------------------
// The special function unit is a quadratic table interpolator (Oberman & Siu, "A high-performance
// area-efficient multifunction interpolator", ARITH-17, 2005). NVIDIA documents its accuracy
// (|error| <= 2^-21.41 for __sinf on [-pi, pi]) but not its table, so the model below was
// recovered from the H200 outputs in tests/data/rng/randn.safetensors: every float of a CUDA
// randn there is s * MUFU.SIN(t) for a known s and t, which confines each MUFU result to an
// interval; an exact integer constraint solve over ~250k such intervals (4000 per segment)
// admits exactly one coefficient triple per segment, and coefficients solved from half of the
// seeds reproduce the other half. The model:
//   - the angle t (revolutions) is truncated to a multiple of 2^-25; its top two fraction bits
//     pick the quadrant, the next 23 bits are the position x in the quadrant;
//   - odd quadrants use the ones' complement of x (mirror image), quadrants 2 and 3 negate;
//   - x's top 6 bits pick one of 64 segments, the low 17 bits xl interpolate:
//       acc = C0 * 2^12 + C1 * xl + C2 * sq(xl)        in units of 2^-37,
//     where sq(xl) is xl^2 from a truncated squarer that keeps only the partial products of weight
//     2^19 and above, counted in units of 2^19;
//   - acc * 2^-37 is truncated (rounded toward zero) to a float.
// MUFU.COS is modelled as MUFU.SIN a quarter turn later (quadrant + 1); the fixtures contain no
// cosines (torch only uses them for tensors of more than 270336 elements), so that part is the
// natural hardware symmetry, not something the data confirmed.
struct SineSegment {
    int64_t c0;  // units of 2^-25
    int64_t c1;  // units of 2^-37 per xl step
    int64_t c2;  // units of 2^-37 per 2^19 of truncated xl^2
};

constexpr SineSegment kSineTable[64] = {
    {0, 25737, -14}, {823463, 25730, -48},
    {1646436, 25706, -76}, {2468414, 25668, -110},
    {3288906, 25613, -137}, {4107418, 25544, -171},
    {4923453, 25459, -201}, {5736526, 25358, -229},
    {6546141, 25243, -262}, {7351816, 25112, -292},
    {8153060, 24966, -322}, {8949394, 24805, -352},
    {9740335, 24629, -381}, {10525413, 24438, -410},
    {11304145, 24233, -441}, {12076070, 24013, -470},
    {12840725, 23778, -497}, {13597643, 23529, -525},
    {14346367, 23266, -553}, {15086452, 22989, -581},
    {15817450, 22698, -608}, {16538916, 22394, -637},
    {17250422, 22076, -664}, {17951542, 21744, -688},
    {18641840, 21400, -715}, {19320916, 21042, -738},
    {19988350, 20672, -763}, {20643746, 20290, -790},
    {21286703, 19895, -812}, {21916841, 19489, -839},
    {22533776, 19070, -859}, {23137138, 18640, -881},
    {23726565, 18199, -904}, {24301698, 17747, -926},
    {24862194, 17284, -946}, {25407711, 16811, -967},
    {25937924, 16328, -988}, {26452518, 15834, -1004},
    {26951170, 15332, -1025}, {27433593, 14820, -1043},
    {27899488, 14299, -1059}, {28348583, 13769, -1074},
    {28780594, 13232, -1093}, {29195273, 12686, -1107},
    {29592364, 12133, -1123}, {29971632, 11572, -1136},
    {30332846, 11004, -1148}, {30675788, 10430, -1162},
    {31000253, 9849, -1172}, {31306042, 9263, -1185},
    {31592974, 8671, -1196}, {31860879, 8073, -1203},
    {32109590, 7471, -1213}, {32338961, 6864, -1220},
    {32548845, 6254, -1230}, {32739132, 5639, -1236},
    {32909694, 5021, -1242}, {33060432, 4400, -1247},
    {33191257, 3776, -1250}, {33302087, 3151, -1258},
    {33392857, 2523, -1260}, {33463517, 1893, -1260},
    {33514014, 1263, -1263}, {33544326, 632, -1265},
};

constexpr int kPositionBits = 23;  // x: fraction of a quadrant
constexpr int kLowBits = 17;       // xl: position inside a segment
constexpr int kSquarerCut = 19;    // lowest partial-product weight the squarer keeps
constexpr int kAccFractionBits = 37;

// xl^2 keeping only the partial products b_i*b_j*2^(i+j) of weight >= 2^kSquarerCut, in units of
// 2^kSquarerCut (every kept term is a multiple of that, so the division is exact).
int64_t truncated_square(int64_t xl) {
    int64_t sum = 0;
    for (int i = 0; i < kLowBits; ++i) {
        if (!((xl >> i) & 1)) continue;
        if (2 * i >= kSquarerCut) sum += int64_t{1} << (2 * i);  // b_i^2 2^(2i)
        // Cross terms 2 b_i b_j 2^(i+j) for j > i with i + j + 1 >= cut, all at once.
        const int lowest_j = std::max(i + 1, kSquarerCut - 1 - i);
        sum += (xl >> lowest_j << lowest_j) << (i + 1);
    }
    return sum >> kSquarerCut;
}

// acc * 2^-37 rounded toward zero to float; acc >= 0.
float fixed_to_float_toward_zero(int64_t acc) {
    if (acc == 0) return 0.0f;
    int top = 63;
    while (!((acc >> top) & 1)) --top;
    const int drop = top >= 24 ? top - 23 : 0;  // keep 24 significant bits
    const int64_t kept = acc >> drop;
    return std::ldexp(static_cast<float>(kept), drop - kAccFractionBits);  // exact: kept < 2^24
}

// Sine at quadrant q (0..3, already including any cosine shift) and position x.
float table_sine(int quadrant, uint32_t x) {
    const uint32_t mask = (1u << kPositionBits) - 1;
    if (quadrant & 1) x = ~x & mask;
    const SineSegment& seg = kSineTable[x >> kLowBits];
    const int64_t xl = x & ((1u << kLowBits) - 1);
    const int64_t acc = seg.c0 * (int64_t{1} << (kAccFractionBits - 25)) + seg.c1 * xl + seg.c2 * truncated_square(xl);
    const float magnitude = fixed_to_float_toward_zero(acc);
    return quadrant >= 2 ? -magnitude : magnitude;
}

// The angle in units of 2^-25 revolutions (truncated), reduced to one turn.
uint32_t angle_units(float revolutions) {
    const double scaled = std::floor(static_cast<double>(revolutions) * 33554432.0);  // exact
    return static_cast<uint32_t>(static_cast<uint64_t>(scaled) & ((1u << 25) - 1));
}

}  // namespace

float mufu_sin(float revolutions) {
    const uint32_t a = angle_units(revolutions);
    return table_sine(static_cast<int>(a >> kPositionBits), a & ((1u << kPositionBits) - 1));
}

float mufu_cos(float revolutions) {
    const uint32_t a = angle_units(revolutions);
    return table_sine(static_cast<int>(((a >> kPositionBits) + 1) & 3), a & ((1u << kPositionBits) - 1));
}

float mul_round_toward_zero(float a, float b) {
    const double exact = static_cast<double>(a) * static_cast<double>(b);  // 48-bit product: exact
    float r = static_cast<float>(exact);
    if (std::fabs(static_cast<double>(r)) > std::fabs(exact)) r = std::nextafter(r, 0.0f);
    return r;
}

void cuda_sincosf_approx(float x, float* sin_out, float* cos_out) {
    // nvcc lowers __sincosf to FMUL.RZ by the float nearest 1/(2*pi), then MUFU.SIN and MUFU.COS.
    const float revolutions = mul_round_toward_zero(x, fp::from_bits(0x3e22f983u));
    *sin_out = mufu_sin(revolutions);
    *cos_out = mufu_cos(revolutions);
}

float cuda_logf(float x) {
    // libdevice's __nv_logf as nvcc emits it (PTX constants quoted as float bit patterns).
    float exponent_adjust = 0.0f;
    if (x < fp::from_bits(0x00800000u)) {  // subnormal: scale into the normal range
        x = x * 8388608.0f;
        exponent_adjust = -23.0f;
    }
    const int32_t ix = static_cast<int32_t>(fp::bits(x));
    const int32_t e = (ix - 0x3f2aaaab) & static_cast<int32_t>(0xff800000u);  // mantissa into [2/3, 4/3)
    const float m = fp::from_bits(static_cast<uint32_t>(ix - e));
    const float k = std::fma(static_cast<float>(e), fp::from_bits(0x34000000u), exponent_adjust);
    const float f = m - 1.0f;
    constexpr uint32_t kPoly[] = {0xBE055027u, 0x3E1039F6u, 0xBDF8CDCCu, 0x3E0F2955u, 0xBE2AD8B9u,
                                  0x3E4CED0Bu, 0xBE7FFF22u, 0x3EAAAA78u, 0xBF000000u};
    float p = fp::from_bits(kPoly[0]);
    for (int i = 1; i < 9; ++i) p = std::fma(p, f, fp::from_bits(kPoly[i]));
    p = f * p;
    p = std::fma(p, f, f);
    float r = std::fma(k, fp::from_bits(0x3F317218u), p);  // + k * ln 2
    if (!(x > 0.0f) || std::isinf(x)) {  // the special cases nvcc handles after the polynomial
        if (x == 0.0f) r = -INFINITY;
        else if (std::isinf(x) && x > 0.0f) r = INFINITY;
        else r = NAN;
    }
    return r;
}

}  // namespace kiln
