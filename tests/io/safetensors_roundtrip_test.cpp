// write_safetensors -> SafetensorsFile round trips, and the writer's own guarantees.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/half.h"
#include "core/dtype_convert.h"
#include "io/safetensors.h"
#include "io_test_util.h"

using namespace kiln;
using kiln::test::expect_error;
using kiln::test::TempDir;

namespace {

uint32_t bits_of(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
}

// k/16 for |k| < 256 has at most 8 significant bits and exponents well inside both half and
// bfloat16 ranges, so every one of these is exact in F16 and BF16 (IEEE 754 binary16: 11
// significant bits; bfloat16: 8).
std::vector<float> exact_in_16_bits() {
    std::vector<float> v;
    for (int k = -255; k <= 255; ++k) v.push_back(static_cast<float>(k) / 16.0f);
    v.push_back(-0.0f);
    v.push_back(std::numeric_limits<float>::infinity());
    v.push_back(-std::numeric_limits<float>::infinity());
    return v;
}

void expect_same_bits(const Tensor& got, const std::vector<float>& want) {
    ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(bits_of(got[i]), bits_of(want[i])) << "element " << i;
}

void round_trip(DType dtype, const std::vector<float>& values) {
    TempDir dir;
    const std::string path = dir.file("rt.safetensors");
    const int64_t n = static_cast<int64_t>(values.size());
    std::vector<std::pair<std::string, Tensor>> tensors = {
        {"b.values", Tensor({n}, values)},
        {"a.matrix", Tensor({2, 3}, {1, 2, 3, 4, 5, 6})},
        {"c.empty", Tensor({0, 3})},
        {"d.scalar", Tensor({}, {-2.5f})},
    };
    write_safetensors(path, tensors, dtype, {{"format", "pt"}, {"note", "round trip"}});

    SafetensorsFile f = SafetensorsFile::open(path);
    EXPECT_EQ(f.names(), (std::vector<std::string>{"a.matrix", "b.values", "c.empty", "d.scalar"}));
    EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "round trip"}}));
    for (const auto& [name, tensor] : tensors) {
        const TensorInfo& info = f.info(name);
        EXPECT_EQ(info.name, name);
        EXPECT_EQ(info.dtype, dtype);
        EXPECT_EQ(info.shape, tensor.shape());
        EXPECT_EQ(info.nbytes, static_cast<uint64_t>(tensor.numel()) * dtype_size(dtype));
        Tensor loaded = f.load(name);
        EXPECT_EQ(loaded.shape(), tensor.shape());
        expect_same_bits(loaded, tensor.values());
    }
    // Data is laid out in the order given, back to back after the padded header.
    EXPECT_EQ(f.info("b.values").offset % 8, 0u);
    EXPECT_EQ(f.info("a.matrix").offset, f.info("b.values").offset + f.info("b.values").nbytes);
    EXPECT_EQ(f.file_size(), f.info("d.scalar").offset + f.info("d.scalar").nbytes);
}

}  // namespace

TEST(SafetensorsRoundTrip, F32KeepsEveryBit) {
    std::vector<float> values = exact_in_16_bits();
    for (float v : {0.1f, 1.0f / 3.0f, FLT_MAX, -FLT_MIN, 1e-40f /* subnormal */, 123456.789f})
        values.push_back(v);
    round_trip(DType::F32, values);
}

TEST(SafetensorsRoundTrip, F16) {
    std::vector<float> values = exact_in_16_bits();
    values.push_back(65504.0f);           // largest finite half
    values.push_back(std::ldexp(1.0f, -24));  // smallest subnormal half
    values.push_back(std::ldexp(1.0f, -14));  // smallest normal half
    round_trip(DType::F16, values);
}

TEST(SafetensorsRoundTrip, BF16) {
    std::vector<float> values = exact_in_16_bits();
    values.push_back(bf16_to_float(0x7f7f));    // largest finite bfloat16
    values.push_back(std::ldexp(1.0f, -133));  // smallest subnormal bfloat16 (float's 2^-149 << 16)
    round_trip(DType::BF16, values);
}

