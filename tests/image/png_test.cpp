#include <gtest/gtest.h>
#include <png.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "image/png.h"
#include "image_test_support.h"
#include "kiln/error.h"

using namespace kiln;
using namespace kiln::test;

namespace {

Image random_image(int width, int height, int channels, uint32_t seed) {
    Image image{width, height, channels, {}};
    std::mt19937 rng(seed);
    for (int i = 0; i < width * height * channels; ++i) image.pixels.push_back(static_cast<uint8_t>(rng()));
    return image;
}

std::vector<std::string> chunk_types(const std::string& path) {
    std::vector<std::string> types;
    for (const RawChunk& c : png_chunks(read_bytes(path))) types.push_back(c.type);
    return types;
}

// Expects `call` to throw kiln::Error of `kind` whose message names `path`.
template <typename F>
void expect_error_naming(F call, ErrorKind kind, const std::string& path) {
    try {
        call();
        ADD_FAILURE() << "no error for " << path;
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), kind) << e.what();
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
}

}  // namespace

TEST(Png, RoundTripsPixelsAndTextChunks) {
    TempDir dir;
    const std::string path = dir.file("out.png");
    const Image image = random_image(7, 5, 3, 1);
    const TextChunks text = {
        {"parameters", "café, naïve façade\nSteps: 20, Seed: 1"},  // Latin-1 representable
        {"Comment", "plain ASCII"},
        {"cjk", "宇宙飛行士が馬に乗る 🚀"},  // beyond Latin-1
        {"Title", ""},
    };
    write_png(path, image, text);

    const Image back = read_png(path);
    EXPECT_EQ(back.width, 7);
    EXPECT_EQ(back.height, 5);
    EXPECT_EQ(back.channels, 3);
    EXPECT_EQ(back.pixels, image.pixels);
    EXPECT_EQ(read_png_text(path), text);

    // Chunk types and bytes as the PNG spec wants them: text before the image data, tEXt in Latin-1.
    EXPECT_EQ(chunk_types(path), (std::vector<std::string>{"IHDR", "tEXt", "tEXt", "iTXt", "tEXt", "IDAT", "IEND"}));
    const std::vector<RawChunk> chunks = png_chunks(read_bytes(path));
    const std::string latin1(chunks[1].data.begin(), chunks[1].data.end());
    const char expected_tEXt[] = "parameters\0caf\xE9, na\xEFve fa\xE7" "ade\nSteps: 20, Seed: 1";
    EXPECT_EQ(latin1, std::string(expected_tEXt, sizeof expected_tEXt - 1));
    // iTXt: keyword, NUL, compression flag 0, method 0, empty language, NUL, empty translation, NUL, UTF-8.
    const std::string itxt(chunks[3].data.begin(), chunks[3].data.end());
    EXPECT_EQ(itxt, std::string("cjk\0\0\0\0\0", 8) + text[2].second);
}

TEST(Png, WritesGrayGrayAlphaAndRgbaAndReadsThemAsRgb) {
    TempDir dir;
    for (int channels : {1, 2, 4}) {
        const std::string path = dir.file("c" + std::to_string(channels) + ".png");
        const Image image = random_image(4, 3, channels, channels);
        write_png(path, image, {});
        const Image back = read_png(path);
        ASSERT_EQ(back.pixels.size(), 4u * 3 * 3);
        for (int i = 0; i < 12; ++i) {
            for (int c = 0; c < 3; ++c) {
                const int source = channels < 3 ? 0 : c;  // gray is replicated, alpha dropped
                EXPECT_EQ(back.pixels[i * 3 + c], image.pixels[i * channels + source]) << channels << " " << i;
            }
        }
        EXPECT_EQ(read_png_text(path).size(), 0u);
    }
}

