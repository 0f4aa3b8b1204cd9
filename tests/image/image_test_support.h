// Helpers for the image tests: scratch directories, raw file bytes, PNG chunk listing, and a
// direct libpng writer for the layouts kiln itself never writes (palette, 16-bit, raw tEXt bytes).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::test {

// A fresh directory under the system temp dir, removed with its contents at scope exit.
class TempDir {
public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::string& path() const { return path_; }
    std::string file(const std::string& name) const { return path_ + "/" + name; }
    std::vector<std::string> entries() const;  // names in the directory, sorted

private:
    std::string path_;
};

std::vector<uint8_t> read_bytes(const std::string& path);
void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes);

struct RawChunk {
    std::string type;
    std::vector<uint8_t> data;
};
// Walks the chunk list of a PNG byte stream (no CRC check); stops at the first malformed length.
std::vector<RawChunk> png_chunks(const std::vector<uint8_t>& png);

// Recomputes the CRC of every chunk (so mutated chunk data reaches libpng's parsers).
void fix_png_crcs(std::vector<uint8_t>& png);

struct RawText {
    std::string key, text;  // bytes as they go into the chunk
    int compression;        // PNG_TEXT_COMPRESSION_NONE (tEXt), _zTXt, PNG_ITXT_COMPRESSION_NONE
};

struct RawPng {
    int width = 0, height = 0, bit_depth = 8, color_type = 0;
    bool interlaced = false;
    std::vector<std::vector<uint8_t>> rows;    // packed as PNG stores them (16-bit big-endian)
    std::vector<uint8_t> palette_rgb;          // for palette images, 3 bytes per entry
    std::vector<uint8_t> palette_alpha;        // tRNS for palette images
    std::vector<RawText> texts;
};
inline RawPng raw_png(int width, int height, int bit_depth, int color_type, bool interlaced = false) {
    RawPng png;
    png.width = width, png.height = height, png.bit_depth = bit_depth, png.color_type = color_type;
    png.interlaced = interlaced;
    return png;
}

// Writes through libpng's own API; returns false on a libpng error.
bool write_raw_png(const std::string& path, const RawPng& png);

}  // namespace kiln::test