TEST(SafetensorsRoundTrip, NaNStaysNaN) {
    for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
        TempDir dir;
        const std::string path = dir.file("nan.safetensors");
        write_safetensors(path, {{"x", Tensor({2}, {std::nanf(""), -std::nanf("")})}}, dtype);
        Tensor t = SafetensorsFile::open(path).load("x");
        EXPECT_TRUE(std::isnan(t[0]) && !std::signbit(t[0])) << dtype_name(dtype);
        EXPECT_TRUE(std::isnan(t[1]) && std::signbit(t[1])) << dtype_name(dtype);
    }
}

// Round to nearest, ties to even (IEEE 754's default): halfway cases go to the neighbour whose
// last significant bit is 0.
TEST(SafetensorsRoundTrip, NarrowingRoundsToNearestEven) {
    TempDir dir;
    const std::string path = dir.file("round.safetensors");
    // Half has 10 fraction bits: 1 + 2^-11 is halfway between 1 (even) and 1 + 2^-10 (odd).
    const float half_in[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-20f};
    const float half_out[] = {1.0f, 1.0f + 0x1p-9f, 1.0f + 0x1p-10f};
    write_safetensors(path, {{"x", Tensor({3}, {half_in[0], half_in[1], half_in[2]})}}, DType::F16);
    Tensor h = SafetensorsFile::open(path).load("x");
    for (int i = 0; i < 3; ++i) EXPECT_EQ(h[i], half_out[i]) << i;
    // bfloat16 has 7 fraction bits.
    const float bf_in[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f};
    const float bf_out[] = {1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-7f};
    write_safetensors(path, {{"x", Tensor({3}, {bf_in[0], bf_in[1], bf_in[2]})}}, DType::BF16);
    Tensor b = SafetensorsFile::open(path).load("x");
    for (int i = 0; i < 3; ++i) EXPECT_EQ(b[i], bf_out[i]) << i;
    EXPECT_EQ(float_to_bf16(FLT_MAX), 0x7f80);  // rounds up past the largest bfloat16 to infinity
}

TEST(SafetensorsRoundTrip, LargeTensorTakesTheParallelPath) {
    // More than the 2^20 elements at which conversion goes multi-threaded, and not a multiple of
    // the block size, so the ragged last block is exercised.
    const int64_t n = (int64_t{1} << 21) + 37;
    std::vector<float> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 511 - 255);  // 8 significant bits: exact in both
    TempDir dir;
    for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
        const std::string path = dir.file(std::string("big_") + dtype_name(dtype) + ".safetensors");
        write_safetensors(path, {{"big", Tensor({n}, values)}}, dtype);
        Tensor t = SafetensorsFile::open(path).load("big");
        ASSERT_EQ(t.numel(), n);
        EXPECT_EQ(std::memcmp(t.data(), values.data(), values.size() * 4), 0) << dtype_name(dtype);
    }
}

TEST(SafetensorsWriter, HeaderIsPaddedWithSpacesTo8Bytes) {
    TempDir dir;
    const std::string path = dir.file("pad.safetensors");
    for (const std::string name : {"a", "ab", "abc", "abcd", "abcde", "abcdef", "abcdefg", "abcdefgh"}) {
        write_safetensors(path, {{name, Tensor({1}, {1.0f})}});
        SafetensorsFile f = SafetensorsFile::open(path);
        const uint8_t* data = f.raw(name);
        const uint64_t header_end = f.info(name).offset;
        EXPECT_EQ(header_end % 8, 0u) << name;
        EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % 8, 0u) << "mapping is page aligned";
        // Any padding is trailing spaces after the closing brace.
        const char* text = reinterpret_cast<const char*>(data) - (header_end - 8);
        std::string header(text, header_end - 8);
        size_t close = header.rfind('}');
        ASSERT_NE(close, std::string::npos);
        EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos) << name;
        EXPECT_LT(header.size() - close - 1, 8u) << name;
    }
}

TEST(SafetensorsWriter, RawPointsAtTheTensorBytes) {
    TempDir dir;
    const std::string path = dir.file("raw.safetensors");
    write_safetensors(path, {{"x", Tensor({2}, {1.0f, -2.0f})}}, DType::F16);
    SafetensorsFile f = SafetensorsFile::open(path);
    const uint8_t* p = f.raw("x");
    EXPECT_EQ(p[0] | (p[1] << 8), 0x3c00);  // 1.0 in IEEE half
    EXPECT_EQ(p[2] | (p[3] << 8), 0xc000);  // -2.0
}