TEST(Png, OverwritesAnExistingFile) {
    TempDir dir;
    const std::string path = dir.file("x.png");
    write_png(path, random_image(2, 2, 3, 1), {{"a", "first"}});
    write_png(path, random_image(3, 1, 3, 2), {{"b", "second"}});
    EXPECT_EQ(read_png(path).width, 3);
    EXPECT_EQ(read_png_text(path), (TextChunks{{"b", "second"}}));
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"x.png"});
}

TEST(Png, ReadsLowBitDepthGray) {
    TempDir dir;
    // PNG spec (sample depth scaling): a k-bit gray level v maps to v * 255 / (2^k - 1).
    for (int bits : {1, 2, 4}) {
        const int levels = 1 << bits;
        RawPng raw = raw_png(levels, 1, bits, PNG_COLOR_TYPE_GRAY);
        std::vector<uint8_t> row((levels * bits + 7) / 8, 0);
        for (int v = 0; v < levels; ++v) row[(v * bits) / 8] |= uint8_t(v << (8 - bits - (v * bits) % 8));
        raw.rows = {row};
        const std::string path = dir.file("gray" + std::to_string(bits) + ".png");
        ASSERT_TRUE(write_raw_png(path, raw));
        const Image image = read_png(path);
        ASSERT_EQ(image.width, levels);
        for (int v = 0; v < levels; ++v)
            for (int c = 0; c < 3; ++c) EXPECT_EQ(image.pixels[v * 3 + c], v * 255 / (levels - 1)) << bits << " " << v;
    }
}

TEST(Png, Scales16BitSamplesWithRounding) {
    TempDir dir;
    // All 65536 gray levels; the exact 8-bit value is v * 255 / 65535 = v / 257, never a tie.
    RawPng raw = raw_png(256, 256, 16, PNG_COLOR_TYPE_GRAY);
    for (int y = 0; y < 256; ++y) {
        std::vector<uint8_t> row;
        for (int x = 0; x < 256; ++x) row.push_back(uint8_t(y)), row.push_back(uint8_t(x));  // big-endian
        raw.rows.push_back(row);
    }
    const std::string path = dir.file("gray16.png");
    ASSERT_TRUE(write_raw_png(path, raw));
    const Image image = read_png(path);
    int mismatches = 0;
    for (int v = 0; v < 65536; ++v) mismatches += image.pixels[v * 3] != int(std::lround(v / 257.0));
    EXPECT_EQ(mismatches, 0);

    RawPng rgba = raw_png(2, 1, 16, PNG_COLOR_TYPE_RGB_ALPHA);
    rgba.rows = {{0xFF, 0xFF, 0x00, 0x00, 0x80, 0x80, 0x12, 0x34, /**/ 0x01, 0x00, 0x01, 0x81, 0x01, 0x82, 0, 0}};
    const std::string rgba_path = dir.file("rgba16.png");
    ASSERT_TRUE(write_raw_png(rgba_path, rgba));
    // 0xFFFF->255, 0->0, 0x8080=32896 -> 128; 0x100=256 -> 0.996 -> 1; 0x181=385 -> 1.498 -> 1; 0x182=386 -> 1.502 -> 2.
    EXPECT_EQ(read_png(rgba_path).pixels, (std::vector<uint8_t>{255, 0, 128, 1, 1, 2}));
}

TEST(Png, ReadsPaletteImagesDroppingTransparency) {
    TempDir dir;
    RawPng raw = raw_png(5, 2, 4, PNG_COLOR_TYPE_PALETTE);
    raw.palette_rgb = {10, 20, 30, 200, 100, 0, 0, 0, 255, 1, 2, 3};
    raw.palette_alpha = {0, 128};  // entries 0 and 1 are (semi)transparent
    const int index[2][5] = {{0, 1, 2, 3, 0}, {3, 3, 1, 2, 1}};
    for (const auto& line : index) {
        std::vector<uint8_t> row(3, 0);
        for (int x = 0; x < 5; ++x) row[x / 2] |= uint8_t(line[x] << (x % 2 ? 0 : 4));
        raw.rows.push_back(row);
    }
    for (bool interlaced : {false, true}) {
        raw.interlaced = interlaced;
        const std::string path = dir.file(interlaced ? "pal-i.png" : "pal.png");
        ASSERT_TRUE(write_raw_png(path, raw));
        const Image image = read_png(path);
        ASSERT_EQ(image.pixels.size(), 5u * 2 * 3);
        for (int y = 0; y < 2; ++y)
            for (int x = 0; x < 5; ++x)
                for (int c = 0; c < 3; ++c)
                    EXPECT_EQ(image.pixels[(y * 5 + x) * 3 + c], raw.palette_rgb[index[y][x] * 3 + c]);
    }
}

