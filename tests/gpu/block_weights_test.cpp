// Block-format weights (Q8_0 ... Q6_K) on each GPU backend: kept as blocks in device memory (their block bytes,
// no more), dequantized on the device bit for bit as the host decodes them, and the products that take weights
// (linear, conv2d and the fused convolutions) with such a weight against the CPU's ops on the same blocks.
// Run once per GPU device (lavapipe's Vulkan in CI); none without one.
//
// Bounds: the host decodes the blocks to float32 and computes in float32; the device decodes the same blocks to
// the same float32 values (the first test, exactly) and rounds them once to the activation dtype t (u_s |w|
// per weight: u_s S over a sum, S the sum over absolute values), then computes as the float weights' tests in
// device_ops_test.cpp do. So each bound is that test's with one more storage rounding (factor + 1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>

#include "common/op_bounds.h"
#include "gpu_test_util.h"
#include "kiln/error.h"
#include "ops/cpu_q8_products.h"
#include "common/random_blocks.h"
#include "ops/ops.h"
#if KILN_HAS_VULKAN
#include "backends/vulkan/vulkan_backend.h"
#endif

using namespace kiln;

using kiln::test::abs_of;
using kiln::test::expect_close;

namespace {

constexpr DType kFormats[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                              DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q2_K, DType::Q3_K};

Tensor random(Shape shape, uint32_t seed, DType t, float lo = -1.0f, float hi = 1.0f) {
    return kiln::test::random_in(std::move(shape), seed, t, lo, hi);
}

// Random weights of `shape` quantized to `format` on the host (rows of whole blocks); for q2_K and q3_K random
// blocks (every code and sub-scale).
Tensor blocks(Shape shape, uint32_t seed, DType format) {
    if (format == DType::Q2_K || format == DType::Q3_K) return kiln::test::random_low_bit_blocks(std::move(shape), seed, format);
    return random(std::move(shape), seed, DType::F32).converted(format);
}

// The values bit for bit (NaN never appears: the blocks decode to finite values).
void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
    ASSERT_EQ(got.shape(), want.shape()) << what;
    EXPECT_EQ(std::memcmp(got.data(), want.data(), size_t(want.numel()) * 4), 0) << what;
}

int64_t device_bytes(const Backend& gpu) { return memory_stats().device(device_name(gpu.device())).total.current; }

// Input widths (values per weight row) of whole blocks: one block, an odd count of them.
std::vector<int64_t> widths(DType format) {
    const int64_t b = dtype_block_values(format);
    return b == 32 ? std::vector<int64_t>{32, 96} : std::vector<int64_t>{256, 768};
}

}  // namespace

class BlockWeights : public kiln::test::GpuTest {};
KILN_GPU_TEST_SUITE(BlockWeights);

// The blocks go to the device as they are (their bytes counted, nothing else), and come back, or widen there to
// each dtype the backend computes in, as the host's decoder's values (then rounded once to that dtype).
TEST_P(BlockWeights, StayBlocksAndDequantizeAsTheHost) {
    Backend& gpu = this->gpu();
    // 129 rows: several whole CTAs of the CUDA kernel (4096 values each), then a partial one.
    for (DType f : kFormats)
        for (int64_t rows : {1, 31, 33, 129})
            for (int64_t cols : widths(f)) {
                const std::string what = std::string(dtype_name(f)) + " " + std::to_string(rows) + "x" + std::to_string(cols);
                const Tensor w = blocks({rows, cols}, uint32_t(rows * 7 + cols), f);
                const int64_t before = device_bytes(gpu);
                const Tensor wd = w.to_device(gpu, f);
                EXPECT_EQ(device_bytes(gpu) - before, dtype_storage_bytes(f, rows * cols)) << what;
                EXPECT_EQ(wd.dtype(), f) << what;
                const Tensor want = w.to_f32();
                expect_same_bits(wd.to_host(), want, what + " to_host");
                for (DType t : kiln::test::gpu_dtypes(gpu)) {
                    const Tensor widened = wd.to_device(gpu, t);
                    expect_same_bits(widened.to_host(), want.converted(t).to_f32(), what + " as " + dtype_name(t));
                }
                EXPECT_EQ(device_bytes(gpu) - before, dtype_storage_bytes(f, rows * cols)) << what << ": copies freed";
                EXPECT_THROW(want.to_device(gpu, DType::F32).to_device(gpu, f), Error) << "quantizing on the device";
            }
}