TEST(SafetensorsWriter, ReplacesAFileThatIsStillMappedWithoutChangingTheMapping) {
    TempDir dir;
    const std::string path = dir.file("model.safetensors");
    write_safetensors(path, {{"w", Tensor({3}, {1, 2, 3})}});
    SafetensorsFile old_file = SafetensorsFile::open(path);
    write_safetensors(path, {{"w", Tensor({3}, {7, 8, 9})}, {"v", Tensor({1}, {5})}});
    EXPECT_EQ(old_file.load("w").values(), (std::vector<float>{1, 2, 3}));
    EXPECT_FALSE(old_file.has("v"));
    SafetensorsFile new_file = SafetensorsFile::open(path);
    EXPECT_EQ(new_file.load("w").values(), (std::vector<float>{7, 8, 9}));
    // Only the target remains: the temporary file was renamed, not left behind.
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

TEST(SafetensorsWriter, EmptyFileHasAnEmptyHeader) {
    TempDir dir;
    const std::string path = dir.file("empty.safetensors");
    write_safetensors(path, {});
    SafetensorsFile f = SafetensorsFile::open(path);
    EXPECT_TRUE(f.names().empty());
    EXPECT_TRUE(f.metadata().empty());
    EXPECT_EQ(f.file_size() % 8, 0u);
}

TEST(SafetensorsWriter, RejectsBadRequestsWithoutLeavingFiles) {
    TempDir dir;
    const std::string path = dir.file("bad.safetensors");
    Tensor t({1}, {1.0f});

    Error dup = expect_error([&] { write_safetensors(path, {{"same", t}, {"same", t}}); });
    EXPECT_EQ(dup.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(dup.what()).find("'same'"), std::string::npos) << dup.what();

    Error empty = expect_error([&] { write_safetensors(path, {{"", t}}); });
    EXPECT_EQ(empty.kind(), ErrorKind::InvalidArgument);

    Error reserved = expect_error([&] { write_safetensors(path, {{"__metadata__", t}}); });
    EXPECT_EQ(reserved.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(reserved.what()).find("__metadata__"), std::string::npos);

    Error dtype = expect_error([&] { write_safetensors(path, {{"x", t}}, DType::I32); });
    EXPECT_EQ(dtype.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(dtype.what()).find("I32"), std::string::npos) << dtype.what();

    Error utf8 = expect_error([&] { write_safetensors(path, {{"bad\xff", t}}); });
    EXPECT_EQ(utf8.kind(), ErrorKind::InvalidArgument);

    Error utf8_meta = expect_error([&] { write_safetensors(path, {{"x", t}}, DType::F32, {{"k", "\xc3"}}); });
    EXPECT_EQ(utf8_meta.kind(), ErrorKind::InvalidArgument);

    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 0);
}

TEST(SafetensorsWriter, UnwritablePlaceIsAnIOError) {
    TempDir dir;
    const std::string path = dir.file("no_such_dir/x.safetensors");
    Error e = expect_error([&] { write_safetensors(path, {{"x", Tensor({1}, {1.0f})}}); });
    EXPECT_EQ(e.kind(), ErrorKind::IO);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();

    // A directory in the way of the rename: the temp file is written, then cleaned up.
    std::filesystem::create_directory(dir.file("taken"));
    Error taken = expect_error([&] { write_safetensors(dir.file("taken"), {{"x", Tensor({1}, {1.0f})}}); });
    EXPECT_EQ(taken.kind(), ErrorKind::IO);
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

TEST(SafetensorsFile, IsMovable) {
    TempDir dir;
    const std::string path = dir.file("m.safetensors");
    write_safetensors(path, {{"x", Tensor({2}, {3, 4})}});
    SafetensorsFile a = SafetensorsFile::open(path);
    SafetensorsFile b = std::move(a);
    EXPECT_EQ(b.load("x").values(), (std::vector<float>{3, 4}));
    SafetensorsFile c = SafetensorsFile::open(path);
    c = std::move(b);
    EXPECT_EQ(c.path(), path);
    EXPECT_EQ(c.load("x").values(), (std::vector<float>{3, 4}));
    static_assert(!std::is_copy_constructible_v<SafetensorsFile>);
    static_assert(!std::is_copy_assignable_v<SafetensorsFile>);
}