TEST(Png, ReadsInterlacedRgb) {
    TempDir dir;
    const Image image = random_image(13, 11, 3, 9);
    RawPng raw = raw_png(13, 11, 8, PNG_COLOR_TYPE_RGB, true);
    for (int y = 0; y < 11; ++y)
        raw.rows.emplace_back(image.pixels.begin() + y * 39, image.pixels.begin() + (y + 1) * 39);
    raw.texts = {{"after", "x", PNG_TEXT_COMPRESSION_NONE}};
    const std::string path = dir.file("adam7.png");
    ASSERT_TRUE(write_raw_png(path, raw));
    EXPECT_EQ(read_png(path).pixels, image.pixels);
}

TEST(Png, MissingGarbageAndTruncatedFilesGiveErrorsNamingTheFile) {
    TempDir dir;
    const std::string missing = dir.file("missing.png");
    expect_error_naming([&] { read_png(missing); }, ErrorKind::IO, missing);
    expect_error_naming([&] { read_png_text(missing); }, ErrorKind::IO, missing);
    expect_error_naming([&] { read_png(dir.path()); }, ErrorKind::IO, dir.path());

    const std::string garbage = dir.file("garbage.png");
    write_bytes(garbage, {'n', 'o', 't', ' ', 'a', ' ', 'p', 'n', 'g', '\n'});
    expect_error_naming([&] { read_png(garbage); }, ErrorKind::InvalidArgument, garbage);
    write_bytes(garbage, {});
    expect_error_naming([&] { read_png_text(garbage); }, ErrorKind::InvalidArgument, garbage);

    const std::string good = dir.file("good.png");
    write_png(good, random_image(6, 6, 3, 3), {{"parameters", "a cat"}});
    const std::vector<uint8_t> bytes = read_bytes(good);
    const std::string cut = dir.file("cut.png");
    // Every proper prefix (the last 12 bytes are IEND) is an error, never a partial image.
    for (size_t length = 0; length + 12 < bytes.size(); ++length) {
        write_bytes(cut, std::vector<uint8_t>(bytes.begin(), bytes.begin() + length));
        EXPECT_THROW(read_png(cut), Error) << length;
        EXPECT_THROW(read_png_text(cut), Error) << length;
    }
    // A corrupted image-data byte fails the chunk's CRC.
    std::vector<uint8_t> flipped = bytes;
    for (const RawChunk& c : png_chunks(bytes))
        if (c.type == "IDAT") {
            const auto at = std::search(bytes.begin(), bytes.end(), c.data.begin(), c.data.end());
            flipped[at - bytes.begin() + 3] ^= 0x40;
        }
    write_bytes(cut, flipped);
    expect_error_naming([&] { read_png(cut); }, ErrorKind::InvalidArgument, cut);
}