namespace {

// Rows not multiples of the tiles (1, 31, 33), outputs of 1, 31 and 33 features.
void check_linear(Backend& gpu, DType f) {
    const ops::ScopedCpuQ8Products exact(ops::CpuQ8Products::Dequantize);  // CPU references: not int8
    for (DType t : kiln::test::gpu_dtypes(gpu))
        for (auto [rows, out] : {std::tuple{1, 1}, {31, 33}, {33, 31}})
            for (int64_t in : widths(f)) {
                const Tensor x = random({1, rows, in}, 1, t), w = blocks({out, in}, 2, f), b = random({out}, 3, t);
                const Tensor ref = ops::linear(x, w, &b);
                Tensor babs = abs_of(b);
                const Tensor scale = ops::linear(abs_of(x), abs_of(w.to_f32()), &babs);
                const Tensor xd = x.to_device(gpu, t), wd = w.to_device(gpu, f), bd = b.to_device(gpu, t);
                const std::string what = std::string("linear ") + dtype_name(f) + " " + std::to_string(rows) + "x" +
                                         std::to_string(in) + "->" + std::to_string(out);
                expect_close(ops::linear(xd, wd, &bd).to_host(), ref, scale, double(in), t, 2, what);
                // acc += linear: the bound's sums include |acc|.
                const Tensor acc = random({1, rows, out}, 4, t, -4.0f, 4.0f);
                Tensor acc_ref = acc, acc_scale = abs_of(acc);
                ops::add_(acc_ref, ref);
                ops::add_(acc_scale, scale);
                Tensor accd = acc.to_device(gpu, t);
                ops::linear_add_(accd, xd, wd, &bd);
                expect_close(accd.to_host(), acc_ref, acc_scale, double(in), t, 2, "linear_add_ " + what);
            }
}

// conv2d and the fused convolutions (GroupNorm + SiLU before, its residual and per-image-bias forms, the
// upsampled input, the affine + SiLU of the tiled decode): the bounds of device_ops_test.cpp's tests of the same
// ops, factor + 1 for the weights' rounding to t.
void check_convolutions(Backend& gpu, DType f) {
    const ops::ScopedCpuQ8Products exact(ops::CpuQ8Products::Dequantize);  // CPU references: not int8
    struct C {
        int n, cin, h, w, cout, k, stride, pad, groups;
    };
    const bool k_quant = dtype_block_values(f) == 256;
    // cin * k * k whole blocks: 1x1 and 3x3 filters, 1, 31 and 33 output channels, odd images, a stride; input
    // channels past CUDA's run of 256 that widens a filter into channels-last order (dequantize_krsc), with a
    // partial last run (288) or two whole ones (512).
    const std::vector<C> cases =
        k_quant ? std::vector<C>{C{1, 256, 3, 5, 1, 1, 1, 0, 32}, C{2, 256, 5, 3, 31, 3, 2, 1, 32},
                                 C{1, 512, 3, 2, 3, 3, 1, 1, 32}}
                : std::vector<C>{C{1, 32, 5, 7, 1, 1, 1, 0, 8}, C{2, 32, 7, 5, 33, 3, 1, 1, 8},
                                 C{1, 64, 6, 5, 31, 3, 2, 1, 4}, C{1, 288, 3, 4, 5, 3, 1, 1, 8}};
    for (DType t : kiln::test::gpu_dtypes(gpu))
        for (const C& c : cases) {
            const Tensor x = random({c.n, c.cin, c.h, c.w}, 5, t), w = blocks({c.cout, c.cin, c.k, c.k}, 6, f);
            const Tensor b = random({c.cout}, 7, t), gamma = random({c.cin}, 8, t, 0.5f, 1.5f),
                         beta = random({c.cin}, 9, t);
            const Tensor wf = w.to_f32();
            Tensor babs = abs_of(b);
            const std::string what = std::string(dtype_name(f)) + " " + std::to_string(c.cin) + "x" +
                                     std::to_string(c.h) + "x" + std::to_string(c.w) + "->" +
                                     std::to_string(c.cout) + " k" + std::to_string(c.k) + " s" +
                                     std::to_string(c.stride);
            const double k = double(c.cin) * c.k * c.k, kk = k + double(c.h) * c.w * c.cin / c.groups;
            const Tensor xd = x.to_device(gpu, t), wd = w.to_device(gpu, f), bd = b.to_device(gpu, t);
            const Tensor gd = gamma.to_device(gpu, t), betad = beta.to_device(gpu, t);
            expect_close(ops::conv2d(xd, wd, &bd, c.stride, c.pad).to_host(), ops::conv2d(x, w, &b, c.stride, c.pad),
                         ops::conv2d(abs_of(x), abs_of(wf), &babs, c.stride, c.pad), k, t, 2, "conv2d " + what);
            Tensor normed = ops::group_norm(x, c.groups, gamma, beta, 1e-5f);
            ops::silu_(normed);
            const Tensor gn_scale = ops::conv2d(abs_of(normed), abs_of(wf), &babs, c.stride, c.pad);
            const Tensor gn_ref = ops::conv2d_group_norm_silu(x, c.groups, gamma, beta, 1e-5f, w, &b, c.stride, c.pad);
            expect_close(ops::conv2d_group_norm_silu(xd, c.groups, gd, betad, 1e-5f, wd, &bd, c.stride, c.pad)
                             .to_host(),
                         gn_ref, gn_scale, kk, t, 4, "conv2d_group_norm_silu " + what);
            // The residual form: acc += the GroupNorm convolution.
            const Tensor acc = random(gn_ref.shape(), 10, t, -2.0f, 2.0f);
            Tensor add_ref = acc, add_scale = abs_of(acc);
            ops::conv2d_group_norm_silu_add_(add_ref, x, c.groups, gamma, beta, 1e-5f, w, &b, c.stride, c.pad);
            ops::add_(add_scale, gn_scale);
            Tensor accd = acc.to_device(gpu, t);
            ops::conv2d_group_norm_silu_add_(accd, xd, c.groups, gd, betad, 1e-5f, wd, &bd, c.stride, c.pad);
            expect_close(accd.to_host(), add_ref, add_scale, kk, t, 5, "conv2d_group_norm_silu_add_ " + what);
            // The per-image bias form.
            const Tensor image_bias = random({c.n, c.cout}, 11, t);
            Tensor plus_scale = gn_scale;
            ops::add_channel_bias_(plus_scale, abs_of(image_bias));
            expect_close(ops::conv2d_group_norm_silu_plus(xd, c.groups, gd, betad, 1e-5f, wd, &bd,
                                                          image_bias.to_device(gpu, t), 0, c.stride, c.pad)
                             .to_host(),
                         ops::conv2d_group_norm_silu_plus(x, c.groups, gamma, beta, 1e-5f, w, &b, image_bias, 0,
                                                          c.stride, c.pad),
                         plus_scale, kk, t, 5, "conv2d_group_norm_silu_plus " + what);
            // The upsampled input.
            const Tensor up = ops::upsample_nearest2x(x);
            expect_close(ops::conv2d_upsample2x(xd, wd, &bd, c.stride, c.pad).to_host(),
                         ops::conv2d(up, w, &b, c.stride, c.pad),
                         ops::conv2d(abs_of(up), abs_of(wf), &babs, c.stride, c.pad), k, t, 2,
                         "conv2d_upsample2x " + what);
            // The affine + SiLU: |x scale| + |shift| bounds every intermediate (device_ops_test.cpp's
            // TiledDecodePieces), factor 5 + 1.
            std::vector<float> scale(size_t(c.cin)), shift(size_t(c.cin));
            for (int i = 0; i < c.cin; ++i) scale[size_t(i)] = 0.25f * float(i % 7) - 0.75f, shift[size_t(i)] = 0.1f * float(i % 5) - 0.2f;
            Tensor affine = x, abs_in = x;
            const int64_t plane = int64_t(c.h) * c.w;
            for (int64_t img = 0; img < c.n; ++img)
                for (int64_t ch = 0; ch < c.cin; ++ch)
                    for (int64_t i = 0; i < plane; ++i) {
                        const int64_t at = (img * c.cin + ch) * plane + i;
                        affine[at] = x[at] * scale[size_t(ch)] + shift[size_t(ch)];
                        abs_in[at] = std::fabs(x[at] * scale[size_t(ch)]) + std::fabs(shift[size_t(ch)]);
                    }
            ops::silu_(affine);
            expect_close(ops::conv2d_affine_silu(xd, scale, shift, wd, &bd, c.stride, c.pad).to_host(),
                         ops::conv2d(affine, w, &b, c.stride, c.pad),
                         ops::conv2d(abs_in, abs_of(wf), &babs, c.stride, c.pad), k, t, 6,
                         "conv2d_affine_silu " + what);
        }
}

}  // namespace

