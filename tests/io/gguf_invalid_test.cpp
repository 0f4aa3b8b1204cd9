// Malformed and unsupported GGUF files, made by hand: each gives a kiln::Error of the right kind whose
// message names the file and the problem (and the tensor or key where there is one).
#include <gtest/gtest.h>

#include "io/gguf.h"
#include "io/safetensors.h"
#include "gguf_test_util.h"
#include "io_test_util.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// One F32 tensor "w" of 2 x 32 values and a Q8_0 tensor "q" of 2 x 32, aligned at 32.
std::vector<GgufTensorSpec> good_tensors() {
    return {{"w", {32, 2}, 0, 0}, {"q", {32, 2}, 8, 256}};
}
std::string good_data() { return std::string(256 + 2 * 34, '\x01'); }

class GgufInvalid : public ::testing::Test {
protected:
    Error open_error(const std::string& bytes) {
        write_bytes(path_, bytes);
        return expect_error([&] { SafetensorsFile::open(path_); });
    }
    void expect(const std::string& bytes, ErrorKind kind, const std::string& says) {
        const Error e = open_error(bytes);
        EXPECT_EQ(e.kind(), kind) << e.what();
        EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << "message: " << e.what();
        EXPECT_NE(std::string(e.what()).find(path_), std::string::npos) << "message: " << e.what();
    }
    TempDir dir_;
    std::string path_ = dir_.file("bad.gguf");
};

}  // namespace

TEST_F(GgufInvalid, TheGoodFileOpens) {
    write_bytes(path_, gguf_bytes({kv_string("general.architecture", "x")}, good_tensors(), good_data()));
    SafetensorsFile f = SafetensorsFile::open(path_);
    EXPECT_EQ(f.info("q").dtype, DType::Q8_0);
    EXPECT_EQ(f.info("q").shape, (Shape{2, 32}));
    EXPECT_EQ(f.load("w").numel(), 64);
}

TEST_F(GgufInvalid, Versions) {
    expect(gguf_bytes({}, good_tensors(), good_data(), 1), ErrorKind::Unsupported, "version 1");
    expect(gguf_bytes({}, good_tensors(), good_data(), 4), ErrorKind::Unsupported, "version 4");
    expect(gguf_bytes({}, good_tensors(), good_data(), 0x03000000), ErrorKind::Unsupported, "big-endian");
}

TEST_F(GgufInvalid, UnsupportedTensorTypesAreNamed) {
    expect(gguf_bytes({}, {{"k", {256, 1}, 15, 0}}, std::string(512, '\0')), ErrorKind::Unsupported, "Q8_K");
    expect(gguf_bytes({}, {{"k", {32, 1}, 20, 0}}, std::string(64, '\0')), ErrorKind::Unsupported, "IQ4_NL");
    expect(gguf_bytes({}, {{"k", {32, 1}, 9, 0}}, std::string(64, '\0')), ErrorKind::Unsupported, "Q8_1");
    expect(gguf_bytes({}, {{"k", {32, 1}, 77, 0}}, std::string(64, '\0')), ErrorKind::Unsupported, "ggml type 77");
}