TEST(Png, RejectsBadWritesWithoutLeavingFiles) {
    TempDir dir;
    const std::string path = dir.file("bad.png");
    const Image good = random_image(2, 2, 3, 4);
    Image wrong_size = good;
    wrong_size.pixels.pop_back();
    Image five_channels = good;
    five_channels.channels = 5;
    Image empty{0, 2, 3, {}};
    EXPECT_THROW(write_png(path, wrong_size, {}), Error);
    EXPECT_THROW(write_png(path, five_channels, {}), Error);
    EXPECT_THROW(write_png(path, empty, {}), Error);
    for (const std::string& key : {std::string(), std::string(80, 'k'), std::string(" lead"), std::string("trail "),
                                   std::string("two  spaces"), std::string("キー"), std::string("tab\there")}) {
        try {
            write_png(path, good, {{key, "text"}});
            ADD_FAILURE() << "accepted keyword '" << key << "'";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        }
    }
    EXPECT_THROW(write_png(path, good, {{"k", "bad \xC3 utf-8"}}), Error);
    EXPECT_THROW(write_png(path, good, {{"k", std::string("nul\0inside", 10)}}), Error);
    EXPECT_TRUE(dir.entries().empty());

    write_png(path, good, {{std::string(79, 'k'), "longest keyword"}, {"caf\xC3\xA9 key", "Latin-1 keyword"}});
    EXPECT_EQ(read_png_text(path)[1].first, "caf\xC3\xA9 key");

    // I/O failures: a missing directory, and a directory in the way of the final rename.
    const std::string nowhere = dir.file("no/such/dir/x.png");
    expect_error_naming([&] { write_png(nowhere, good, {}); }, ErrorKind::IO, nowhere);
    const std::string blocked = dir.file("blocked.png");
    std::filesystem::create_directory(blocked);
    std::filesystem::create_directory(blocked + "/inside");  // a non-empty directory cannot be renamed over
    expect_error_naming([&] { write_png(blocked, good, {}); }, ErrorKind::IO, blocked);
    EXPECT_EQ(dir.entries(), (std::vector<std::string>{"bad.png", "blocked.png"}));  // no temporary left
}

TEST(Png, ReadsTextChunksOfEveryKindAndEncoding) {
    TempDir dir;
    RawPng raw = raw_png(1, 1, 8, PNG_COLOR_TYPE_GRAY);
    raw.rows = {{0}};
    raw.texts = {
        {"latin1", "caf\xE9", PNG_TEXT_COMPRESSION_NONE},                      // Latin-1 tEXt
        {"raw-utf8", "\xE5\xAE\x87\xE5\xAE\x99", PNG_TEXT_COMPRESSION_NONE},    // UTF-8 in tEXt (stable-diffusion.cpp)
        {"zipped", std::string(300, 'z') + "\xFC", PNG_TEXT_COMPRESSION_zTXt},  // Latin-1 zTXt
        {"intl", "\xF0\x9F\x9A\x80", PNG_ITXT_COMPRESSION_NONE},                // iTXt
        {"intl-z", "\xE2\x82\xAC" + std::string(100, 'e'), PNG_ITXT_COMPRESSION_zTXt},
    };
    const std::string path = dir.file("texts.png");
    ASSERT_TRUE(write_raw_png(path, raw));
    const TextChunks expected = {
        {"latin1", "caf\xC3\xA9"},
        {"raw-utf8", "\xE5\xAE\x87\xE5\xAE\x99"},
        {"zipped", std::string(300, 'z') + "\xC3\xBC"},
        {"intl", "\xF0\x9F\x9A\x80"},
        {"intl-z", "\xE2\x82\xAC" + std::string(100, 'e')},
    };
    EXPECT_EQ(read_png_text(path), expected);
}

