// softmax_lastdim, layer_norm and group_norm (statistics and apply, with and without SiLU) against the
// reference ops in F32, F16 and BF16. Rows and groups of 1 value, lengths around the block sizes (31, 33,
// 1025, 1281), Stable Diffusion's (77 x 320, 320 channels in 32 groups over 32 x 32, a VAE-like group of
// 262144 values), more rows or planes than one grid dimension holds (70001), a constant row or group
// (variance 0: the output is beta up to the mean's error) and one of mean 20 and spread 0.05 (where
// E[x^2] - E[x]^2 in float would lose every digit).
// Bounds (kernel_test_support.h: bound(), rel_u(), sum_depth() and the normalisation error model):
//  - softmax: with d_i = x_i - max (rounded: |d_i| u on the exponent) and expf's 4u, each e_i is off by
//    eps_i = rel_u(4 + |d_i|); their positive float sum by max eps + rel_u(D); the division u. So
//    f_rel = rel_u((4 + |d_i|) + (4 + max |d|) + D + 1); exps that underflow below 2^-126 give f_abs 2^-126.
//  - layer_norm and group_norm_apply: norm_error() of the row's or group's moments; the statistics
//    themselves (group_norm_stats) within delta of the mean and eps_r of 1/sqrt(var + eps).
#include "cuda/kernel_test_support.h"
#include "ops/ref/ref_ops.h"

