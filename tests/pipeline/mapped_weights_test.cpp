// A model loaded from a file whose data is aligned uses its matrices where they lie in the mapped file;
// one whose data is not copies them. Both must give the same images bit for bit, the views must hold
// the file mapped for as long as the model lives, and the weights kiln allocates must shrink by the
// matrices' bytes.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli/test_files.h"
#include "common/fixtures.h"
#include "core/memory.h"
#include "models/model.h"
#include "pipeline/generate.h"

using namespace kiln;
using kiln::test::data_path;

namespace {

int64_t current(MemoryCategory c) { return memory_stats().device("cpu")[c].current; }

// A copy of `path` whose header is one byte longer (JSON allows the space), so that the data area
// starts at an odd address in the mapping and no 16-bit or float32 value is aligned.
std::string misaligned_copy(const std::string& path, const kiln::test::TempDir& dir) {
    const std::string bytes = kiln::test::read_bytes(path);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[size_t(i)]);
    std::string header = bytes.substr(8, n) + " ";
    if ((8 + header.size()) % 2 == 0) header += " ";
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[size_t(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    const std::string copy = (dir.path() / std::filesystem::path(path).filename()).string();
    kiln::test::write_bytes(copy, out + header + bytes.substr(8 + n));
    return copy;
}

GenerationRequest call() {
    GenerationRequest r;
    r.prompt = "a red circle";
    r.width = 64;
    r.height = 64;
    r.steps = 3;
    r.seed = 7;
    return r;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) { return a.shape() == b.shape() && a.values() == b.values(); }

}  // namespace

TEST(MappedWeights, ViewsAndCopiesGiveTheSameImages) {
    for (const char* model : {"sd15-mini", "sd2-mini", "sdxl-mini"}) {
        kiln::test::TempDir dir;
        const std::string aligned = data_path(std::string(model) + "/" + model + ".safetensors");
        const std::string odd = misaligned_copy(aligned, dir);
        LoadOptions options;
        if (std::string(model) == "sd2-mini") options.prediction = "v_prediction";

        const int64_t weights_before = current(MemoryCategory::Weights);
        const int64_t mapped_before = current(MemoryCategory::MappedFile);
        std::optional<StableDiffusionModel> viewed = load_model(aligned, options);
        const int64_t viewed_weights = current(MemoryCategory::Weights) - weights_before;
        // The loader is done with the file, but the model's weights still read it.
        const int64_t mapped = current(MemoryCategory::MappedFile) - mapped_before;
        StableDiffusionModel copied = load_model(odd, options);
        const int64_t copied_weights = current(MemoryCategory::Weights) - weights_before - viewed_weights;
        EXPECT_EQ(current(MemoryCategory::MappedFile) - mapped_before, mapped) << model << ": copies are not views";
        std::printf("[ mapped ] %s: weights %lld bytes allocated + %lld mapped with views, %lld allocated with "
                    "copies\n",
                    model, static_cast<long long>(viewed_weights), static_cast<long long>(mapped),
                    static_cast<long long>(copied_weights));
        EXPECT_GT(mapped, 0) << model;
        // Viewed matrices are as large in the file as copied ones in memory (both in the stored precision).
        EXPECT_EQ(viewed_weights + mapped, copied_weights) << model;

        {
            const GenerationResult a = generate(*viewed, call()), b = generate(copied, call());
            EXPECT_TRUE(bitwise_equal(a.final_latent, b.final_latent)) << model;
            EXPECT_TRUE(bitwise_equal(a.image, b.image)) << model;
        }
        // Running reads the views; nothing may have turned them into copies (a write would).
        EXPECT_EQ(current(MemoryCategory::MappedFile) - mapped_before, mapped) << model;

        viewed.reset();
        EXPECT_EQ(current(MemoryCategory::MappedFile), mapped_before) << model;
    }
}
