// Seeded mutation fuzzing of the PNG readers: whatever the bytes, the result is an image, text or a
// kiln::Error, never a crash (the suite also runs under ASan/UBSan: -DKILN_SANITIZE=ON).
#include <gtest/gtest.h>
#include <png.h>

#include <chrono>
#include <random>

#include "image/infotext.h"
#include "image/png.h"
#include "image_test_support.h"
#include "kiln/error.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// Small seeds covering the decoder's paths: RGB with tEXt/iTXt, interlaced palette with tRNS and
// zTXt, 16-bit gray+alpha with a compressed iTXt after the image data.
std::vector<std::vector<uint8_t>> seed_files(const TempDir& dir) {
    std::vector<std::vector<uint8_t>> seeds;
    const std::string path = dir.file("seed.png");
    Image rgb{6, 5, 3, {}};
    for (int i = 0; i < 90; ++i) rgb.pixels.push_back(static_cast<uint8_t>(i * 37));
    write_png(path, rgb, {{"parameters", "a cat, 宇宙\nSteps: 20, Sampler: Euler a, CFG scale: 7"}, {"x", "café"}});
    seeds.push_back(read_bytes(path));

    RawPng palette = raw_png(7, 6, 2, PNG_COLOR_TYPE_PALETTE, true);
    palette.palette_rgb = {0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255};
    palette.palette_alpha = {0, 255, 128};
    for (int y = 0; y < 6; ++y) palette.rows.push_back({uint8_t(0x1B * y), uint8_t(0xE4 ^ y)});
    palette.texts = {{"prompt", R"({"3": {"class_type": "KSampler", "inputs": {"seed": 1}}})", PNG_TEXT_COMPRESSION_zTXt}};
    if (!write_raw_png(path, palette)) throw std::runtime_error("cannot write palette seed");
    seeds.push_back(read_bytes(path));

    RawPng gray16 = raw_png(3, 3, 16, PNG_COLOR_TYPE_GRAY_ALPHA);
    for (int y = 0; y < 3; ++y) gray16.rows.push_back(std::vector<uint8_t>(12, uint8_t(y * 80 + 1)));
    gray16.texts = {{"parameters", "p\nSteps: 1, Seed: 2, Size: 3x3", PNG_ITXT_COMPRESSION_zTXt}};
    if (!write_raw_png(path, gray16)) throw std::runtime_error("cannot write 16-bit seed");
    seeds.push_back(read_bytes(path));
    return seeds;
}

std::vector<uint8_t> mutate(const std::vector<uint8_t>& seed, std::mt19937& rng) {
    std::vector<uint8_t> bytes = seed;
    const auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
    const int kind = static_cast<int>(pick(4));
    if (kind == 0 || kind == 3) {  // flip bits / overwrite bytes
        for (size_t i = 0, n = 1 + pick(6); i < n && !bytes.empty(); ++i) {
            const size_t at = pick(bytes.size());
            bytes[at] = pick(2) ? bytes[at] ^ uint8_t(1u << pick(8)) : static_cast<uint8_t>(rng());
        }
    }
    if (kind == 1 || kind == 3) bytes.resize(pick(bytes.size()));  // truncate
    if (kind == 2) {  // rewrite a 4-byte field (lengths, dimensions) with an extreme value
        const uint32_t extremes[] = {0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 65536, 1000001};
        const size_t at = pick(bytes.size() - 4);
        const uint32_t v = extremes[pick(std::size(extremes))];
        for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<uint8_t>(v >> (24 - 8 * i));
    }
    // Half the time, make the CRCs right again so the mutation reaches the chunk parsers and zlib.
    if (pick(2)) fix_png_crcs(bytes);
    return bytes;
}

}  // namespace

TEST(PngFuzz, MutatedFilesNeverCrash) {
    TempDir dir;
    const std::vector<std::vector<uint8_t>> seeds = seed_files(dir);
    const std::string path = dir.file("mutant.png");
    std::mt19937 rng(20240607);
    const auto start = std::chrono::steady_clock::now();
    int cases = 0, decoded = 0;
    for (; cases < 600; ++cases) {
        write_bytes(path, mutate(seeds[cases % seeds.size()], rng));
        // Any kiln::Error is a fine outcome; anything else escaping (or a crash) fails the test.
        try {
            const Image image = read_png(path);
            ASSERT_EQ(image.pixels.size(), size_t(image.width) * image.height * 3);
            ++decoded;
        } catch (const Error&) {
        }
        try {
            read_png_text(path);
        } catch (const Error&) {
        }
        try {
            describe_png_parameters(path);
        } catch (const Error&) {
        }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    RecordProperty("decoded", decoded);
    EXPECT_GT(decoded, 0);       // some mutants stay valid (e.g. flips inside text or ancillary data)
    EXPECT_LT(decoded, cases);   // and most do not
    EXPECT_LT(seconds, 10.0);    // about 0.1 s in a release build; generous for sanitizers
}
