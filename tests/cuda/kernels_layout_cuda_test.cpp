// The data-movement kernels of kernels.h (upsample_nearest2x, concat_channels, nchw_to_nlc,
// nlc_to_nchw, and the channels-last convolution's to_nhwc, from_nhwc, filter_to_krsc) against the reference
// ops, in F32, F16 and BF16. They only move elements, so the bound is
// 0: every output must be its source's bits (compared after widening to float, which is exact), every
// element must be written and nothing past the end. Shapes: single elements, sides of 1, sizes just off
// the 32 x 32 transpose tile (31, 33, 65, 97), Stable Diffusion's 320 x 4096, and more planes or tiles
// than one grid dimension holds (70001).
#include "cuda/kernel_test_support.h"
#include "ops/ref/ref_ops.h"

namespace kiln::cuda::test {
namespace {

std::string dims(std::initializer_list<int64_t> d) {
    std::string s;
    for (int64_t v : d) {
        if (!s.empty()) s += 'x';
        s += std::to_string(v);
    }
    return s;
}

TEST(KernelsCuda, UpsampleNearest2xCopiesEachPixelTwiceTwice) {
    KILN_SKIP_WITHOUT_GPU();
    const int64_t shapes[][3] = {{1, 1, 1}, {3, 31, 33}, {2, 7, 1}, {1, 1, 65}, {40000, 1, 3}};  // planes, h, w
    for (DType type : kStorageTypes)
        for (const auto& s : shapes) {
            const int64_t planes = s[0], h = s[1], w = s[2];
            const Values x = random_values(type, size_t(planes * h * w), uint64_t(planes + h * w), -2, 2);
            DeviceBuffer in(x);
            Output out(type, size_t(planes * 4 * h * w));
            upsample_nearest2x(in.get(), out.get(), type, planes, h, w, nullptr);
            const Tensor ref = ops::ref::upsample_nearest2x(x.tensor({planes, 1, h, w}));
            expect_identical(label(type, "upsample_nearest2x " + dims({planes, h, w})), out.values(), ref.values());
            EXPECT_TRUE(out.guard_intact());
        }
}

TEST(KernelsCuda, ConcatChannelsPutsAThenBPerImage) {
    KILN_SKIP_WITHOUT_GPU();
    // n, ca, cb, inner; the last three move 16 bytes per copy (12 values: float only)
    const int64_t shapes[][4] = {{1, 1, 1, 1},     {2, 3, 5, 31}, {1, 33, 1, 65}, {2, 0, 3, 7}, {2, 4, 0, 5},
                                 {70001, 1, 2, 1}, {2, 3, 5, 64}, {2, 0, 4, 8},   {3, 2, 2, 12}};
    for (DType type : kStorageTypes)
        for (const auto& s : shapes) {
            const int64_t n = s[0], ca = s[1], cb = s[2], inner = s[3];
            const Values a = random_values(type, size_t(n * ca * inner), uint64_t(n + ca), -2, 2);
            const Values b = random_values(type, size_t(n * cb * inner), uint64_t(n + cb + 99), -2, 2);
            DeviceBuffer da(a), db(b);
            Output out(type, size_t(n * (ca + cb) * inner));
            // An empty input may be null.
            concat_channels(ca ? da.get() : nullptr, cb ? db.get() : nullptr, out.get(), type, n, ca, cb, inner, nullptr);
            const Tensor ref = ops::ref::concat_channels(a.tensor({n, ca, inner}), b.tensor({n, cb, inner}));
            expect_identical(label(type, "concat_channels " + dims({n, ca, cb, inner})), out.values(), ref.values());
            EXPECT_TRUE(out.guard_intact());
        }
}

TEST(KernelsCuda, NchwNlcTransposesBothWays) {
    KILN_SKIP_WITHOUT_GPU();
    const int64_t shapes[][3] = {{1, 1, 1},  {2, 31, 33}, {1, 320, 4096}, {3, 33, 1},
                                 {1, 1, 77}, {2, 65, 97}, {70001, 3, 2}};  // n, c, hw
    for (DType type : kStorageTypes)
        for (const auto& s : shapes) {
            const int64_t n = s[0], c = s[1], hw = s[2];
            const Values x = random_values(type, size_t(n * c * hw), uint64_t(n * 7 + c * hw), -2, 2);
            DeviceBuffer in(x);
            Output nlc(type, x.size());
            nchw_to_nlc(in.get(), nlc.get(), type, n, c, hw, nullptr);
            expect_identical(label(type, "nchw_to_nlc " + dims({n, c, hw})), nlc.values(),
                             ops::ref::nchw_to_nlc(x.tensor({n, c, hw, 1})).values());
            EXPECT_TRUE(nlc.guard_intact());

            Output nchw(type, x.size());  // x read as [n, hw, c]
            nlc_to_nchw(in.get(), nchw.get(), type, n, hw, c, nullptr);
            expect_identical(label(type, "nlc_to_nchw " + dims({n, hw, c})), nchw.values(),
                             ops::ref::nlc_to_nchw(x.tensor({n, hw, c}), hw, 1).values());
            EXPECT_TRUE(nchw.guard_intact());
        }
}

// The channels-last convolution's layouts. A plain move is bit-exact; from_nhwc's bias addition is one float
// sum rounded once, as the host computes it; to_nhwc's GroupNorm+SiLU is the same float expression as
// im2col's fused norm, so it must equal im2col's column matrix of a 1x1 convolution (itself tested against the
// reference in kernels_im2col_cuda_test.cpp), transposed.
TEST(KernelsCuda, ChannelsLastLayoutsAroundAConvolution) {
    KILN_SKIP_WITHOUT_GPU();
    // {1, 320, 4096}, {2, 128, 64} and {2, 640, 192}: whole 64 x 64 tiles (the 16-bit fast path, both ways).
    const int64_t shapes[][3] = {{1, 1, 1},    {2, 31, 33}, {2, 64, 65},  {1, 320, 4096},
                                 {3, 33, 1},   {1, 4, 4096}, {2, 128, 64}, {2, 640, 192}};
    for (DType type : kStorageTypes)
        for (const auto& s : shapes) {
            const int64_t n = s[0], c = s[1], hw = s[2];
            const Values x = random_values(type, size_t(n * c * hw), uint64_t(n * 5 + c + hw), -3, 3);
            const Values bias = random_values(type, size_t(c), uint64_t(c + 17), -1, 1);
            DeviceBuffer dx(x), db(bias);
            Output nhwc(type, x.size());
            to_nhwc(dx.get(), nhwc.get(), type, n, c, hw, nullptr, nullptr);
            expect_identical(label(type, "to_nhwc " + dims({n, c, hw})), nhwc.values(),
                             ops::ref::nchw_to_nlc(x.tensor({n, c, hw, 1})).values());
            EXPECT_TRUE(nhwc.guard_intact());

            Output back(type, x.size());  // x read as [n, hw, c]
            from_nhwc(dx.get(), db.get(), back.get(), type, n, hw, c, nullptr);
            std::vector<float> sum = ops::ref::nlc_to_nchw(x.tensor({n, hw, c}), hw, 1).values();
            for (size_t i = 0; i < sum.size(); ++i) sum[i] += bias.f[i / size_t(hw) % size_t(c)];
            expect_identical(label(type, "from_nhwc + bias " + dims({n, hw, c})), back.values(), rounded(type, sum).f);
            EXPECT_TRUE(back.guard_intact());

            for (int groups : {1, int(c)}) {
                const Values gamma = random_values(type, size_t(c), uint64_t(c + 3), 0.5, 1.5);
                const Values beta = random_values(type, size_t(c), uint64_t(c + 4), -0.5, 0.5);
                DeviceBuffer dg(gamma), dbeta(beta), stats(size_t(n * groups) * 2 * sizeof(float));
                group_norm_stats(dx.get(), type, n, c, hw, groups, 1e-5f, stats.as<float>(), nullptr);
                const Im2colNorm norm{stats.as<float>(), dg.get(), dbeta.get(), groups};
                Output normed(type, x.size());
                to_nhwc(dx.get(), normed.get(), type, n, c, hw, &norm, nullptr);
                std::vector<float> want;
                for (int64_t img = 0; img < n; ++img) {
                    const Im2colNorm one{stats.as<float>() + img * groups * 2, dg.get(), dbeta.get(), groups};
                    Output col(type, size_t(c * hw));
                    im2col(static_cast<const char*>(dx.get()) + img * c * hw * int64_t(dtype_size(type)), col.get(),
                           type, c, hw, 1, 1, 1, 0, hw, 1, 0, hw, &one, nullptr);
                    const std::vector<float> t = ops::ref::nchw_to_nlc(Tensor({1, c, hw, 1}, col.values())).values();
                    want.insert(want.end(), t.begin(), t.end());
                }
                expect_identical(label(type, "to_nhwc + group_norm/silu " + dims({n, c, hw}) + " groups " +
                                                 std::to_string(groups)),
                                 normed.values(), want);
                EXPECT_TRUE(normed.guard_intact());
            }
        }
    // The NHWC route's fusions: an input read as its nearest-2x upsampling equals the transpose of the
    // upsampled copy, and accumulating equals adding the rounded result (add_'s sum), bit for bit.
    const int64_t small[][4] = {{1, 3, 5, 7}, {2, 64, 16, 16}, {1, 5, 1, 1}};  // n, c, h, w of the small image
    for (DType type : kStorageTypes)
        for (const auto& sm : small) {
            const int64_t n = sm[0], c = sm[1], h = sm[2], w = sm[3], hw2 = 4 * h * w;
            const Values x = random_values(type, size_t(n * c * h * w), uint64_t(n + c + h + w), -3, 3);
            const Values big = rounded(type, ops::ref::upsample_nearest2x(x.tensor({n, c, h, w})).values());
            DeviceBuffer dx(x), dbig(big);
            Output direct(type, big.size()), fused(type, big.size());
            to_nhwc(dbig.get(), direct.get(), type, n, c, hw2, nullptr, nullptr);
            to_nhwc(dx.get(), fused.get(), type, n, c, hw2, nullptr, nullptr, 2 * w);
            expect_identical(label(type, "to_nhwc of an upsampled " + dims({n, c, h, w})), fused.values(), direct.values());
            EXPECT_TRUE(fused.guard_intact());

            const Values acc = random_values(type, big.size(), uint64_t(n * 3 + c), -2, 2);
            const Values bias = random_values(type, size_t(c), uint64_t(c + 5), -1, 1);
            DeviceBuffer dacc(acc), dbias(bias);
            from_nhwc(dbig.get(), dbias.get(), dacc.get(), type, n, hw2, c, nullptr, true);  // big read as [n, hw, c]
            Output plain(type, big.size());
            from_nhwc(dbig.get(), dbias.get(), plain.get(), type, n, hw2, c, nullptr);
            const std::vector<float> p = plain.values();
            std::vector<float> want(acc.size());
            for (size_t i = 0; i < want.size(); ++i) want[i] = acc.f[i] + p[i];
            const std::vector<uint8_t> got_bytes = dacc.download(acc.bytes.size());
            std::vector<float> got(acc.size());
            decode_to_float(type, got_bytes.data(), got.data(), got.size());
            expect_identical(label(type, "from_nhwc accumulating " + dims({n, hw2, c})), got, rounded(type, want).f);
        }
    const int64_t filters[][3] = {{1, 1, 1}, {3, 5, 9}, {320, 320, 9}, {7, 33, 1}, {1280, 2560, 9},
                                    {4, 1001, 9}};  // cout, cin, taps; the last: slabs of 334, 334 and 333
    for (DType type : kStorageTypes)
        for (const auto& f : filters) {
            const int64_t cout = f[0], cin = f[1], taps = f[2];
            const Values w = random_values(type, size_t(cout * cin * taps), uint64_t(cout + cin), -1, 1);
            DeviceBuffer dw(w);
            Output out(type, w.size());
            filter_to_krsc(dw.get(), out.get(), type, cout, cin, taps, nullptr);
            // [cout][cin][taps] -> [cout][taps][cin] is a transpose of each output channel's [cin, taps] block.
            expect_identical(label(type, "filter_to_krsc " + dims({cout, cin, taps})), out.values(),
                             ops::ref::nchw_to_nlc(w.tensor({cout, cin, taps, 1})).values());
            EXPECT_TRUE(out.guard_intact());
        }
}

}  // namespace
}  // namespace kiln::cuda::test
