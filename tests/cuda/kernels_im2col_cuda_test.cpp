// im2col (kernels.h) against the definition of the column matrix, which ops/im2col.cpp fills the same
// way: row (ch * k + i) * k + j, column p holds x[ch, oy * stride - padding + i, ox * stride - padding + j]
// for output pixel first + p = oy * ow + ox, and 0 where that falls outside the image. Shapes: a 1 x 1
// image under a 3 x 3 kernel, odd sides, strides 2 and 3, an even kernel, a kernel larger than the image,
// pixel ranges starting and ending mid-row, more channels than one grid dimension holds.
// Bounds:
//  - plain: 0. Every value is a copy; the padding must be 0.
//  - with the norm: each in-image value is silu of the normalised input, the statistics coming from
//    group_norm_stats: norm_error(.., silu) of its group (kernel_test_support.h); the reference applies
//    ops::ref::group_norm then silu_ to the image and gathers. Padding stays exactly 0 (bound 0).
//  - that the columns are the ones a convolution wants: W [O, C*k*k] times the kernel's columns, summed
//    in double, against ops::ref::conv2d: both sides sum exact float products in double (each off by at
//    most C k k 2^-53 sum |w x|), and the reference rounds to float (2u |ref| with its own arithmetic).
#include "cuda/kernel_test_support.h"
#include "ops/ref/ref_ops.h"

namespace kiln::cuda::test {
namespace {

struct ConvCase {
    int64_t c, h, w;
    int k, stride, padding;
    int64_t first, count;  // count < 0: every output pixel from first on
    int groups;            // for the norm cases

