// kiln's GGUF reader and block formats against gguf-py, an independent implementation of both: the file
// tests/data/gguf/reference.gguf and what gguf-py's reader saw in it (reference.expected) were written by
// scripts/make-gguf-fixtures.py.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "core/dtype_convert.h"
#include "core/half.h"
#include "io/gguf.h"
#include "io/mapped_tensor.h"
#include "io/safetensors.h"
#include "io_test_util.h"

using namespace kiln;
using kiln::test::TempDir;

namespace {

const std::string kFile = std::string(KILN_GGUF_DATA) + "/reference.gguf";

std::shared_ptr<const SafetensorsFile> open_shared(const std::string& path) {
    return std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path));
}

std::string read_all(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

Shape parse_shape(const std::string& s) {
    Shape out;
    std::stringstream in(s);
    for (std::string d; std::getline(in, d, ',');) out.push_back(std::stoll(d));
    return out;
}

}  // namespace

// Every tensor gguf-py's reader lists, with its type, shape (outermost first), offset and size; every
// scalar and string metadata value as gguf-py decoded it.
TEST(GgufReference, ReaderSeesWhatGgufPySees) {
    SafetensorsFile f = SafetensorsFile::open(kFile);
    EXPECT_TRUE(f.is_gguf());
    std::ifstream expected(std::string(KILN_GGUF_DATA) + "/reference.expected");
    ASSERT_TRUE(expected.good());
    int tensors = 0, values = 0;
    for (std::string line; std::getline(expected, line);) {
        std::stringstream in(line);
        std::string kind, name;
        in >> kind >> name;
        if (kind == "tensor") {
            std::string type, shape;
            uint64_t offset, nbytes;
            in >> type >> shape >> offset >> nbytes;
            const TensorInfo& ti = f.info(name);
            EXPECT_EQ(dtype_name(ti.dtype), type) << name;
            EXPECT_EQ(ti.shape, parse_shape(shape)) << name;
            EXPECT_EQ(ti.offset, offset) << name;
            EXPECT_EQ(ti.nbytes, nbytes) << name;
            ++tensors;
        } else if (kind == "string" || kind == "scalar") {
            std::string value;
            std::getline(in, value);
            value.erase(0, 1);
            ASSERT_TRUE(f.metadata().count(name)) << name;
            std::string ours = f.metadata().at(name);
            if (value == "True" || value == "False") value = value == "True" ? "true" : "false";
            if (name == "kiln.test.float32") EXPECT_EQ(std::stod(ours), std::stod(value));
            else EXPECT_EQ(ours, value) << name;
            ++values;
        } else if (kind == "array") {
            uint64_t count;
            in >> count;
            ASSERT_TRUE(f.metadata().count(name)) << name;
            EXPECT_EQ(f.metadata().at(name).find("[" + std::to_string(count) + " x"), 0u) << f.metadata().at(name);
        }
    }
    EXPECT_EQ(tensors, int(f.names().size()));
    EXPECT_GT(values, 4);
}

// kiln's quantization of x gives gguf-py's blocks byte for byte, and kiln's dequantization of those blocks
// gives gguf-py's floats exactly (both follow ggml's reference rules; no tolerance is needed).
TEST(GgufReference, BlocksMatchGgufPy) {
    SafetensorsFile f = SafetensorsFile::open(kFile);
    const Tensor x = f.load("x");
    for (const char* q : {"q8_0", "q4_0", "q4_1"}) {
        const std::string name = std::string("x.") + q;
        const TensorInfo& ti = f.info(name);
        const Tensor ours = x.converted(ti.dtype);
        ASSERT_EQ(uint64_t(dtype_storage_bytes(ti.dtype, x.numel())), ti.nbytes);
        EXPECT_EQ(0, std::memcmp(ours.blocks(), f.raw(name), ti.nbytes)) << name;
        const Tensor decoded = f.load(name);
        const Tensor theirs = f.load(name + ".dequantized");
        for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(decoded[i], theirs[i]) << name << " " << i;
        // Kept as blocks: load_stored, and a view of the mapping with no copy.
        const Tensor stored = f.load_stored(name);
        EXPECT_EQ(stored.dtype(), ti.dtype);
        EXPECT_EQ(0, std::memcmp(stored.blocks(), f.raw(name), ti.nbytes));
    }
    auto shared = open_shared(kFile);
    std::optional<Tensor> view = mapped_tensor(shared, "x.q4_1");
    ASSERT_TRUE(view.has_value());
    EXPECT_TRUE(view->is_view());
    EXPECT_EQ(view->blocks(), shared->raw("x.q4_1"));
    std::optional<Tensor> rows = mapped_rows(shared, "x.q8_0", 2, 2);
    ASSERT_TRUE(rows.has_value());
    EXPECT_EQ(rows->blocks(), shared->raw("x.q8_0") + 2 * 3 * 34);  // two rows of three blocks
    const Tensor all = shared->load("x.q8_0.dequantized"), some = rows->to_f32();
    for (int64_t i = 0; i < some.numel(); ++i) ASSERT_EQ(some[i], all[2 * 96 + i]);
    // Float32 accessors refuse blocks rather than read them as floats.
    try {
        (void)view->data();
        ADD_FAILURE() << "data() of a Q4_1 tensor";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
    }
}

TEST(GgufReference, SixteenBitTensors) {
    SafetensorsFile f = SafetensorsFile::open(kFile);
    const Tensor h = f.load("f16");
    for (int i = 0; i < 12; ++i) EXPECT_EQ(h[i], float(i - 6) / 4.0f);
    const Tensor b = f.load("bf16");
    EXPECT_EQ(b[0], 1.5f);
    EXPECT_EQ(b[1], -2.0f);
    EXPECT_EQ(b[3], bf16_to_float(float_to_bf16(1e-3f)));
}

// Version 2 differs from 3 only in allowing big-endian files (GGUF's docs): a v2 little-endian file is the
// same bytes with another version number.
TEST(GgufReference, ReadsVersion2) {
    TempDir dir;
    std::string bytes = read_all(kFile);
    bytes[4] = 2;
    const std::string path = dir.file("v2.gguf");
    kiln::test::write_bytes(path, bytes);
    SafetensorsFile f = SafetensorsFile::open(path);
    EXPECT_EQ(f.names().size(), SafetensorsFile::open(kFile).names().size());
    EXPECT_EQ(f.load("x")[5], SafetensorsFile::open(kFile).load("x")[5]);
}
