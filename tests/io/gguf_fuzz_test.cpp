// Deterministic fuzzing of the GGUF reader through SafetensorsFile::open + load(): whatever the bytes, the
// result is a valid file or a kiln::Error, never another exception, a crash or (under ASan/UBSan) a read
// outside the file. The approach of safetensors_fuzz_test.cpp: mutate a seed, truncate it, vary its counts.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "io/safetensors.h"
#include "gguf_test_util.h"
#include "fuzz_outcome.h"
#include "io_test_util.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// Metadata of every kind (scalars, strings, an array of strings, a nested array, a bool) and tensors of the
// dtypes kiln reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K ... Q6_K, I8), one of them empty.
constexpr size_t kSeedData = 1646;
std::string seed_file() {
    std::vector<std::string> kvs = {
        kv_string("general.architecture", "fuzz"), kv_u32("general.alignment", 32),
        gguf_str("f.i8") + le(1, 4) + le(0xfe, 1), gguf_str("f.f64") + le(12, 4) + le(0x3ff0000000000000ull, 8),
        gguf_str("f.bool") + le(7, 4) + le(1, 1),
        gguf_str("f.strs") + le(9, 4) + le(8, 4) + le(2, 8) + gguf_str("ab") + gguf_str("c"),
        gguf_str("f.nest") + le(9, 4) + le(9, 4) + le(1, 8) + le(4, 4) + le(2, 8) + le(7, 4) + le(9, 4)};
    std::vector<GgufTensorSpec> t = {
        {"a", {32, 2}, 0, 0},   {"b", {3}, 1, 256},    {"c", {2, 1}, 30, 288}, {"q8", {64}, 8, 320},
        {"q4", {32, 2}, 2, 416}, {"q41", {32}, 3, 480}, {"i", {5}, 24, 512},   {"e", {0, 32}, 8, 544},
        {"q50", {32}, 6, 576},   {"q51", {32}, 7, 608}, {"q4k", {256}, 12, 640}, {"q5k", {256}, 13, 800},
        {"q6k", {256, 2}, 14, 992}, {"q2k", {256}, 10, 1440}, {"q3k", {256}, 11, 1536}};  // 1536 + 110 = kSeedData
    std::string data(kSeedData, '\0');
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 29 + 3);
    return gguf_bytes(kvs, t, data);
}

using kiln::test::Outcome;

// Opens and fully reads the file; any escape other than kiln::Error fails the test.
Outcome open_and_load_everything(const std::string& path, const std::string& what) {
    return kiln::test::fuzz_outcome(what, [&] {
        SafetensorsFile f = SafetensorsFile::open(path);
        for (const std::string& name : f.names()) {
            const TensorInfo& info = f.info(name);
            EXPECT_LE(info.offset + info.nbytes, f.file_size()) << what << " " << name;
            const uint8_t* p = f.raw(name);
            volatile uint8_t sink = 0;
            for (uint64_t i = 0; i < info.nbytes; ++i) sink = sink ^ p[i];  // ASan checks each byte
            Tensor t = f.load(name);  // every dtype a GGUF file can hold here decodes
            EXPECT_EQ(t.shape(), info.shape) << what;
            Tensor s = f.load_stored(name);
            EXPECT_EQ(s.numel(), t.numel()) << what;
        }
    });
}

}  // namespace

TEST(GgufFuzz, MutatedFilesOpenOrThrowKilnError) {
    const auto start = std::chrono::steady_clock::now();
    TempDir dir;
    const std::string path = dir.file("fuzz.gguf");
    const std::string seed = seed_file();
    write_bytes(path, seed);
    ASSERT_EQ(open_and_load_everything(path, "seed"), Outcome::Valid);
    const size_t header_end = seed.size() - kSeedData;

    std::mt19937 gen(22);  // the same sequence everywhere; draws reduced by hand, as <random>'s distributions differ
    auto below = [&](uint32_t n) { return uint32_t(gen() % n); };
    int valid = 0, rejected = 0;
    auto run = [&](const std::string& bytes, const std::string& what) {
        write_bytes(path, bytes);
        (open_and_load_everything(path, what) == Outcome::Valid ? valid : rejected)++;
    };

    // Byte mutations of the header and infos: random bytes, bit flips, and small changes to one byte (which
    // keep lengths and counts plausible and so reach the later checks).
    for (int iter = 0; iter < 3000; ++iter) {
        std::string bytes = seed;
        const int edits = 1 + int(below(3));
        for (int k = 0; k < edits; ++k) {
            const size_t pos = 4 + below(uint32_t(header_end - 4));
            switch (below(3)) {
                case 0: bytes[pos] = char(below(256)); break;
                case 1: bytes[pos] = char(bytes[pos] ^ (1 << below(8))); break;
                case 2: bytes[pos] = char(bytes[pos] + int(below(5)) - 2); break;
            }
        }
        run(bytes, "mutation " + std::to_string(iter));
    }
    // Truncation at every length.
    for (size_t len = 0; len < seed.size(); ++len) run(seed.substr(0, len), "truncated to " + std::to_string(len));
    // Counts: near the truth, random, enormous.
    for (int iter = 0; iter < 400; ++iter) {
        std::string bytes = seed;
        const uint64_t n = below(2) ? below(16) : (uint64_t(gen()) << 32 | gen());
        bytes.replace(below(2) ? 8 : 16, 8, le(n, 8));
        run(bytes, "count " + std::to_string(n));
    }
    EXPECT_GT(valid, 100);
    EXPECT_GT(rejected, 1000);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("gguf fuzz: %d valid, %d rejected in %.2f s\n", valid, rejected, seconds);
}
