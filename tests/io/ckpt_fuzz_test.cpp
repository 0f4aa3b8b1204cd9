// Deterministic fuzzing of the .ckpt readers (zip directory, restricted pickle, legacy format) through
// SafetensorsFile::open + load(), and of the pickle reader alone on torch's data.pkl: whatever the bytes,
// a valid file or a kiln::Error, never another exception, a crash, a hang or (under ASan/UBSan) a read
// outside the bytes. The approach of gguf_fuzz_test.cpp: mutate seeds, truncate them.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>

#include "io/safetensors.h"
#include "io/torch_pickle.h"
#include "io/zip_archive.h"
#include "ckpt_test_writer.h"
#include "fuzz_outcome.h"
#include "io_test_util.h"

using namespace kiln;
using namespace kiln::test;

namespace {

std::string fixture(const std::string& name) {
    std::ifstream in(std::string(KILN_CKPT_DATA) + "/" + name, std::ios::binary);
    EXPECT_TRUE(in.good()) << name;
    return std::string(std::istreambuf_iterator<char>(in), {});
}

Outcome open_and_load_everything(const std::string& path, const std::string& what) {
    return fuzz_outcome(what, [&] {
        SafetensorsFile f = SafetensorsFile::open(path);
        for (const std::string& name : f.names()) {
            const TensorInfo& info = f.info(name);
            EXPECT_LE(info.offset + info.nbytes, f.file_size()) << what << " " << name;
            if (info.dtype == DType::BOOL) continue;
            Tensor t = f.load(name);  // ASan checks every byte read
            EXPECT_EQ(t.shape(), info.shape) << what;
        }
    });
}

struct Mutator {
    std::mt19937 gen{24};  // the same sequence everywhere; draws reduced by hand
    uint32_t below(uint32_t n) { return uint32_t(gen() % n); }
    std::string mutate(std::string bytes, size_t from, size_t to) {
        const int edits = 1 + int(below(3));
        for (int k = 0; k < edits; ++k) {
            const size_t pos = from + below(uint32_t(to - from));
            switch (below(4)) {
                case 0: bytes[pos] = char(below(256)); break;
                case 1: bytes[pos] = char(bytes[pos] ^ (1 << below(8))); break;
                case 2: bytes[pos] = char(bytes[pos] + int(below(5)) - 2); break;
                case 3: bytes.insert(pos, 1, char(below(256))); break;
            }
        }
        return bytes;
    }
};

}  // namespace

TEST(CkptFuzz, MutatedCheckpointsOpenOrThrowKilnError) {
    const auto start = std::chrono::steady_clock::now();
    TempDir dir;
    const std::string path = dir.file("fuzz.ckpt");
    CkptOptions zip64;
    zip64.zip64 = true;
    const std::vector<std::pair<std::string, std::string>> seeds = {
        {"small.ckpt", fixture("small.ckpt")},
        {"legacy.ckpt", fixture("legacy.ckpt")},
        {"zip64", ckpt_bytes({{"w", DType::F16, {2, 3}, std::string(12, '\1')}, {"b", DType::BF16, {}, "\1\2"}}, zip64)},
    };
    Mutator m;
    int valid = 0, rejected = 0;
    auto run = [&](const std::string& bytes, const std::string& what) {
        write_bytes(path, bytes);
        (open_and_load_everything(path, what) == Outcome::Valid ? valid : rejected)++;
    };
    for (const auto& [name, seed] : seeds) {
        run(seed, name);
        for (int iter = 0; iter < 1500; ++iter) run(m.mutate(seed, 0, seed.size()), name + " mutation " + std::to_string(iter));
        for (size_t len = 0; len < seed.size(); len += 1 + len / 64) run(seed.substr(0, len), name + " truncated");
    }
    EXPECT_GT(valid, 100);
    EXPECT_GT(rejected, 1000);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("ckpt fuzz: %d valid, %d rejected in %.2f s\n", valid, rejected, seconds);
}

TEST(CkptFuzz, MutatedPicklesReadOrThrowKilnError) {
    // torch's data.pkl of small.ckpt.
    const std::string ckpt = fixture("small.ckpt");
    const auto* bytes = reinterpret_cast<const uint8_t*>(ckpt.data());
    const ZipDirectory zip = read_zip_directory(bytes, ckpt.size(), "small.ckpt");
    const ZipEntry* entry = zip.stored("small/data.pkl", "small.ckpt");
    ASSERT_NE(entry, nullptr);
    const std::string pkl = ckpt.substr(entry->data_offset, entry->size);
    Mutator m;
    int valid = 0, rejected = 0;
    auto read = [&](const std::string& bytes, const std::string& what) {
        const Outcome o = fuzz_outcome(what, [&] {
            const PickleData d = read_torch_pickle(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), what);
            EXPECT_LE(d.end, bytes.size());
            EXPECT_LT(d.root, d.values.size());
        });
        (o == Outcome::Valid ? valid : rejected)++;
    };
    read(pkl, "data.pkl");
    ASSERT_EQ(valid, 1);
    for (int iter = 0; iter < 20000; ++iter) read(m.mutate(pkl, 2, pkl.size()), "pickle mutation " + std::to_string(iter));
    // Splices: a piece of the pickle repeated or moved, which keeps opcodes whole more often than byte edits.
    for (int iter = 0; iter < 5000; ++iter) {
        const size_t a = 2 + m.below(uint32_t(pkl.size() - 2)), b = 2 + m.below(uint32_t(pkl.size() - 2));
        const size_t n = m.below(64);
        std::string bytes = pkl;
        bytes.insert(b, pkl.substr(a, n));
        read(bytes, "pickle splice " + std::to_string(iter));
    }
    EXPECT_GT(valid, 100);
    EXPECT_GT(rejected, 10000);
    std::printf("pickle fuzz: %d valid, %d rejected\n", valid, rejected);
}
