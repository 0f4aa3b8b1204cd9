// Tensors used where they lie in a mapped safetensors file (io/mapped_tensor.h): no copy when the data
// is aligned for its dtype, nothing (the caller copies) when it is not, and the mapping lives as long
// as any view of it.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/memory.h"
#include "io/mapped_tensor.h"
#include "io/safetensors.h"
#include "io_test_util.h"

using namespace kiln;
using kiln::test::TempDir;

namespace {

int64_t mapped_bytes() { return memory_stats().device("cpu")[MemoryCategory::MappedFile].current; }

std::shared_ptr<const SafetensorsFile> open_shared(const std::string& path) {
    return std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path));
}

// Values 0.5, 1.5, ... as `dtype`, in a file kiln writes (data aligned: the header is padded to 8 bytes).
std::string aligned_file(const TempDir& dir, DType dtype) {
    const std::string path = dir.file("aligned.safetensors");
    Tensor m({6, 4}), v({3});
    for (int64_t i = 0; i < m.numel(); ++i) m[i] = 0.5f + float(i);
    write_safetensors(path, {{"v", v}, {"m", m}}, dtype);
    return path;
}

}  // namespace

TEST(MappedTensor, AlignedTensorsAreViewsIntoTheMapping) {
    TempDir dir;
    for (DType dtype : {DType::F16, DType::BF16, DType::F32}) {
        const auto file = open_shared(aligned_file(dir, dtype));
        const std::optional<Tensor> m = mapped_tensor(file, "m");
        ASSERT_TRUE(m.has_value()) << dtype_name(dtype);
        EXPECT_TRUE(m->is_view());
        EXPECT_EQ(m->dtype(), dtype);
        EXPECT_EQ(m->shape(), (Shape{6, 4}));
        const void* values = dtype == DType::F32 ? static_cast<const void*>(m->data()) : m->bits16();
        EXPECT_EQ(values, file->raw("m"));  // no copy: the file's own bytes
        const Tensor copy = file->load("m");
        const Tensor read = m->to_f32();
        for (int64_t i = 0; i < copy.numel(); ++i) EXPECT_EQ(read[i], copy[i]) << dtype_name(dtype) << " " << i;
    }
}

// The view's bytes count as mapped (not the whole file: a mapping is address space, its pages the page
// cache's), and the view holds the file mapped after everything else has let it go.
TEST(MappedTensor, AViewKeepsTheFileMapped) {
    TempDir dir;
    const int64_t before = mapped_bytes();
    auto file = open_shared(aligned_file(dir, DType::F16));
    EXPECT_EQ(mapped_bytes(), before);
    std::optional<Tensor> m = mapped_tensor(file, "m");
    std::weak_ptr<const SafetensorsFile> watch = file;
    file.reset();  // the loader is done with the file; the weight is not
    EXPECT_FALSE(watch.expired());
    EXPECT_EQ(mapped_bytes() - before, 6 * 4 * 2);
    EXPECT_EQ(m->to_f32()[23], 23.5f);
    m.reset();
    EXPECT_TRUE(watch.expired());
    EXPECT_EQ(mapped_bytes(), before);
}

TEST(MappedTensor, WritingToAViewWritesACopyNeverTheFile) {
    TempDir dir;
    const auto file = open_shared(aligned_file(dir, DType::F32));
    Tensor m = *mapped_tensor(file, "m");
    m.data()[0] = -7.0f;
    EXPECT_FALSE(m.is_view());
    EXPECT_EQ(mapped_tensor(file, "m")->data()[0], 0.5f);
    EXPECT_EQ(SafetensorsFile::open(dir.file("aligned.safetensors")).load("m")[0], 0.5f);
}

// safetensors does not promise alignment: a 1-byte tensor before them leaves these at odd offsets.
TEST(MappedTensor, MisalignedDataIsNotViewed) {
    TempDir dir;
    std::string header = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                         R"("h":{"dtype":"F16","shape":[2],"data_offsets":[1,5]},)"
                         R"("f":{"dtype":"F32","shape":[1],"data_offsets":[5,9]}})";
    header.resize((header.size() + 7) / 8 * 8, ' ');  // the data area itself starts aligned
    const std::string data = std::string("\x07", 1) + std::string("\x00\x3c\x00\xc0", 4) + std::string("\x00\x00\x80\x3f", 4);
    kiln::test::write_bytes(dir.file("odd.safetensors"), kiln::test::safetensors_bytes(header, data));
    const auto file = open_shared(dir.file("odd.safetensors"));
    EXPECT_FALSE(mapped_tensor(file, "h").has_value());
    EXPECT_FALSE(mapped_tensor(file, "f").has_value());
    EXPECT_FALSE(mapped_tensor(file, "a").has_value());  // not a weight dtype
    EXPECT_EQ(file->load_stored("h").to_f32()[1], -2.0f);  // what the caller does instead
    EXPECT_EQ(file->load("f")[0], 1.0f);
}

TEST(MappedTensor, RowsOfATensorAreViewsToo) {
    TempDir dir;
    const auto file = open_shared(aligned_file(dir, DType::F16));
    const std::optional<Tensor> middle = mapped_rows(file, "m", 2, 2);
    ASSERT_TRUE(middle.has_value());
    EXPECT_EQ(middle->shape(), (Shape{2, 4}));
    EXPECT_EQ(static_cast<const void*>(middle->bits16()), file->raw("m") + 2 * 4 * 2);
    EXPECT_EQ(middle->to_f32()[0], 8.5f);
    EXPECT_THROW(mapped_rows(file, "m", 5, 2), Error);
    EXPECT_THROW(mapped_rows(file, "m", -1, 1), Error);
    EXPECT_THROW(mapped_tensor(file, "missing"), Error);
}