TEST_P(BlockWeights, Linear) {
    for (DType f : kFormats) check_linear(this->gpu(), f);
}

TEST_P(BlockWeights, Convolutions) {
    for (DType f : kFormats) check_convolutions(this->gpu(), f);
}

// Inside a recorded call (a CUDA graph, a Vulkan command buffer) the transient weights are the recording's own
// scratch: the call records (the function runs twice: eagerly, then recorded) and its replays, with new inputs,
// give the products of the blocks. Two products of two formats share the call, so one transient follows another.
// Bound: linear's (k = in), its sums over both products.
TEST_P(BlockWeights, RecordedCallsReplay) {
    const ops::ScopedCpuQ8Products exact(ops::CpuQ8Products::Dequantize);  // CPU references: not int8
    Backend& gpu = this->gpu();
    const int64_t rows = 5, in = 256, out = 33;
    const Tensor w1 = blocks({out, in}, 31, DType::Q8_0), w2 = blocks({out, in}, 32, DType::Q4_K);
    const Tensor b1 = random({out}, 33, DType::F32), b2 = random({out}, 34, DType::F32);
    const Tensor w1d = w1.to_device(gpu, DType::Q8_0), w2d = w2.to_device(gpu, DType::Q4_K);
    const Tensor b1d = b1.to_device(gpu, DType::F32), b2d = b2.to_device(gpu, DType::F32);
    int calls = 0;
    const Backend::RecordedFn two_products = [&](const std::vector<const Tensor*>& x) {
        ++calls;
        Tensor y = ops::linear(*x[0], w1d, &b1d);
        ops::linear_add_(y, *x[0], w2d, &b2d);
        return y;
    };
    for (int i = 0; i < 4; ++i) {
        const Tensor x = random({rows, in}, 40 + uint32_t(i), DType::F32);
        const Tensor xd = x.to_device(gpu, DType::F32);
        const Tensor got = gpu.run_recorded("block weights", {&xd}, two_products).to_host();
        Tensor ref = ops::linear(x, w1, &b1), scale = ops::linear(abs_of(x), abs_of(w1.to_f32()), nullptr);
        ops::add_(ref, ops::linear(x, w2, &b2));
        ops::add_(scale, ops::linear(abs_of(x), abs_of(w2.to_f32()), nullptr));
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t o = 0; o < out; ++o) scale[r * out + o] += std::fabs(b1[o]) + std::fabs(b2[o]);
        expect_close(got, ref, scale, double(in), DType::F32, 2, "recorded call " + std::to_string(i));
    }
    EXPECT_EQ(calls, 2) << "the third and fourth calls should have replayed the recording";
}

