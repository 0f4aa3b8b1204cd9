// Loading of every dtype from hand-built files: all 16-bit patterns, integers by value, F64, BOOL.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/half.h"
#include "io/safetensors.h"
#include "io_test_util.h"

using namespace kiln;
using kiln::test::expect_error;
using kiln::test::safetensors_bytes;
using kiln::test::TempDir;
using kiln::test::write_bytes;

namespace {

template <typename T>
std::string bytes_of(const std::vector<T>& values) {
    std::string s(values.size() * sizeof(T), '\0');
    if (!values.empty()) std::memcpy(s.data(), values.data(), s.size());  // test host is little-endian
    return s;
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, size_t begin, size_t end) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
           std::to_string(begin) + "," + std::to_string(end) + "]}";
}

// A header object of the given entries (appended piecewise, because concatenating onto a "{"
// literal trips a GCC 12 -Wrestrict false positive).
std::string object(std::initializer_list<std::string> entries) {
    std::string s = "{";
    for (const std::string& e : entries) {
        if (s.size() > 1) s += ',';
        s += e;
    }
    s += '}';
    return s;
}

// Every 16-bit pattern, stored as `dtype` at a deliberately odd data offset (header of odd length),
// loaded and compared with the scalar reference conversion from core/half.h.
void check_all_16_bit_patterns(const std::string& dtype, float (*reference)(uint16_t)) {
    std::vector<uint16_t> all(65536);
    for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
    std::string header = object({entry("all", dtype, "[256,256]", 0, 131072)});
    if ((8 + header.size()) % 2 == 0) header += " ";  // misalign the data on purpose
    TempDir dir;
    const std::string path = dir.file("all.safetensors");
    write_bytes(path, safetensors_bytes(header, bytes_of(all)));
    Tensor t = SafetensorsFile::open(path).load("all");
    ASSERT_EQ(t.shape(), (Shape{256, 256}));
    for (uint32_t i = 0; i < 65536; ++i) {
        float want = reference(static_cast<uint16_t>(i));
        if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(t[i])) << std::hex << i;
            EXPECT_EQ(std::signbit(t[i]), std::signbit(want)) << std::hex << i;
        } else {
            uint32_t got_bits, want_bits;
            std::memcpy(&got_bits, &t[i], 4);
            std::memcpy(&want_bits, &want, 4);
            EXPECT_EQ(got_bits, want_bits) << std::hex << i;
        }
    }
}

}  // namespace

TEST(SafetensorsDecode, EveryHalfPatternMatchesTheScalarConversion) {
    check_all_16_bit_patterns("F16", half_to_float);
}

TEST(SafetensorsDecode, EveryBFloat16PatternMatchesTheScalarConversion) {
    check_all_16_bit_patterns("BF16", bf16_to_float);
}

TEST(SafetensorsDecode, IntegersConvertByValue) {
    const std::vector<int8_t> i8 = {-128, -1, 0, 1, 127};
    const std::vector<uint8_t> u8 = {0, 1, 128, 255, 7};
    const std::vector<int16_t> i16 = {-32768, -300, 0, 300, 32767};
    const std::vector<int32_t> i32 = {INT32_MIN, -70000, 0, 70000, 16777216};
    // 2^24 + 1 is the first integer a float cannot hold: it rounds to the even neighbour 2^24.
    const std::vector<int64_t> i64 = {INT64_MIN, -5, 16777217, int64_t{1} << 40, 0};
    std::string data = bytes_of(i8) + bytes_of(u8) + bytes_of(i16) + bytes_of(i32) + bytes_of(i64);
    std::string header = object({entry("i8", "I8", "[5]", 0, 5), entry("u8", "U8", "[5]", 5, 10),
                                 entry("i16", "I16", "[5]", 10, 20), entry("i32", "I32", "[5]", 20, 40),
                                 entry("i64", "I64", "[5]", 40, 80)});
    TempDir dir;
    const std::string path = dir.file("ints.safetensors");
    write_bytes(path, safetensors_bytes(header, data));
    SafetensorsFile f = SafetensorsFile::open(path);
    EXPECT_EQ(f.load("i8").values(), (std::vector<float>{-128, -1, 0, 1, 127}));
    EXPECT_EQ(f.load("u8").values(), (std::vector<float>{0, 1, 128, 255, 7}));
    EXPECT_EQ(f.load("i16").values(), (std::vector<float>{-32768, -300, 0, 300, 32767}));
    EXPECT_EQ(f.load("i32").values(), (std::vector<float>{-2147483648.0f, -70000, 0, 70000, 16777216}));
    EXPECT_EQ(f.load("i64").values(), (std::vector<float>{-0x1p63f, -5, 16777216, 0x1p40f, 0}));
    EXPECT_EQ(f.info("i64").dtype, DType::I64);
    EXPECT_EQ(f.info("i16").nbytes, 10u);
}

TEST(SafetensorsDecode, F64RoundsToFloatAndOverflowsToInfinity) {
    const std::vector<double> f64 = {0.1, -2.5, 1e300, -1e300, 1e-300, static_cast<double>(FLT_MAX),
                                     std::numeric_limits<double>::quiet_NaN()};
    std::string header = object({entry("d", "F64", "[7]", 0, 56)});
    TempDir dir;
    const std::string path = dir.file("f64.safetensors");
    write_bytes(path, safetensors_bytes(header, bytes_of(f64)));
    Tensor t = SafetensorsFile::open(path).load("d");
    EXPECT_EQ(t[0], 0.1f);  // nearest float, as a C++ conversion of an in-range double gives
    EXPECT_EQ(t[1], -2.5f);
    EXPECT_EQ(t[2], std::numeric_limits<float>::infinity());
    EXPECT_EQ(t[3], -std::numeric_limits<float>::infinity());
    EXPECT_EQ(t[4], 0.0f);
    EXPECT_EQ(t[5], FLT_MAX);
    EXPECT_TRUE(std::isnan(t[6]));
}

TEST(SafetensorsDecode, BoolIsUnsupportedButStillDescribed) {
    std::string header = object({entry("mask", "BOOL", "[3]", 0, 3)});
    TempDir dir;
    const std::string path = dir.file("bool.safetensors");
    write_bytes(path, safetensors_bytes(header, std::string("\x01\x00\x01", 3)));
    SafetensorsFile f = SafetensorsFile::open(path);
    EXPECT_EQ(f.info("mask").dtype, DType::BOOL);
    EXPECT_EQ(f.raw("mask")[2], 1);
    Error e = expect_error([&] { f.load("mask"); });
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("'mask'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
}

TEST(SafetensorsDecode, DTypeNamesAndSizes) {
    // Spellings and widths from the safetensors format specification.
    const std::pair<DType, std::pair<const char*, size_t>> table[] = {
        {DType::F64, {"F64", 8}}, {DType::F32, {"F32", 4}}, {DType::F16, {"F16", 2}}, {DType::BF16, {"BF16", 2}},
        {DType::I64, {"I64", 8}}, {DType::I32, {"I32", 4}}, {DType::I16, {"I16", 2}}, {DType::I8, {"I8", 1}},
        {DType::U8, {"U8", 1}},   {DType::BOOL, {"BOOL", 1}},
    };
    for (const auto& [dtype, expected] : table) {
        EXPECT_STREQ(dtype_name(dtype), expected.first);
        EXPECT_EQ(dtype_size(dtype), expected.second);
        EXPECT_EQ(dtype_from_name(expected.first), dtype);
    }
    EXPECT_FALSE(dtype_from_name("f32").has_value());
    EXPECT_FALSE(dtype_from_name("F8_E4M3").has_value());
}
