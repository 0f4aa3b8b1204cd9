// Weight sources hand matrices out as views of the mapped file (no copy) when they are used on the host
// as the file stores them and the mapping only picks bytes and a shape; otherwise they copy, as before.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/resident_set.h"
#include "../io/io_test_util.h"
#include "io/safetensors.h"
#include "kiln/error.h"
#include "models/weight_source.h"

using namespace kiln;
using kiln::test::TempDir;

namespace {

std::shared_ptr<const SafetensorsFile> file_of(const TempDir& dir, DType dtype) {
    const std::string path = dir.file("w.safetensors");
    Tensor fused({6, 2}), conv({2, 2, 1, 1}), proj({2, 3}), bias({2});
    for (Tensor* t : {&fused, &conv, &proj, &bias})
        for (int64_t i = 0; i < t->numel(); ++i) (*t)[i] = 0.25f * float(i + 1);
    write_safetensors(path, {{"fused", fused}, {"conv", conv}, {"proj", proj}, {"bias", bias}}, dtype);
    return std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path));
}

bool inside(const Tensor& t, const SafetensorsFile& f, const std::string& name) {
    const void* p = t.dtype() == DType::F32 ? static_cast<const void*>(t.data()) : t.bits16();
    return t.is_view() && p >= f.raw(name) && p < f.raw(name) + f.info(name).nbytes;
}

}  // namespace

TEST(WeightViews, FileSourceMatricesAreViewsOfTheFile) {
    TempDir dir;
    const auto file = file_of(dir, DType::F16);
    FileSource source(file);
    WeightReader r(source);
    const Tensor w = r.get_matrix("proj", {2, 3});
    EXPECT_TRUE(inside(w, *file, "proj"));
    EXPECT_EQ(w.to_f32()[5], 1.5f);
    EXPECT_FALSE(r.get("bias", {2}).is_view());  // vectors are float32 copies (fp16 in the file)

    // --weights in the stored precision changes nothing; another precision converts, so it copies.
    source.weights_dtype = DType::F16;
    EXPECT_TRUE(inside(WeightReader(source).get_matrix("proj", {2, 3}), *file, "proj"));
    source.weights_dtype = DType::BF16;
    const Tensor converted = WeightReader(source).get_matrix("proj", {2, 3});
    EXPECT_FALSE(converted.is_view());
    EXPECT_EQ(converted.dtype(), DType::BF16);
}

TEST(WeightViews, MappedSourceViewsWhatNeedsNoArithmetic) {
    TempDir dir;
    for (DType dtype : {DType::F16, DType::F32}) {
        const auto file = file_of(dir, dtype);
        std::map<std::string, WeightMapping> table;
        table["copy"] = {"proj", WeightMapping::Op::Copy};
        table["squeezed"] = {"conv", WeightMapping::Op::Squeeze};
        table["k"] = {"fused", WeightMapping::Op::RowSlice, 1, 3};
        table["transposed"] = {"proj", WeightMapping::Op::Transpose};
        const MappedSource source(file, table, "test");
        WeightReader r(source);
        EXPECT_TRUE(inside(r.get_matrix("copy", {2, 3}), *file, "proj")) << dtype_name(dtype);
        const Tensor squeezed = r.get_matrix("squeezed", {2, 2});
        EXPECT_TRUE(inside(squeezed, *file, "conv"));
        const Tensor k = r.get_matrix("k", {2, 2});
        EXPECT_TRUE(inside(k, *file, "fused"));
        EXPECT_EQ(k.to_f32()[0], 0.25f * 5);  // row 2 of 6: the second of three parts
        const Tensor t = r.get_matrix("transposed", {3, 2});
        EXPECT_FALSE(t.is_view());
        EXPECT_EQ(t.to_f32()[1], 0.25f * 4);  // proj[1][0]
    }
}

TEST(WeightViews, AFusedTensorThatDoesNotSplitIsStillNamed) {
    TempDir dir;
    const auto file = file_of(dir, DType::F16);
    std::map<std::string, WeightMapping> table;
    table["q"] = {"proj", WeightMapping::Op::RowSlice, 0, 3};  // 2 rows do not split into 3
    const MappedSource source(file, table, "test");
    WeightReader r(source);
    const Error e = kiln::test::expect_error([&] { (void)r.get_matrix("q"); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidModel);
    EXPECT_NE(std::string(e.what()).find("does not split into 3 parts"), std::string::npos) << e.what();
}

namespace {

using kiln::test::resident_file_bytes;

}  // namespace

// Stacked matrices are copied into one tensor at once, so they are read as copies (whose pages the file
// source drops), not as views: a view's pages would stay resident beside the stack with nothing reading
// them again, holding the weights twice.
TEST(WeightViews, StackedMatricesHoldTheirBytesOnce) {
    if (resident_file_bytes() < 0) GTEST_SKIP() << "no /proc/self/status RssFile here";
    TempDir dir;
    const std::string path = dir.file("parts.safetensors");
    constexpr int kParts = 8;
    constexpr int64_t kRows = 1024, kCols = 4096;  // 8 MiB of F16 each, 64 MiB in all
    std::vector<std::string> names;
    {
        std::vector<std::pair<std::string, Tensor>> tensors;
        for (int i = 0; i < kParts; ++i) {
            names.push_back("p" + std::to_string(i));
            tensors.emplace_back(names.back(), Tensor::filled({kRows, kCols}, 0.5f + float(i)));
        }
        write_safetensors(path, tensors, DType::F16);
    }
    FileSource source(std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path)));
    WeightReader r(source);
    // The file's pages, not the whole resident set: the parts are freed once stacked, and freed heap
    // blocks may stay resident (under AddressSanitizer all do), which says nothing about the file.
    const int64_t before = resident_file_bytes();
    const Tensor stack = r.get_matrix_stack(names, {kRows, kCols});
    const int64_t grown = resident_file_bytes() - before, bytes = kParts * kRows * kCols * 2;
    EXPECT_FALSE(stack.is_view());
    EXPECT_EQ(stack.to_f32()[stack.numel() - 1], 7.5f);
    std::printf("[ pages ] stacking %lld bytes of F16 grew the file-backed resident set by %lld bytes\n",
                static_cast<long long>(bytes), static_cast<long long>(grown));
    // Views would leave all the file's pages resident (bytes); dropped copies leave none but code pages
    // the call faults in. Less than one part's pages: a single part left behind fails it.
    EXPECT_LT(grown, bytes / kParts);
}