// Five products in one recorded call, their weights of growing and shrinking sizes in four formats: CUDA
// dequantizes each on a side stream into one of two buffers in turn while the product before runs
// (cuda/dequantize_ahead.h), growing a buffer inside the capture; every product must still read its own weight.
// Bound: linear's with k the widest input, over the sum of the five.
TEST_P(BlockWeights, ManyProductsInOneRecordedCall) {
    Backend& gpu = this->gpu();
    const ops::ScopedCpuQ8Products exact(ops::CpuQ8Products::Dequantize);  // CPU references: not int8
    const int64_t rows = 3, out = 33;
    const std::vector<std::pair<int64_t, DType>> layers = {
        {64, DType::Q8_0}, {256, DType::Q4_K}, {96, DType::Q4_0}, {512, DType::Q8_0}, {32, DType::Q4_1}};
    std::vector<Tensor> w, wd;
    for (size_t i = 0; i < layers.size(); ++i) {
        w.push_back(blocks({out, layers[i].first}, 70 + uint32_t(i), layers[i].second));
        wd.push_back(w.back().to_device(gpu, layers[i].second));
    }
    int calls = 0;
    const Backend::RecordedFn products = [&](const std::vector<const Tensor*>& x) {
        ++calls;
        Tensor y = ops::linear(*x[0], wd[0], nullptr);
        for (size_t i = 1; i < wd.size(); ++i) ops::linear_add_(y, *x[i], wd[i], nullptr);
        return y;
    };
    for (int call = 0; call < 4; ++call) {
        std::vector<Tensor> x, xd;
        for (size_t i = 0; i < layers.size(); ++i) {
            x.push_back(random({rows, layers[i].first}, 80 + uint32_t(call * 10 + int(i)), DType::F32));
            xd.push_back(x.back().to_device(gpu, DType::F32));
        }
        std::vector<const Tensor*> inputs;
        for (const Tensor& t : xd) inputs.push_back(&t);
        const Tensor got = gpu.run_recorded("many block weights", inputs, products).to_host();
        Tensor ref = ops::linear(x[0], w[0], nullptr), scale = ops::linear(abs_of(x[0]), abs_of(w[0].to_f32()), nullptr);
        for (size_t i = 1; i < layers.size(); ++i) {
            ops::add_(ref, ops::linear(x[i], w[i], nullptr));
            ops::add_(scale, ops::linear(abs_of(x[i]), abs_of(w[i].to_f32()), nullptr));
        }
        expect_close(got, ref, scale, 512.0, DType::F32, 2, "five products, call " + std::to_string(call));
    }
    EXPECT_EQ(calls, 2) << "the third and fourth calls should have replayed the recording";
}

