// Every malformed-file case open() must reject with a kiln::Error naming the file and the tensor.
#include <gtest/gtest.h>

#include "io/safetensors.h"
#include "io_test_util.h"

using namespace kiln;
using kiln::test::expect_error;
using kiln::test::le64;
using kiln::test::safetensors_bytes;
using kiln::test::TempDir;
using kiln::test::write_bytes;

namespace {

class SafetensorsInvalid : public ::testing::Test {
protected:
    // Writes the bytes, opens them, and checks the error is InvalidModel, one line, and mentions
    // the file and every one of `mentions`.
    void expect_rejected(const std::string& bytes, std::initializer_list<std::string> mentions,
                         ErrorKind kind = ErrorKind::InvalidModel) {
        write_bytes(path_, bytes);
        Error e = expect_error([&] { SafetensorsFile::open(path_); });
        const std::string msg = e.what();
        EXPECT_EQ(e.kind(), kind) << msg;
        EXPECT_NE(msg.find(path_), std::string::npos) << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
        for (const std::string& m : mentions) EXPECT_NE(msg.find(m), std::string::npos) << "'" << m << "' not in: " << msg;
    }
    void expect_header_rejected(const std::string& header, const std::string& data,
                                std::initializer_list<std::string> mentions) {
        expect_rejected(safetensors_bytes(header, data), mentions);
    }
    void expect_accepted(const std::string& header, const std::string& data) {
        write_bytes(path_, safetensors_bytes(header, data));
        SafetensorsFile f = SafetensorsFile::open(path_);
        for (const std::string& name : f.names()) f.load(name);
    }

    TempDir dir_;
    std::string path_ = dir_.file("bad.safetensors");
};

const std::string k4Bytes(4, '\0');

}  // namespace

TEST_F(SafetensorsInvalid, MissingFileIsAnIOError) {
    Error e = expect_error([&] { SafetensorsFile::open(dir_.file("nope.safetensors")); });
    EXPECT_EQ(e.kind(), ErrorKind::IO);
    EXPECT_NE(std::string(e.what()).find("nope.safetensors"), std::string::npos) << e.what();
}

TEST_F(SafetensorsInvalid, DirectoryIsAnIOError) {
    Error e = expect_error([&] { SafetensorsFile::open(dir_.path().string()); });
    EXPECT_EQ(e.kind(), ErrorKind::IO);
    EXPECT_NE(std::string(e.what()).find(dir_.path().string()), std::string::npos) << e.what();
}

TEST_F(SafetensorsInvalid, FileShorterThan8Bytes) {
    for (size_t n = 0; n < 8; ++n) expect_rejected(std::string(n, '\x01'), {"8"});
}

TEST_F(SafetensorsInvalid, HeaderLengthZero) { expect_rejected(le64(0) + "{}", {"header length is 0"}); }

TEST_F(SafetensorsInvalid, HeaderLengthLargerThanFile) {
    expect_rejected(le64(3) + "{}", {"header length 3", "larger than the file"});
    expect_rejected(le64(1000) + "{}", {"header length 1000"});
}

TEST_F(SafetensorsInvalid, HeaderLengthAbsurd) {
    expect_rejected(le64(100'000'001) + "{}", {"100000001", "absurd"});
    expect_rejected(le64(UINT64_MAX) + "{}", {"absurd"});
    expect_rejected("GIF89a\x01\x02 some other kind of file", {"absurd"});
}

TEST_F(SafetensorsInvalid, HeaderNotJson) {
    expect_header_rejected("{\"a\":", "", {"not valid JSON"});
    expect_header_rejected("{\"a\":{}} trailing", "", {"not valid JSON"});
    expect_header_rejected(std::string("{\0}", 3), "", {"not valid JSON"});
    expect_header_rejected("{\"\xff\":{}}", "", {"not valid JSON"});  // JSON text must be UTF-8
}

TEST_F(SafetensorsInvalid, HeaderNotAnObject) {
    expect_header_rejected("[]", "", {"not a JSON object", "array"});
    expect_header_rejected("\"tensor\"", "", {"not a JSON object"});
    expect_header_rejected("7", "", {"not a JSON object"});
}

