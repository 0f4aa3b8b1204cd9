// GGUF tensors in q2_K and q3_K (quant/k_quants.h; session 26) open as their blocks and load as the decoders' values
// (which quant_oracle_test.cpp holds to gguf-py's bit for bit).
#include <gtest/gtest.h>

#include <cstring>

#include "common/random_blocks.h"
#include "core/dtype_convert.h"
#include "gguf_test_util.h"
#include "io/safetensors.h"
#include "io_test_util.h"

using namespace kiln;
using namespace kiln::test;

TEST(GgufLowBitKQuants, Q2KAndQ3KTensorsReadAsTheirBlocks) {
    const Tensor q2 = random_low_bit_blocks({2, 512}, 1, DType::Q2_K), q3 = random_low_bit_blocks({3, 256}, 2, DType::Q3_K);
    const size_t q2_bytes = size_t(dtype_storage_bytes(DType::Q2_K, q2.numel()));  // 4 blocks of 84 bytes
    const size_t q3_bytes = size_t(dtype_storage_bytes(DType::Q3_K, q3.numel()));  // 3 of 110
    std::string data(384 + q3_bytes, '\0');
    std::memcpy(data.data(), q2.blocks(), q2_bytes);
    std::memcpy(data.data() + 384, q3.blocks(), q3_bytes);
    TempDir dir;
    const std::string path = dir.file("k.gguf");
    write_bytes(path, gguf_bytes({kv_string("general.architecture", "x")},
                                 {{"q2", {512, 2}, 10, 0}, {"q3", {256, 3}, 11, 384}}, data));
    SafetensorsFile f = SafetensorsFile::open(path);
    for (const auto& [name, want] : {std::pair<std::string, const Tensor*>{"q2", &q2}, {"q3", &q3}}) {
        const TensorInfo& info = f.info(name);
        EXPECT_EQ(info.dtype, want->dtype()) << name;
        EXPECT_EQ(info.shape, want->shape()) << name;
        EXPECT_EQ(info.nbytes, uint64_t(dtype_storage_bytes(want->dtype(), want->numel()))) << name;
        const Tensor stored = f.load_stored(name);
        ASSERT_EQ(stored.dtype(), want->dtype()) << name;
        EXPECT_EQ(std::memcmp(stored.blocks(), want->blocks(), info.nbytes), 0) << name;
        const Tensor values = f.load(name), expected = want->to_f32();
        ASSERT_EQ(values.shape(), expected.shape()) << name;
        EXPECT_EQ(std::memcmp(values.data(), expected.data(), size_t(expected.numel()) * 4), 0) << name;
    }
}