// Block weights asked for in changing orders, one rewritten in place between two uses (an upload, as a weight
// store's restore makes) and one freed: each product reads the blocks the device holds at the time (CUDA
// dequantizes a weight on a side stream that waits for the main stream as it was one product earlier,
// cuda/dequantize_ahead.h; an upload must reach it). Against the CPU; bound: linear's.
TEST_P(BlockWeights, WeightsAskedInChangingOrdersAndRewritten) {
    Backend& gpu = this->gpu();
    const ops::ScopedCpuQ8Products exact(ops::CpuQ8Products::Dequantize);  // CPU references: not int8
    const int64_t rows = 3, out = 33, in = 256;
    std::vector<Tensor> w, wd;
    for (uint32_t i = 0; i < 4; ++i) {
        w.push_back(blocks({out, in}, 90 + i, i == 3 ? DType::Q4_K : DType::Q8_0));
        wd.push_back(w.back().to_device(gpu, w.back().dtype()));
    }
    const Tensor x = random({rows, in}, 99, DType::F32);
    const Tensor xd = x.to_device(gpu, DType::F32);
    auto check = [&](size_t i, const Tensor& host_w, const std::string& how) {
        const Tensor got = ops::linear(xd, wd[i], nullptr).to_host();
        expect_close(got, ops::linear(x, host_w, nullptr), ops::linear(abs_of(x), abs_of(host_w.to_f32()), nullptr),
                     double(in), DType::F32, 2, how);
    };
    auto in_order = [&](const std::string& how) {
        for (size_t i = 0; i < wd.size(); ++i) check(i, w[i], how + ", weight " + std::to_string(i));
    };
    in_order("in order");
    in_order("in order again");
    check(0, w[0], "0 again");
    check(2, w[2], "2 after 0");
    check(1, w[1], "1 after 2");
    check(3, w[3], "3 after 1");

    in_order("the order once more");
    check(0, w[0], "0, before 2 is rewritten");
    const Tensor rewritten = blocks({out, in}, 123, DType::Q8_0);
    gpu.upload(wd[2].device_data(), rewritten.blocks(), dtype_storage_bytes(DType::Q8_0, out * in));
    check(1, w[1], "1, before the rewrite of 2");
    check(2, rewritten, "2 rewritten in place");
    check(3, w[3], "3 after the rewrite");
    w[2] = rewritten;

    in_order("the order after the rewrite");
    wd[1] = Tensor();  // freed
    check(0, w[0], "0, 1 freed");
    check(2, w[2], "2 after 0");
    check(3, w[3], "3 after 2");
    // Another weight of 1's size and format, most likely where 1 was (the caching allocator): its own values.
    w[1] = blocks({out, in}, 321, DType::Q8_0);
    wd[1] = w[1].to_device(gpu, DType::Q8_0);
    in_order("a new weight 1");
}