namespace kiln::cuda::test {
namespace {

TEST(KernelsCuda, SoftmaxMatchesTheReference) {
    KILN_SKIP_WITHOUT_GPU();
    struct Shape2 {
        int64_t rows, cols;
        double lo, hi;
    };
    // Rows of 2049 to 16384 values are held in registers (16, 32 or 64 a thread); the others loop.
    const Shape2 shapes[] = {{1, 1, -8, 8},    {3, 31, -8, 8},    {5, 33, -8, 8},      {2, 1025, -8, 8},
                             {8, 4096, -8, 8}, {1, 77, -8, 8},    {4, 300, -60, 60},   {70001, 3, -8, 8},
                             {3, 2049, -8, 8}, {2, 4097, -8, 8},  {3, 8191, -20, 20},  {2, 16384, -8, 8},
                             {1, 16385, -8, 8}};
    // softmax_lastdim reads and writes `type`; softmax_f32_rows_to reads float32 and writes `type`.
    for (bool from_f32 : {false, true})
        for (DType type : kStorageTypes)
            for (const Shape2& s : shapes) {
                const DType in_type = from_f32 ? DType::F32 : type;
                const Values x = random_values(in_type, size_t(s.rows * s.cols), uint64_t(s.rows * 31 + s.cols), s.lo,
                                               s.hi);
                DeviceBuffer in(x);
                Output out(type, x.size());
                if (from_f32)
                    softmax_f32_rows_to(in.as<float>(), out.get(), type, s.rows, s.cols, nullptr);
                else
                    softmax_lastdim(in.get(), out.get(), type, s.rows, s.cols, nullptr);
                const Tensor ref = ops::ref::softmax_lastdim(x.tensor({s.rows, s.cols}));
                std::vector<double> bounds(x.size());
                const double depth = sum_depth(s.cols);
                for (int64_t r = 0; r < s.rows; ++r) {
                    const float* row = x.f.data() + r * s.cols;
                    const double mx = *std::max_element(row, row + s.cols), mn = *std::min_element(row, row + s.cols);
                    for (int64_t j = 0; j < s.cols; ++j) {
                        const size_t i = size_t(r * s.cols + j);
                        const double f_rel = rel_u((4 + (mx - row[j])) + (4 + (mx - mn)) + depth + 1);
                        bounds[i] = bound(type, ref[int64_t(i)], f_rel, 0x1p-126);
                    }
                }
                expect_within(label(type, std::string(from_f32 ? "softmax from f32 " : "softmax ") +
                                              std::to_string(s.rows) + "x" + std::to_string(s.cols)),
                              out.values(), ref.values(), bounds);
                EXPECT_TRUE(out.guard_intact());
            }
}

// Random values in [-3, 3), with row or group `constant_at` set to 0.3 and `offset_at` to 20 + [-0.05, 0.05).
std::vector<float> norm_input(size_t count, size_t block, uint64_t seed, size_t constant_at, size_t offset_at) {
    std::vector<float> v = random_values(DType::F32, count, seed, -3, 3).f;
    Rng rng{seed + 1};
    for (size_t b = 0; b * block < count; ++b)
        for (size_t i = b * block; i < (b + 1) * block && i < count; ++i) {
            if (b == constant_at) v[i] = 0.3f;
            if (b == offset_at) v[i] = float(20 + 0.1 * (rng.unit() - 0.5));
        }
    return v;
}

TEST(KernelsCuda, LayerNormMatchesTheReference) {
    KILN_SKIP_WITHOUT_GPU();
    // rows, cols: odd widths, SD's 320 to 2048 (a warp per row up to 768: 8, 16 or 24 values a lane; 16-bit rows
    // of whole 8-value groups up to 2048, a block of 8 values a thread, some threads idle at 776; other 16-bit
    // rows of whole quads up to 1280, 40 a lane; a block of plain sums past them).
    const int64_t shapes[][2] = {{1, 1},   {3, 31},   {2, 33},    {77, 320},  {3, 1281},
                                 {70001, 5}, {9, 640}, {5, 2048}, {4, 2049}, {2, 256},
                                 {6, 768},   {2, 769}, {3, 257},  {5, 1280}, {3, 1276}, {2, 772},
                                 {3, 776},   {2, 1024},
                                 {512, 1280},  // SD 1.5's 16x16 level
                                 {8193, 320}};  // SD 1.5's 64x64 level and one more row: many blocks
    const float eps = 1e-5f;
    for (DType type : kStorageTypes)
        for (const auto& s : shapes) {
            const int64_t rows = s[0], cols = s[1];
            const Values x = rounded(type, norm_input(size_t(rows * cols), size_t(cols), uint64_t(rows + cols), 1, 2));
            const Values gamma = random_values(type, size_t(cols), uint64_t(cols), 0.5, 1.5);
            const Values beta = random_values(type, size_t(cols), uint64_t(cols + 1), -0.5, 0.5);
            DeviceBuffer dx(x), dg(gamma), db(beta);
            Output out(type, x.size());
            layer_norm(dx.get(), dg.get(), db.get(), out.get(), type, rows, cols, eps, nullptr);
            const Tensor ref = ops::ref::layer_norm(x.tensor({rows, cols}), gamma.tensor({cols}), beta.tensor({cols}), eps);
            std::vector<double> bounds(x.size());
            for (int64_t r = 0; r < rows; ++r) {
                const Moments mo = moments_of(x.f.data() + r * cols, cols);
                const StatsModel sm = stats_model(mo, eps, sum_depth(cols));
                for (int64_t j = 0; j < cols; ++j) {
                    const size_t i = size_t(r * cols + j);
                    const double d = x.f[i] - mo.mean, y = d * sm.r * gamma.f[size_t(j)] + beta.f[size_t(j)];
                    const ErrorTerms t = norm_error(sm, d, gamma.f[size_t(j)], y, false);
                    bounds[i] = bound(type, ref[int64_t(i)], t.f_rel, t.f_abs);
                }
            }
            expect_within(label(type, "layer_norm " + std::to_string(rows) + "x" + std::to_string(cols)), out.values(),
                          ref.values(), bounds);
            EXPECT_TRUE(out.guard_intact());
        }
}

struct GroupCase {
    int64_t n, c, hw;
    int groups;
    float eps;
};

TEST(KernelsCuda, GroupNormStatsAndApplyMatchTheReference) {
    KILN_SKIP_WITHOUT_GPU();
    const GroupCase cases[] = {{1, 1, 1, 1, 1e-5f},        {2, 6, 31, 3, 1e-6f},   {1, 32, 33, 32, 1e-5f},
                               {2, 64, 17 * 19, 32, 1e-6f}, {1, 320, 1024, 32, 1e-5f}, {1, 128, 65536, 32, 1e-6f},
                               {1, 70000, 2, 7, 1e-5f},     {2, 64, 123 * 97, 8, 1e-5f},
                               {1, 3, 12347, 3, 1e-5f},  // chunked in 16-byte loads, and (odd groups) in 1-value
                               {1, 1, 8193, 1, 1e-5f},   // a chunk of 1 value after whole ones
                               {1, 1, 12300, 1, 1e-5f},  // a multiple of 4, not 8: 16-byte loads for float only
                               {1, 3, 700000, 1, 1e-5f},  // 4102 chunks: the finish's lanes take 129 or 128
                               {2, 320, 4096, 32, 1e-5f}};  // SD 1.5's 64x64 level: 80 chunks a group
    for (DType type : kStorageTypes)
        for (const GroupCase& gc : cases) {
            const std::string what = "group_norm " + std::to_string(gc.n) + "x" + std::to_string(gc.c) + "x" +
                                     std::to_string(gc.hw) + " in " + std::to_string(gc.groups);
            const int64_t group_size = gc.c / gc.groups * gc.hw, groups_total = gc.n * gc.groups;
            const Values x = rounded(type, norm_input(size_t(gc.n * gc.c * gc.hw), size_t(group_size),
                                                      uint64_t(gc.c + gc.hw), 0, 1));
            const Values gamma = random_values(type, size_t(gc.c), uint64_t(gc.c), 0.5, 1.5);
            const Values beta = random_values(type, size_t(gc.c), uint64_t(gc.c + 1), -0.5, 0.5);
            DeviceBuffer dx(x), dg(gamma), db(beta), stats(size_t(groups_total) * 2 * sizeof(float));
            std::vector<StatsModel> models;
            std::vector<Moments> moments;
            for (int64_t g = 0; g < groups_total; ++g) {
                moments.push_back(moments_of(x.f.data() + g * group_size, group_size));
                models.push_back(stats_model(moments.back(), gc.eps, run_sum_depth(group_size)));
            }
            // One block per group, then (where the groups are large enough) chunks through a workspace: the
            // same bound holds for both (group_norm.cu); the apply below uses the last statistics made.
            const int64_t workspace_floats = group_norm_stats_workspace(gc.n, gc.c, gc.hw, gc.groups);
            for (bool chunked : {false, true}) {
                if (chunked && workspace_floats == 0) continue;
                DeviceBuffer workspace(size_t(std::max<int64_t>(workspace_floats, 1)) * sizeof(float));
                group_norm_stats(dx.get(), type, gc.n, gc.c, gc.hw, gc.groups, gc.eps, stats.as<float>(), nullptr,
                                 chunked ? workspace.as<float>() : nullptr);
                std::vector<float> got_stats(size_t(groups_total) * 2);
                const std::vector<uint8_t> sb = stats.download(got_stats.size() * sizeof(float));
                std::memcpy(got_stats.data(), sb.data(), sb.size());
                const std::string how = chunked ? " (chunked)" : "";
                for (int64_t g = 0; g < groups_total; ++g) {
                    const StatsModel& sm = models[size_t(g)];
                    EXPECT_LE(std::fabs(got_stats[size_t(2 * g)] - moments[size_t(g)].mean), sm.delta)
                        << label(type, what) << how << ": mean of group " << g;
                    EXPECT_LE(std::fabs(got_stats[size_t(2 * g + 1)] - sm.r), sm.eps_r * sm.r)
                        << label(type, what) << how << ": rstd of group " << g;
                }
            }

            for (bool silu : {false, true}) {
                Output out(type, x.size());
                group_norm_apply(dx.get(), stats.as<float>(), dg.get(), db.get(), out.get(), type, gc.n, gc.c, gc.hw,
                                 gc.groups, silu, nullptr);
                Tensor ref = ops::ref::group_norm(x.tensor({gc.n, gc.c, gc.hw}), gc.groups, gamma.tensor({gc.c}),
                                                  beta.tensor({gc.c}), gc.eps);
                if (silu) ops::ref::silu_(ref);
                std::vector<double> bounds(x.size());
                for (int64_t g = 0; g < groups_total; ++g)
                    for (int64_t k = 0; k < group_size; ++k) {
                        const int64_t i = g * group_size + k, ch = (g % gc.groups) * (gc.c / gc.groups) + k / gc.hw;
                        const double d = x.f[size_t(i)] - moments[size_t(g)].mean;
                        const double y = d * models[size_t(g)].r * gamma.f[size_t(ch)] + beta.f[size_t(ch)];
                        const ErrorTerms t = norm_error(models[size_t(g)], d, gamma.f[size_t(ch)], y, silu);
                        bounds[size_t(i)] = bound(type, ref[i], t.f_rel, t.f_abs);
                    }
                expect_within(label(type, what + (silu ? " + silu" : "")), out.values(), ref.values(), bounds);
                EXPECT_TRUE(out.guard_intact());

                if (gc.c == 64) {  // in place (out == x) gives the same values
                    DeviceBuffer inplace(x);
                    group_norm_apply(inplace.get(), stats.as<float>(), dg.get(), db.get(), inplace.get(), type, gc.n,
                                     gc.c, gc.hw, gc.groups, silu, nullptr);
                    EXPECT_EQ(inplace.download(x.bytes.size()), out.bytes()) << label(type, what) << " in place";
                }
            }
        }
}

}  // namespace
}  // namespace kiln::cuda::test
