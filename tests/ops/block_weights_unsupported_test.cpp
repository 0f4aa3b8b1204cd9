// Ops that do not take block-format tensors refuse them with an Unsupported error instead of reading their
// bytes as floats; linear and conv2d take them as weights only (ops_vs_reference_test.cpp).
#include <gtest/gtest.h>

#include "kiln/error.h"
#include "ops/cpu_q8_products.h"
#include "ops/ops.h"

using namespace kiln;

namespace {

Tensor q8_weight() {
    Tensor w({4, 32});
    for (int64_t i = 0; i < w.numel(); ++i) w[i] = float(i % 7) - 3.0f;
    return w.converted(DType::Q8_0);
}

template <typename Fn>
void expect_unsupported(Fn fn, const char* what) {
    try {
        fn();
        ADD_FAILURE() << what << ": no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << what << ": " << e.what();
        EXPECT_NE(std::string(e.what()).find("Q8_0"), std::string::npos) << e.what();
    }
}

}  // namespace

TEST(BlockWeights, OtherOpsRefuseThem) {
    const Tensor q = q8_weight();
    Tensor x({4, 32});
    expect_unsupported([&] { ops::upsample_nearest2x(q.reshaped({1, 1, 4, 32})); }, "upsample_nearest2x");
    expect_unsupported([&] { ops::softmax_lastdim(q); }, "softmax");
    expect_unsupported([&] { ops::add_(x, q); }, "add_ (operand)");
    expect_unsupported([&] { ops::layer_norm(q, Tensor::filled({32}, 1.0f), Tensor({32}), 1e-5f); }, "layer_norm");
    // As an activation of linear (only weights may be blocks).
    expect_unsupported([&] { ops::linear(q, Tensor({3, 32}), nullptr); }, "linear input");
    // (Biases and norm parameters cannot be blocks at all: a 1-d tensor's rows are single values.)
    EXPECT_THROW(Tensor::from_blocks({32}, DType::Q8_0, std::vector<uint8_t>(34)), Error);
}

TEST(BlockWeights, AsWeightsTheyGiveTheirDequantizedValuesProduct) {
    const ops::ScopedCpuQ8Products dequantized(ops::CpuQ8Products::Dequantize);  // int8: int8_dot_test.cpp
    const Tensor q = q8_weight();
    Tensor x({3, 32});
    for (int64_t i = 0; i < x.numel(); ++i) x[i] = float(i % 5) * 0.25f;
    const Tensor a = ops::linear(x, q, nullptr), b = ops::linear(x, q.to_f32(), nullptr);
    for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a[i], b[i]);  // the same sgemm on the same floats
}