// The same for convolutions, whose transients CUDA widens straight into channels-last order and marks so
// (CudaDeviceOps::widen_weight): inside the capture the mark is set and dropped with the transient, and two
// filters of two formats follow each other in one call. Bound: conv2d's (k = cin * 9), its sums over both.
TEST_P(BlockWeights, RecordedConvolutionsReplay) {
    Backend& gpu = this->gpu();
    const ops::ScopedCpuQ8Products exact(ops::CpuQ8Products::Dequantize);  // CPU references: not int8
    const int64_t cin = 256, cout = 7;
    const Tensor w1 = blocks({cout, cin, 3, 3}, 51, DType::Q8_0), w2 = blocks({cout, cin, 3, 3}, 52, DType::Q4_K);
    const Tensor w1d = w1.to_device(gpu, DType::Q8_0), w2d = w2.to_device(gpu, DType::Q4_K);
    int calls = 0;
    const Backend::RecordedFn two_convolutions = [&](const std::vector<const Tensor*>& x) {
        ++calls;
        Tensor y = ops::conv2d(*x[0], w1d, nullptr, 1, 1);
        ops::add_(y, ops::conv2d(*x[0], w2d, nullptr, 1, 1));
        return y;
    };
    for (int i = 0; i < 4; ++i) {
        const Tensor x = random({1, cin, 5, 6}, 60 + uint32_t(i), DType::F32);
        const Tensor xd = x.to_device(gpu, DType::F32);
        const Tensor got = gpu.run_recorded("block filters", {&xd}, two_convolutions).to_host();
        Tensor ref = ops::conv2d(x, w1, nullptr, 1, 1), scale = ops::conv2d(abs_of(x), abs_of(w1.to_f32()), nullptr, 1, 1);
        ops::add_(ref, ops::conv2d(x, w2, nullptr, 1, 1));
        ops::add_(scale, ops::conv2d(abs_of(x), abs_of(w2.to_f32()), nullptr, 1, 1));
        expect_close(got, ref, scale, double(cin) * 9, DType::F32, 2, "recorded convolutions " + std::to_string(i));
    }
    EXPECT_EQ(calls, 2) << "the third and fourth calls should have replayed the recording";
}

