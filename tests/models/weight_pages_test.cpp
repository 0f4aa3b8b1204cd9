// WeightPages drops the pages of a component's mapped weights from the resident set and leaves their values
// readable: the kernel maps them in again from the page cache.
#include <gtest/gtest.h>

#include <memory>

#include "common/resident_set.h"
#include "io/safetensors.h"
#include "../io/io_test_util.h"
#include "models/weight_source.h"

using namespace kiln;
using kiln::test::resident_file_bytes;
using kiln::test::TempDir;

namespace {

constexpr int kParts = 4;
constexpr int64_t kRows = 1024, kCols = 2048;  // 4 MiB of F16 each
constexpr int64_t kPartBytes = kRows * kCols * 2;

// Reads every value, so that each page is mapped in.
double touch(const Tensor& t) {
    double sum = 0;
    for (int64_t i = 0; i < t.numel(); i += 512) sum += t.bits16()[i];
    return sum;
}

}  // namespace

TEST(WeightPages, DropTakesAViewsPagesOutOfTheResidentSetAndKeepsItsValues) {
    if (resident_file_bytes() < 0) GTEST_SKIP() << "no /proc/self/status RssFile here";
    TempDir dir;
    const std::string path = dir.file("parts.safetensors");
    {
        std::vector<std::pair<std::string, Tensor>> tensors;
        for (int i = 0; i < kParts; ++i)
            tensors.emplace_back("block" + std::to_string(i) + ".weight", Tensor::filled({kRows, kCols}, 1.0f + i));
        write_safetensors(path, tensors, DType::F16);
    }
    FileSource source(std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path)));
    WeightReader r(source);
    std::vector<Tensor> parts;
    for (int i = 0; i < kParts; ++i) parts.push_back(r.get_matrix("block" + std::to_string(i) + ".weight"));
    const WeightPages pages = r.take_pages();
    ASSERT_EQ(pages.ranges().size(), size_t(kParts));
    EXPECT_EQ(pages.bytes(), kParts * kPartBytes);
    EXPECT_EQ(pages.bytes_with_prefix("block2."), kPartBytes);

    double sums[kParts];
    for (int i = 0; i < kParts; ++i) sums[i] = touch(parts[size_t(i)]);
    const int64_t all_in = resident_file_bytes();
    pages.drop("block1.");
    const int64_t one_out = resident_file_bytes();
    pages.drop();
    const int64_t all_out = resident_file_bytes();
    std::printf("[ pages ] resident file pages: %lld, %lld after dropping one part, %lld after all\n",
                static_cast<long long>(all_in), static_cast<long long>(one_out), static_cast<long long>(all_out));
    // A part's pages go, and at most a page on either side of it more (neighbours share a page).
    EXPECT_GE(all_in - one_out, kPartBytes);
    EXPECT_LE(all_in - one_out, kPartBytes + 2 * 4096 * 16);
    EXPECT_GE(all_in - all_out, kParts * kPartBytes);
    for (int i = 0; i < kParts; ++i) EXPECT_EQ(touch(parts[size_t(i)]), sums[i]) << "part " << i;
}

// Views the source does not vouch for as file pages (memory the process wrote) are never recorded: dropping
// them would zero them.
TEST(WeightPages, OnlyFileSourcesRecordPages) {
    struct HeapViews : WeightSource {
        std::shared_ptr<std::vector<uint16_t>> bits = std::make_shared<std::vector<uint16_t>>(4096, 0x3c00);
        bool has(const std::string&) const override { return true; }
        Tensor load(const std::string&) const override {
            return Tensor::view({64, 64}, DType::F16, std::shared_ptr<const void>(bits, bits->data()),
                                MemoryCategory::Weights);
        }
        std::vector<std::string> names() const override { return {"w"}; }
        std::string describe() const override { return "heap"; }
    } source;
    WeightReader r(source);
    const Tensor w = r.get_matrix("w");
    EXPECT_TRUE(w.is_view());
    EXPECT_TRUE(r.take_pages().empty());
}
