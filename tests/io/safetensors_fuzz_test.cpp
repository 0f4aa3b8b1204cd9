// Deterministic fuzzing of open() + load(): whatever the bytes, the result is a valid file or a
// kiln::Error, never another exception, a crash or (under ASan/UBSan) an out-of-bounds read.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>

#include "io/safetensors.h"
#include "fuzz_outcome.h"
#include "io_test_util.h"

using namespace kiln;
using kiln::test::le64;
using kiln::test::safetensors_bytes;
using kiln::test::TempDir;
using kiln::test::write_bytes;

namespace {

// A small file touching every dtype, an empty tensor, a scalar, metadata and a gap in the data.
std::string seed_file() {
    const std::string header =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
        "\"b\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[16,22]},"
        "\"c\":{\"dtype\":\"BF16\",\"shape\":[1,1],\"data_offsets\":[22,24]},"
        "\"d\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[24,40]},"
        "\"e\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[40,41]},"
        "\"f\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[41,43]},"
        "\"g\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[48,56]},"
        "\"h\":{\"dtype\":\"I8\",\"shape\":[0,5],\"data_offsets\":[56,56]}}";
    std::string data(56, '\0');
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 37 + 11);
    return safetensors_bytes(header, data);
}

using kiln::test::Outcome;

// Opens and fully reads the file; any escape other than kiln::Error fails the test.
Outcome open_and_load_everything(const std::string& path, const std::string& what) {
    return kiln::test::fuzz_outcome(what, [&] {
        SafetensorsFile f = SafetensorsFile::open(path);
        for (const std::string& name : f.names()) {
            const TensorInfo& info = f.info(name);
            // What open() promises: every byte range lies inside the file.
            EXPECT_LE(info.offset + info.nbytes, f.file_size()) << what << " " << name;
            EXPECT_GE(info.offset, 8u) << what;
            const uint8_t* p = f.raw(name);
            volatile uint8_t sink = 0;
            for (uint64_t i = 0; i < info.nbytes; ++i) sink = sink ^ p[i];  // ASan checks each byte
            try {
                Tensor t = f.load(name);
                EXPECT_EQ(t.shape(), info.shape) << what;
            } catch (const Error& e) {
                EXPECT_EQ(info.dtype, DType::BOOL) << what << ": " << e.what();
            }
        }
    });
}

// mt19937 gives the same sequence on every platform; the distributions of <random> do not, so
// draws are reduced by hand.
class Rng {
public:
    explicit Rng(uint32_t seed) : gen_(seed) {}
    uint32_t below(uint32_t n) { return static_cast<uint32_t>(gen_() % n); }
    uint64_t u64() { return (static_cast<uint64_t>(gen_()) << 32) | gen_(); }

private:
    std::mt19937 gen_;
};

}  // namespace

TEST(SafetensorsFuzz, MutatedFilesOpenOrThrowKilnError) {
    const auto start = std::chrono::steady_clock::now();
    TempDir dir;
    const std::string path = dir.file("fuzz.safetensors");
    const std::string seed = seed_file();
    const size_t header_len = seed.size() - 8 - 56;
    ASSERT_EQ(open_and_load_everything((write_bytes(path, seed), path), "seed"), Outcome::Valid);

    Rng rng(20240611);
    int valid = 0, rejected = 0;
    auto run = [&](const std::string& bytes, const std::string& what) {
        write_bytes(path, bytes);
        (open_and_load_everything(path, what) == Outcome::Valid ? valid : rejected)++;
    };

    // Byte mutations of the header: random bytes, single bit flips, and digit swaps (the last keep
    // the JSON valid and so reach the shape / offset / overlap checks).
    const std::string digits = "0123456789";
    for (int iter = 0; iter < 2000; ++iter) {
        std::string bytes = seed;
        const int edits = 1 + static_cast<int>(rng.below(4));
        for (int k = 0; k < edits; ++k) {
            const size_t pos = 8 + rng.below(static_cast<uint32_t>(header_len));
            switch (rng.below(3)) {
                case 0: bytes[pos] = static_cast<char>(rng.below(256)); break;
                case 1: bytes[pos] = static_cast<char>(bytes[pos] ^ (1 << rng.below(8))); break;
                case 2:
                    if (digits.find(bytes[pos]) != std::string::npos) bytes[pos] = digits[rng.below(10)];
                    break;
            }
        }
        run(bytes, "mutation " + std::to_string(iter));
    }

    // Truncation at every length.
    for (size_t len = 0; len < seed.size(); ++len) run(seed.substr(0, len), "truncated to " + std::to_string(len));

    // Header length fields: near the truth, small, random and enormous.
    for (int iter = 0; iter < 600; ++iter) {
        uint64_t n;
        switch (rng.below(4)) {
            case 0: n = header_len + rng.below(64) - 32; break;
            case 1: n = rng.below(static_cast<uint32_t>(seed.size() + 16)); break;
            case 2: n = rng.u64(); break;
            default: n = UINT64_MAX - rng.below(1024); break;
        }
        run(le64(n) + seed.substr(8), "header length " + std::to_string(n));
    }

    // Both outcomes must be common, or the mutations are not exercising the validation.
    EXPECT_GT(valid, 100);
    EXPECT_GT(rejected, 1000);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    RecordProperty("cases", valid + rejected);
    std::printf("fuzz: %d valid, %d rejected in %.2f s\n", valid, rejected, seconds);
}
