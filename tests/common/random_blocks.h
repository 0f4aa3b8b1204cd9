// Random q2_K or q3_K weights (quant/k_quants.h) made as blocks: every code and sub-scale at random (files from other
// tools' quantizers reach codes kiln's may not), fp16 super-block scales d (and q2_K's dmin) in [2^-9, 2^-7], so that
// values stay near the unit range like the tests' float weights.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "core/half.h"
#include "core/tensor.h"

namespace kiln::test {

inline Tensor random_low_bit_blocks(Shape shape, uint32_t seed, DType format) {
    const int64_t n = shape_numel(shape);
    const size_t bytes = dtype_block_bytes(format), blocks = size_t(n / dtype_block_values(format));
    std::mt19937 g(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(1.0f / 512, 1.0f / 128);
    std::vector<uint8_t> out(blocks * bytes);
    for (size_t b = 0; b < blocks; ++b) {
        uint8_t* block = &out[b * bytes];
        for (size_t i = 0; i < bytes; ++i) block[i] = uint8_t(byte(g));
        const std::vector<size_t> halves = format == DType::Q2_K ? std::vector<size_t>{80, 82} : std::vector<size_t>{108};
        for (size_t o : halves) {
            const uint16_t h = float_to_half(scale(g));
            block[o] = uint8_t(h & 0xff), block[o + 1] = uint8_t(h >> 8);
        }
    }
    return Tensor::from_blocks(std::move(shape), format, std::move(out));
}

}  // namespace kiln::test