TEST_F(SafetensorsInvalid, EntryNotAnObject) {
    expect_header_rejected("{\"w\":[1,2]}", "", {"'w'", "not an object"});
    expect_header_rejected("{\"w\":null}", "", {"'w'", "not an object"});
}

TEST_F(SafetensorsInvalid, UnknownDtypeIsNamed) {
    expect_header_rejected("{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[0,4]}}", k4Bytes,
                           {"'w'", "unknown dtype", "F8_E4M3"});
    expect_header_rejected("{\"w\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", k4Bytes,
                           {"'w'", "'f32'"});
}

TEST_F(SafetensorsInvalid, DeeplyNestedJsonIsRejectedWithoutExhaustingTheStack) {
    const size_t depth = 100000;
    expect_header_rejected("{\"w\":" + std::string(depth, '[') + std::string(depth, ']') + "}", "",
                           {"'w'", "not an object"});
    expect_header_rejected(std::string(depth, '['), "", {"not valid JSON"});
}

TEST_F(SafetensorsInvalid, DtypeMissingOrNotAString) {
    expect_header_rejected("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", k4Bytes, {"'w'", "no dtype"});
    expect_header_rejected("{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", k4Bytes,
                           {"'w'", "dtype is not a string"});
}

TEST_F(SafetensorsInvalid, ShapeNotAnArrayOfNonNegativeIntegers) {
    const std::string pre = "{\"w\":{\"dtype\":\"F32\",\"shape\":";
    const std::string post = ",\"data_offsets\":[0,4]}}";
    expect_header_rejected("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", k4Bytes, {"'w'", "no shape"});
    expect_header_rejected(pre + "4" + post, k4Bytes, {"'w'", "shape is not an array"});
    expect_header_rejected(pre + "[-1]" + post, k4Bytes, {"'w'", "non-negative integers"});
    expect_header_rejected(pre + "[1.5]" + post, k4Bytes, {"'w'", "non-negative integers"});
    expect_header_rejected(pre + "[1e0]" + post, k4Bytes, {"'w'", "non-negative integers"});
    expect_header_rejected(pre + "[\"1\"]" + post, k4Bytes, {"'w'", "non-negative integers"});
    expect_header_rejected(pre + "[[1]]" + post, k4Bytes, {"'w'", "non-negative integers"});
    expect_header_rejected(pre + "[true]" + post, k4Bytes, {"'w'", "non-negative integers"});
    expect_header_rejected(pre + "[9223372036854775808]" + post, k4Bytes, {"'w'", "non-negative integers"});
    expect_header_rejected(pre + "[99999999999999999999999]" + post, k4Bytes, {"'w'", "non-negative integers"});
}

TEST_F(SafetensorsInvalid, NumelOverflow) {
    const std::string post = ",\"data_offsets\":[0,4]}}";
    expect_header_rejected("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296]" + post, k4Bytes,
                           {"'w'", "too many elements"});
    // In range as an element count, but not as a byte count.
    expect_header_rejected("{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904]" + post, k4Bytes,
                           {"'w'", "needs"});
    // Overflow before a zero dimension: shape_numel() multiplies left to right, so this must go too.
    expect_header_rejected("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,0]" + post, k4Bytes,
                           {"'w'", "too many elements"});
}

TEST_F(SafetensorsInvalid, DataOffsetsNotTwoIntegers) {
    const std::string pre = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":";
    expect_header_rejected("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", k4Bytes, {"'w'", "no data_offsets"});
    for (const std::string bad : {"[0]", "[0,4,8]", "[]", "4", "[\"0\",4]", "[-1,3]", "[0.0,4]", "[0,null]"})
        expect_header_rejected(pre + bad + "}}", k4Bytes, {"'w'", "two non-negative integers"});
}

TEST_F(SafetensorsInvalid, DataOffsetsBeginAfterEnd) {
    expect_header_rejected("{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,0]}}", k4Bytes,
                           {"'w'", "begin 4 is after end 0"});
}