TEST(ImageTensor, RoundsLikeNumpyToPil) {
    // 0.5 * 255 = 127.5 exactly in float32: numpy's round() goes to the even neighbour, 128.
    // Values outside [0,1] clamp first; NaN becomes 0.
    const float blue[4] = {0.5f / 255.0f, 1.5f / 255.0f, 2.5f / 255.0f, 128.0f / 255.0f};
    Tensor t({1, 3, 1, 4}, {0.5f, -0.5f, 1.5f, std::nanf(""),  // red plane
                            0.0f, 1.0f, 0.2f, 0.999f,          // green: 0.2*255 -> 51; 254.745 -> 255
                            blue[0], blue[1], blue[2], blue[3]});
    // These quotients multiply back to exact ties in float32, so they test half-to-even.
    ASSERT_EQ(blue[0] * 255.0f, 0.5f);
    ASSERT_EQ(blue[1] * 255.0f, 1.5f);
    ASSERT_EQ(blue[2] * 255.0f, 2.5f);
    const Image image = image_from_tensor(t);
    ASSERT_EQ(image.width, 4);
    ASSERT_EQ(image.height, 1);
    std::vector<uint8_t> red, green, blues;
    for (int x = 0; x < 4; ++x) {
        red.push_back(image.pixels[x * 3]);
        green.push_back(image.pixels[x * 3 + 1]);
        blues.push_back(image.pixels[x * 3 + 2]);
    }
    EXPECT_EQ(red, (std::vector<uint8_t>{128, 0, 255, 0}));
    EXPECT_EQ(green, (std::vector<uint8_t>{0, 255, 51, 255}));
    EXPECT_EQ(blues, (std::vector<uint8_t>{0, 2, 2, 128}));

    // Ties: every float32 x whose product x*255 is exactly k + 0.5 rounds to the even neighbour.
    int ties = 0;
    for (int k = 0; k < 255; ++k) {
        float x = (k + 0.5f) / 255.0f;
        for (int step = 0; step < 8; ++step, x = std::nextafter(x, 2.0f)) {
            if (x * 255.0f != k + 0.5f) continue;
            ++ties;
            Tensor one({3, 1, 1}, {x, x, x});
            EXPECT_EQ(image_from_tensor(one).pixels[0], k % 2 == 0 ? k : k + 1) << k;
        }
    }
    EXPECT_GT(ties, 0);
}

TEST(ImageTensor, ConvertsLayoutBothWays) {
    Image image{3, 2, 3, {}};
    for (int i = 0; i < 18; ++i) image.pixels.push_back(static_cast<uint8_t>(i * 15));
    const Tensor t = tensor_from_image(image);
    ASSERT_EQ(t.shape(), (Shape{1, 3, 2, 3}));
    // Planar: channel c, pixel i is interleaved byte i*3+c; value/255 in float32.
    for (int c = 0; c < 3; ++c)
        for (int i = 0; i < 6; ++i) EXPECT_EQ(t[c * 6 + i], image.pixels[i * 3 + c] / 255.0f);
    EXPECT_EQ(image_from_tensor(t).pixels, image.pixels);
    EXPECT_EQ(image_from_tensor(t.reshaped({3, 2, 3})).pixels, image.pixels);

    // Every 8-bit value survives value/255 then (x*255).round(): the float32 error is far below 0.5.
    Image all{256, 1, 1, {}};
    for (int v = 0; v < 256; ++v) all.pixels.push_back(static_cast<uint8_t>(v));
    const Image back = image_from_tensor(tensor_from_image(all));
    for (int v = 0; v < 256; ++v) EXPECT_EQ(back.pixels[v * 3 + 1], v);
    EXPECT_EQ(tensor_from_image(all)[51], 0.2f);  // 51/255 is exactly 0.2
    EXPECT_EQ(tensor_from_image(all)[255], 1.0f);

    Image rgba{1, 1, 4, {10, 20, 30, 40}};
    EXPECT_EQ(tensor_from_image(rgba)[2], 30 / 255.0f);
}

TEST(ImageTensor, RejectsBadShapes) {
    EXPECT_THROW(image_from_tensor(Tensor({3, 4})), Error);
    EXPECT_THROW(image_from_tensor(Tensor({2, 3, 4, 4})), Error);
    EXPECT_THROW(image_from_tensor(Tensor({1, 4, 4, 4})), Error);
    EXPECT_THROW(image_from_tensor(Tensor({3, 0, 4})), Error);
    EXPECT_THROW(tensor_from_image(Image{2, 2, 3, {1, 2, 3}}), Error);
    EXPECT_THROW(tensor_from_image(Image{1, 1, 2, {1, 2}}), Error);
    EXPECT_THROW(tensor_from_image(Image{}), Error);
}
