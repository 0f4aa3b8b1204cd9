#include "image_test_support.h"

#include <png.h>
#include <zlib.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include <unistd.h>

namespace kiln::test {

TempDir::TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kiln-image-test-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
}

TempDir::~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
}

std::vector<std::string> TempDir::entries() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path_)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw std::runtime_error("cannot write " + path);
}

static uint32_t load_be32(const uint8_t* p) {
    return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

std::vector<RawChunk> png_chunks(const std::vector<uint8_t>& png) {
    std::vector<RawChunk> chunks;
    size_t pos = 8;
    while (pos + 12 <= png.size()) {
        const uint32_t length = load_be32(&png[pos]);
        if (length > png.size() - pos - 12) break;
        RawChunk chunk;
        chunk.type.assign(reinterpret_cast<const char*>(&png[pos + 4]), 4);
        chunk.data.assign(png.begin() + pos + 8, png.begin() + pos + 8 + length);
        chunks.push_back(std::move(chunk));
        pos += 12 + length;
    }
    return chunks;
}

void fix_png_crcs(std::vector<uint8_t>& png) {
    size_t pos = 8;
    while (pos + 12 <= png.size()) {
        const uint32_t length = load_be32(&png[pos]);
        if (length > png.size() - pos - 12) break;
        const uint32_t crc = static_cast<uint32_t>(::crc32(0, &png[pos + 4], length + 4));
        for (int i = 0; i < 4; ++i) png[pos + 8 + length + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
        pos += 12 + length;
    }
}

namespace {

void raise_png_error(png_structp png, png_const_charp) { png_longjmp(png, 1); }

struct WriteArgs {
    png_structp png;
    png_infop info;
    FILE* file;
    const RawPng* image;
    png_colorp palette;
    png_textp texts;
    png_bytepp rows;
};

// No C++ objects live in this frame, so a longjmp out of libpng skips no destructor.
bool write_with_setjmp(const WriteArgs* a) {
    if (setjmp(png_jmpbuf(a->png))) return false;
    const RawPng& img = *a->image;
    png_init_io(a->png, a->file);
    png_set_IHDR(a->png, a->info, img.width, img.height, img.bit_depth, img.color_type,
                 img.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (!img.palette_rgb.empty()) png_set_PLTE(a->png, a->info, a->palette, int(img.palette_rgb.size() / 3));
    if (!img.palette_alpha.empty())
        png_set_tRNS(a->png, a->info, img.palette_alpha.data(), int(img.palette_alpha.size()), nullptr);
    if (!img.texts.empty()) png_set_text(a->png, a->info, a->texts, int(img.texts.size()));
    png_write_info(a->png, a->info);
    png_write_image(a->png, a->rows);
    png_write_end(a->png, nullptr);
    return true;
}

}  // namespace

bool write_raw_png(const std::string& path, const RawPng& image) {
    FILE* file = std::fopen(path.c_str(), "wb");
    if (!file) return false;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, raise_png_error, nullptr);
    png_infop info = png_create_info_struct(png);
    std::vector<png_color> palette;
    for (size_t i = 0; i + 2 < image.palette_rgb.size(); i += 3)
        palette.push_back({image.palette_rgb[i], image.palette_rgb[i + 1], image.palette_rgb[i + 2]});
    std::vector<std::string> keys, bodies;
    for (const RawText& t : image.texts) keys.push_back(t.key), bodies.push_back(t.text);
    std::vector<png_text> texts(image.texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
        texts[i].compression = image.texts[i].compression;
        texts[i].key = keys[i].data();
        texts[i].text = bodies[i].data();
        texts[i].text_length = bodies[i].size();
    }
    std::vector<png_bytep> rows;
    for (const auto& row : image.rows) rows.push_back(const_cast<png_bytep>(row.data()));
    const WriteArgs args{png, info, file, &image, palette.data(), texts.data(), rows.data()};
    const bool ok = write_with_setjmp(&args);
    png_destroy_write_struct(&png, &info);
    const bool closed = std::fclose(file) == 0;
    return ok && closed;
}

}  // namespace kiln::test