#if KILN_HAS_VULKAN
// Vulkan's fused q8_0 products (KILN_VULKAN_Q8=fused): each FMA build of matmul and conv2d reads the blocks as its
// tiles load them. The same checks as above, in each build, and no transient weight: the workspace a product
// makes beside its output (ops/device_weight.h counts the transient there) stays as it was.
TEST_P(BlockWeights, VulkanFusedQ8Products) {
    auto* vk = dynamic_cast<vulkan::VulkanBackend*>(&this->gpu());
    if (!vk) GTEST_SKIP() << "not a Vulkan device";
    using P = vulkan::VulkanBackend::Products;
    using Q = vulkan::VulkanBackend::Q8Products;
    const P saved = vk->products();
    const Q saved_q8 = vk->q8_products();
    const std::string name = device_name(vk->device());
    auto workspace_peak = [&] { return memory_stats().device(name)[MemoryCategory::Workspace].peak; };
    const Tensor x = random({1, 3, 64}, 51, DType::F32).to_device(*vk, DType::F32);
    const Tensor w = blocks({5, 64}, 52, DType::Q8_0).to_device(*vk, DType::Q8_0);
    for (Q mode : {Q::Transient, Q::Fused}) {
        vk->set_q8_products(mode);
        reset_memory_peaks();
        const int64_t before = workspace_peak();
        (void)ops::linear(x, w, nullptr);
        vk->synchronize();
        EXPECT_EQ(workspace_peak() - before, mode == Q::Fused ? 0 : 5 * 64 * 4)
            << (mode == Q::Fused ? "fused: no transient weight" : "transient: one float32 copy of the weight");
    }
    vk->set_q8_products(Q::Fused);
    for (P build : {P::Direct, P::Small, P::Large}) {
        vk->set_products(build);
        check_linear(*vk, DType::Q8_0);
        check_convolutions(*vk, DType::Q8_0);
    }
    vk->set_products(saved);
    vk->set_q8_products(saved_q8);
}

// The default matrix kernel (sg32, KHR) reads q8_0 blocks too ("_q8_coopk_sg32"): each float16 operand is the exact
// code x scale rounded once, as the transient weight's, so its products are the transient path's bit for bit, in
// linear (130 rows, 96 k) and in a 3x3 convolution (k = 32 x 9 = 288). Runs only where the matrix units are (not
// lavapipe).
TEST_P(BlockWeights, VulkanMatrixUnitsReadQ8AsTheTransientsBits) {
    auto* vk = dynamic_cast<vulkan::VulkanBackend*>(&this->gpu());
    if (!vk) GTEST_SKIP() << "not a Vulkan device";
    if (!vk->physical().matrix_khr || vk->matrix_variant() != "_sg32")
        GTEST_SKIP() << vk->describe().name << " runs no sg32 matrix kernels";
    using P = vulkan::VulkanBackend::Products;
    using Q = vulkan::VulkanBackend::Q8Products;
    const P saved = vk->products();
    const Q saved_q8 = vk->q8_products();
    vk->set_products(P::Matrix);
    const Tensor x = random({1, 130, 96}, 53, DType::F16).to_device(*vk, DType::F16);
    const Tensor w = blocks({70, 96}, 54, DType::Q8_0).to_device(*vk, DType::Q8_0);
    const Tensor img = random({2, 32, 9, 11}, 55, DType::F16).to_device(*vk, DType::F16);
    const Tensor filt = blocks({37, 32, 3, 3}, 56, DType::Q8_0).to_device(*vk, DType::Q8_0);
    std::vector<Tensor> got[2];
    for (Q mode : {Q::Transient, Q::Fused}) {
        vk->set_q8_products(mode);
        got[int(mode == Q::Fused)] = {ops::linear(x, w, nullptr).to_host(), ops::conv2d(img, filt, nullptr, 1, 1).to_host()};
    }
    expect_same_bits(got[1][0], got[0][0], "linear");
    expect_same_bits(got[1][1], got[0][1], "conv2d k = 288");
    vk->set_q8_products(Q::Fused);
    check_linear(*vk, DType::Q8_0);
    check_convolutions(*vk, DType::Q8_0);
    vk->set_products(saved);
    vk->set_q8_products(saved_q8);
}
#endif