TEST_F(SafetensorsInvalid, DataOffsetsBeyondTheDataArea) {
    expect_header_rejected("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", k4Bytes,
                           {"'w'", "end 8", "data area of 4 bytes"});
    expect_header_rejected("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[5,5]}}", k4Bytes, {"'w'"});
    expect_header_rejected(
        "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[18446744073709551614,18446744073709551615]}}",
        k4Bytes, {"'w'"});
}

TEST_F(SafetensorsInvalid, ByteSizeDisagreesWithShape) {
    expect_header_rejected("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", k4Bytes,
                           {"'w'", "4 bytes of data", "[2]", "F32"});
    expect_header_rejected("{\"w\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,4]}}", k4Bytes, {"'w'"});
}

TEST_F(SafetensorsInvalid, OverlappingTensors) {
    const std::string data(12, '\0');
    expect_header_rejected(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
        data, {"'a'", "'b'", "overlapping"});
    // Identical ranges overlap too.
    expect_header_rejected(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
        data, {"'a'", "'b'", "overlapping"});
}

TEST_F(SafetensorsInvalid, DuplicateTensorNames) {
    expect_header_rejected(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}",
        "", {"'a'", "twice"});
}

TEST_F(SafetensorsInvalid, MetadataNotAStringMap) {
    expect_header_rejected("{\"__metadata__\":[\"pt\"]}", "", {"__metadata__", "not an object"});
    expect_header_rejected("{\"__metadata__\":\"pt\"}", "", {"__metadata__"});
    expect_header_rejected("{\"__metadata__\":{\"format\":\"pt\",\"epoch\":3}}", "", {"__metadata__", "'epoch'"});
    expect_header_rejected("{\"__metadata__\":{\"nested\":{}}}", "", {"'nested'", "not a string"});
}

TEST_F(SafetensorsInvalid, NamesWithControlCharactersStayOnOneLine) {
    expect_header_rejected("{\"line\\nbreak\":{\"dtype\":\"X\",\"shape\":[],\"data_offsets\":[0,0]}}", "",
                           {"'line\\x0abreak'"});
}

TEST_F(SafetensorsInvalid, MissingTensorNamesTensorAndFile) {
    write_bytes(path_, safetensors_bytes("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", k4Bytes));
    SafetensorsFile f = SafetensorsFile::open(path_);
    EXPECT_FALSE(f.has("v"));
    for (int which = 0; which < 3; ++which) {
        Error e = expect_error([&] {
            if (which == 0) f.info("v");
            if (which == 1) f.load("v");
            if (which == 2) f.raw("v");
        });
        EXPECT_EQ(e.kind(), ErrorKind::InvalidModel);
        EXPECT_NE(std::string(e.what()).find("'v'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(path_), std::string::npos) << e.what();
    }
}

// Things that look odd but are valid safetensors.
TEST_F(SafetensorsInvalid, EmptyTensorsAndPaddingAreValid) {
    expect_accepted("{}", "");
    expect_accepted("{}      ", "");  // whitespace padding after the object
    expect_accepted("{\"__metadata__\":{}}", "");
    // Zero-element tensors anywhere in the data area, even at its very end or inside another's range.
    expect_accepted(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[4,4]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"c\":{\"dtype\":\"F16\",\"shape\":[0],\"data_offsets\":[4,4]},"
        "\"d\":{\"dtype\":\"BF16\",\"shape\":[2,0],\"data_offsets\":[2,2]},"
        "\"e\":{\"dtype\":\"I64\",\"shape\":[0,9223372036854775807],\"data_offsets\":[0,0]}}",
        k4Bytes);
    // Adjacent (touching) ranges and unused bytes between tensors.
    expect_accepted(
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]},"
        "\"c\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[6,8]}}",
        std::string(8, '\x05'));
    SafetensorsFile f = SafetensorsFile::open(path_);
    EXPECT_EQ(f.load("c").values(), (std::vector<float>{5, 5}));
}
