// models/quant_policy.h: which matrices --weights q8_0|q4_0|q4_1 quantizes (docs/QUANT.md has why).
#include <gtest/gtest.h>

#include "models/quant_policy.h"

using namespace kiln;

TEST(QuantPolicy, QuantizesLargeWholeBlockMatrices) {
    EXPECT_TRUE(quantize_matrix("down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight", {320, 320}));
    EXPECT_TRUE(quantize_matrix("up_blocks.1.resnets.0.conv1.weight", {1280, 2560, 3, 3}));
    EXPECT_TRUE(quantize_matrix("text_model.encoder.layers.0.mlp.fc1.weight", {3072, 768}));
    EXPECT_TRUE(quantize_matrix("decoder.up_blocks.0.resnets.0.conv2.weight", {512, 512, 3, 3}));
}

TEST(QuantPolicy, KeepsFirstAndLastConvolutionsEmbeddingsAndSmallOrRaggedMatrices) {
    EXPECT_FALSE(quantize_matrix("conv_in.weight", {320, 4, 3, 3}));      // 36-value rows: not whole blocks
    EXPECT_FALSE(quantize_matrix("conv_in.weight", {320, 32, 3, 3}));     // whole blocks, kept by name
    EXPECT_FALSE(quantize_matrix("conv_out.weight", {4, 320, 3, 3}));
    EXPECT_FALSE(quantize_matrix("decoder.conv_in.weight", {512, 4, 3, 3}));
    EXPECT_FALSE(quantize_matrix("decoder.conv_out.weight", {3, 128, 3, 3}));
    EXPECT_FALSE(quantize_matrix("time_embedding.linear_1.weight", {1280, 320}));
    EXPECT_FALSE(quantize_matrix("text_model.embeddings.token_embedding.weight", {49408, 768}));
    EXPECT_FALSE(quantize_matrix("down_blocks.0.resnets.0.time_emb_proj.weight", {32, 64}));  // under 4096 values
    EXPECT_FALSE(quantize_matrix("x.weight", {64, 48}));                                       // 48-value rows
    EXPECT_FALSE(quantize_matrix("x.weight", {}));
}