    int64_t oh() const { return (h + 2 * padding - k) / stride + 1; }
    int64_t ow() const { return (w + 2 * padding - k) / stride + 1; }
    int64_t pixels() const { return count >= 0 ? count : oh() * ow() - first; }
    std::string name() const {
        char buf[160];
        std::snprintf(buf, sizeof buf, "c%lld %lldx%lld k%d s%d p%d pixels %lld+%lld", (long long)c, (long long)h,
                      (long long)w, k, stride, padding, (long long)first, (long long)pixels());
        return buf;
    }
};

// The column matrix of `src` [c, h, w] by the definition; `source`, when given, gets each entry's index
// into src, or -1 for padding.
std::vector<float> gather(const std::vector<float>& src, const ConvCase& cc, std::vector<int64_t>* source = nullptr) {
    const int64_t rows = cc.c * cc.k * cc.k, cols = cc.pixels();
    std::vector<float> col(size_t(rows * cols), 0.0f);
    if (source) source->assign(col.size(), -1);
    for (int64_t ch = 0; ch < cc.c; ++ch)
        for (int i = 0; i < cc.k; ++i)
            for (int j = 0; j < cc.k; ++j)
                for (int64_t p = 0; p < cols; ++p) {
                    const int64_t q = cc.first + p, oy = q / cc.ow(), ox = q % cc.ow();
                    const int64_t iy = oy * cc.stride - cc.padding + i, ix = ox * cc.stride - cc.padding + j;
                    if (iy < 0 || iy >= cc.h || ix < 0 || ix >= cc.w) continue;
                    const size_t at = size_t(((ch * cc.k + i) * cc.k + j) * cols + p);
                    col[at] = src[size_t((ch * cc.h + iy) * cc.w + ix)];
                    if (source) (*source)[at] = (ch * cc.h + iy) * cc.w + ix;
                }
    return col;
}

const ConvCase kPlainCases[] = {
    {1, 1, 1, 3, 1, 1, 0, -1, 1},  {3, 7, 5, 3, 1, 1, 0, -1, 1},   {2, 9, 11, 3, 2, 1, 3, 17, 1},
    {4, 6, 6, 1, 1, 0, 0, -1, 1},  {5, 33, 31, 3, 1, 1, 100, 500, 1}, {3, 8, 8, 3, 2, 0, 0, -1, 1},
    {2, 5, 4, 4, 3, 2, 1, 3, 1},   {1, 1, 1, 1, 1, 0, 0, 1, 1},    {2, 3, 3, 5, 1, 2, 0, -1, 1},
    {4, 2, 3, 3, 1, 1, 0, -1, 1},  {70000, 2, 2, 1, 1, 0, 0, -1, 1}};

TEST(KernelsCuda, Im2colCopiesTheTapsAndZeroPads) {
    KILN_SKIP_WITHOUT_GPU();
    for (DType type : kStorageTypes)
        for (const ConvCase& cc : kPlainCases) {
            const Values x = random_values(type, size_t(cc.c * cc.h * cc.w), uint64_t(cc.c * 13 + cc.h * cc.w), -2, 2);
            DeviceBuffer dx(x);
            Output col(type, size_t(cc.c * cc.k * cc.k * cc.pixels()));
            im2col(dx.get(), col.get(), type, cc.c, cc.h, cc.w, cc.k, cc.stride, cc.padding, cc.oh(), cc.ow(), cc.first,
                   cc.pixels(), nullptr, nullptr);
            expect_identical(label(type, "im2col " + cc.name()), col.values(), gather(x.f, cc));
            EXPECT_TRUE(col.guard_intact()) << label(type, cc.name());
        }
}

TEST(KernelsCuda, Im2colColumnsMakeTheConvolution) {
    KILN_SKIP_WITHOUT_GPU();
    const ConvCase cases[] = {{3, 7, 5, 3, 1, 1, 0, -1, 1}, {2, 9, 11, 3, 2, 1, 0, -1, 1}, {2, 5, 4, 4, 3, 2, 0, -1, 1}};
    constexpr int64_t kOut = 4;
    for (const ConvCase& cc : cases) {
        const Values x = random_values(DType::F32, size_t(cc.c * cc.h * cc.w), uint64_t(cc.h), -2, 2);
        const Values w = random_values(DType::F32, size_t(kOut * cc.c * cc.k * cc.k), uint64_t(cc.w), -1, 1);
        DeviceBuffer dx(x);
        const int64_t rows = cc.c * cc.k * cc.k, pixels = cc.pixels();
        Output col(DType::F32, size_t(rows * pixels));
        im2col(dx.get(), col.get(), DType::F32, cc.c, cc.h, cc.w, cc.k, cc.stride, cc.padding, cc.oh(), cc.ow(), 0,
               pixels, nullptr, nullptr);
        const std::vector<float> cv = col.values();
        const Tensor ref = ops::ref::conv2d(x.tensor({1, cc.c, cc.h, cc.w}), w.tensor({kOut, cc.c, cc.k, cc.k}), nullptr,
                                            cc.stride, cc.padding);
        std::vector<float> got(size_t(kOut * pixels));
        std::vector<double> bounds(got.size());
        for (int64_t o = 0; o < kOut; ++o)
            for (int64_t p = 0; p < pixels; ++p) {
                double acc = 0, mag = 0;
                for (int64_t r = 0; r < rows; ++r) {
                    const double t = double(w.f[size_t(o * rows + r)]) * cv[size_t(r * pixels + p)];
                    acc += t;
                    mag += std::fabs(t);
                }
                const size_t i = size_t(o * pixels + p);
                got[i] = float(acc);  // float(acc) rounds once more: u |ref| on top of the reference's 2u
                bounds[i] = 3 * kU * std::fabs(ref[int64_t(i)]) * (1 + 4 * kU) + 2 * double(rows) * 0x1p-53 * mag + 0x1p-149;
            }
        expect_within("F32 im2col x W vs conv2d " + cc.name(), got, ref.values(), bounds);
    }
}

TEST(KernelsCuda, Im2colWithGroupNormSiluMatchesTheUnfusedReference) {
    KILN_SKIP_WITHOUT_GPU();
    const ConvCase cases[] = {{64, 17, 19, 3, 1, 1, 0, -1, 32},
                              {6, 9, 11, 3, 2, 1, 5, 20, 3},
                              {1, 1, 1, 3, 1, 1, 0, -1, 1},
                              {32, 33, 31, 3, 1, 1, 100, 700, 32},
                              {4, 6, 6, 1, 1, 0, 0, -1, 2}};
    const float eps = 1e-6f;
    for (DType type : kStorageTypes)
        for (const ConvCase& cc : cases) {
            const Values x = random_values(type, size_t(cc.c * cc.h * cc.w), uint64_t(cc.c + cc.h), -3, 3);
            const Values gamma = random_values(type, size_t(cc.c), uint64_t(cc.c), 0.5, 1.5);
            const Values beta = random_values(type, size_t(cc.c), uint64_t(cc.c + 1), -0.5, 0.5);
            DeviceBuffer dx(x), dg(gamma), db(beta), stats(size_t(cc.groups) * 2 * sizeof(float));
            group_norm_stats(dx.get(), type, 1, cc.c, cc.h * cc.w, cc.groups, eps, stats.as<float>(), nullptr);
            const Im2colNorm norm{stats.as<float>(), dg.get(), db.get(), cc.groups};
            Output col(type, size_t(cc.c * cc.k * cc.k * cc.pixels()));
            im2col(dx.get(), col.get(), type, cc.c, cc.h, cc.w, cc.k, cc.stride, cc.padding, cc.oh(), cc.ow(), cc.first,
                   cc.pixels(), &norm, nullptr);

            Tensor normed = ops::ref::group_norm(x.tensor({1, cc.c, cc.h, cc.w}), cc.groups, gamma.tensor({cc.c}),
                                                 beta.tensor({cc.c}), eps);
            ops::ref::silu_(normed);
            std::vector<int64_t> source;
            const std::vector<float> ref = gather(normed.values(), cc, &source);
            const int64_t plane = cc.h * cc.w, group_size = cc.c / cc.groups * plane;
            std::vector<Moments> moments;
            std::vector<StatsModel> models;
            for (int g = 0; g < cc.groups; ++g) {
                moments.push_back(moments_of(x.f.data() + g * group_size, group_size));
                models.push_back(stats_model(moments.back(), eps, run_sum_depth(group_size)));
            }
            std::vector<double> bounds(ref.size(), 0.0);  // padding: exactly 0
            for (size_t i = 0; i < ref.size(); ++i) {
                if (source[i] < 0) continue;
                const int64_t ch = source[i] / plane, g = source[i] / group_size;
                const double d = x.f[size_t(source[i])] - moments[size_t(g)].mean;
                const double y = d * models[size_t(g)].r * gamma.f[size_t(ch)] + beta.f[size_t(ch)];
                const ErrorTerms t = norm_error(models[size_t(g)], d, gamma.f[size_t(ch)], y, true);
                bounds[i] = bound(type, ref[i], t.f_rel, t.f_abs);
            }
            expect_within(label(type, "im2col + group_norm/silu " + cc.name() + " groups " + std::to_string(cc.groups)),
                          col.values(), ref, bounds);
            EXPECT_TRUE(col.guard_intact()) << label(type, cc.name());
        }
}

}  // namespace
}  // namespace kiln::cuda::test