TEST_F(GgufInvalid, MalformedLayouts) {
    const std::string data = good_data();
    // Blocks along an innermost dimension that is not whole blocks (ggml never writes it).
    expect(gguf_bytes({}, {{"q", {3, 32}, 8, 0}}, data), ErrorKind::InvalidModel, "innermost dimension 3");
    // k-quants hold 256-value blocks: an innermost dimension of 32 is not whole blocks; a Q6_K row of 210
    // bytes does not fit 160 bytes of data.
    expect(gguf_bytes({}, {{"k", {32, 8}, 12, 0}}, data), ErrorKind::InvalidModel, "256-value block");
    expect(gguf_bytes({}, {{"k", {256}, 14, 0}}, std::string(160, '\0')), ErrorKind::InvalidModel, "truncated");
    // The same for the 2- and 3-bit k-quants: q2_K rows of 128 values; a q3_K block of 110 bytes in 96.
    expect(gguf_bytes({}, {{"k", {128, 2}, 10, 0}}, data), ErrorKind::InvalidModel, "256-value block");
    expect(gguf_bytes({}, {{"k", {256}, 11, 0}}, std::string(96, '\0')), ErrorKind::InvalidModel, "truncated");
    // Offsets: not aligned; past the end; overlapping.
    expect(gguf_bytes({}, {{"w", {32, 2}, 0, 16}}, data), ErrorKind::InvalidModel, "not a multiple of the alignment");
    expect(gguf_bytes({}, {{"w", {32, 2}, 0, 320}}, data), ErrorKind::InvalidModel, "truncated");
    expect(gguf_bytes({}, {{"w", {32, 2}, 0, 0}, {"v", {32, 1}, 0, 128}}, data), ErrorKind::InvalidModel, "overlapping");
    // Shapes: too many dimensions, a product that overflows.
    expect(gguf_bytes({}, {{"w", {1, 1, 1, 1, 1}, 0, 0}}, data), ErrorKind::InvalidModel, "5 dimensions");
    expect(gguf_bytes({}, {{"w", {1ull << 40, 1ull << 40}, 0, 0}}, data), ErrorKind::InvalidModel, "too large");
    // Names: duplicated, empty.
    expect(gguf_bytes({}, {{"w", {32}, 0, 0}, {"w", {32}, 0, 128}}, data), ErrorKind::InvalidModel, "appears twice");
    expect(gguf_bytes({}, {{"", {32}, 0, 0}}, data), ErrorKind::InvalidModel, "empty name");
}

TEST_F(GgufInvalid, MalformedMetadata) {
    const auto t = good_tensors();
    const std::string d = good_data();
    expect(gguf_bytes({kv_u32("a.b", 1), kv_u32("a.b", 2)}, t, d), ErrorKind::InvalidModel, "appears twice");
    expect(gguf_bytes({gguf_str("a.b") + le(13, 4) + le(0, 8)}, t, d), ErrorKind::InvalidModel, "unknown value type 13");
    expect(gguf_bytes({gguf_str("a.b") + le(7, 4) + le(2, 1)}, t, d), ErrorKind::InvalidModel, "bool of value 2");
    expect(gguf_bytes({gguf_str("") + le(4, 4) + le(1, 4)}, t, d), ErrorKind::InvalidModel, "empty key");
    // Alignment: zero, not a power of two, of another type.
    expect(gguf_bytes({kv_u32("general.alignment", 0)}, t, d), ErrorKind::InvalidModel, "power of two");
    expect(gguf_bytes({kv_u32("general.alignment", 48)}, t, d), ErrorKind::InvalidModel, "power of two");
    expect(gguf_bytes({kv_string("general.alignment", "32")}, t, d), ErrorKind::InvalidModel, "must be a uint32");
    // An array longer than the file; arrays nested past any writer's depth.
    expect(gguf_bytes({gguf_str("a") + le(9, 4) + le(4, 4) + le(1ull << 40, 8)}, t, d), ErrorKind::InvalidModel,
           "truncated");
    std::string nested = gguf_str("n") + le(9, 4);
    for (int i = 0; i < 20; ++i) nested += le(9, 4) + le(1, 8);
    expect(gguf_bytes({nested}, t, d), ErrorKind::InvalidModel, "nests arrays");
    // Counts far beyond the file.
    std::string huge = "GGUF" + le(3, 4) + le(1ull << 60, 8) + le(0, 8);
    expect(huge, ErrorKind::InvalidModel, "truncated");
}

// Every prefix of a good file is rejected as truncated (or as not safetensors, below the magic) and never
// read past its end.
TEST_F(GgufInvalid, TruncatedAnywhere) {
    const std::string good = gguf_bytes({kv_string("general.architecture", "x"), kv_u32("general.alignment", 32)},
                                        good_tensors(), good_data());
    for (size_t len = 4; len < good.size(); ++len) {
        const Error e = open_error(good.substr(0, len));
        EXPECT_EQ(e.kind(), ErrorKind::InvalidModel) << len << ": " << e.what();
        EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << len << ": " << e.what();
    }
}
