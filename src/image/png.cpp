#include "image/png.h"

#include <fcntl.h>
#include <png.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

#include "image/utf8.h"
#include "kiln/error.h"

// libpng reports errors by calling an error function that must not return. A C++ exception thrown
// there would unwind through libpng's C frames (undefined behaviour), so the error function
// records the message and longjmps back to a setjmp in one of the small C-style functions below.
// Those functions own no objects with destructors (longjmp would skip them) and report failure by
// returning false; their C++ callers then throw kiln::Error.

namespace kiln {
namespace {

struct PngErrorSink {
    char message[256] = "";
};

void on_png_error(png_structp png, png_const_charp message) {
    auto* sink = static_cast<PngErrorSink*>(png_get_error_ptr(png));
    std::snprintf(sink->message, sizeof sink->message, "%s", message ? message : "unknown libpng error");
    png_longjmp(png, 1);
}

// Warnings concern ancillary data (bad gamma, CRC of an optional chunk); libpng already recovers.
void on_png_warning(png_structp, png_const_charp) {}

std::string errno_text() { return std::strerror(errno); }

// Reads a PNG file whole. O_NONBLOCK: opening a FIFO must not wait for a writer (kiln would hang);
// anything but a regular file is refused. A file that does not start with the PNG signature is not
// read further: `-i model.safetensors` by mistake gets "not a PNG file" at once, not gigabytes read.
std::vector<uint8_t> read_whole_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) fail(ErrorKind::IO, "cannot open " + path + ": " + errno_text());
    std::unique_ptr<FILE, int (*)(FILE*)> file(::fdopen(fd, "rb"), std::fclose);
    if (!file) {
        const int error = errno;
        ::close(fd);
        fail(ErrorKind::IO, "cannot open " + path + ": " + std::strerror(error));
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) fail(ErrorKind::IO, "cannot read " + path + ": " + errno_text());
    if (S_ISDIR(st.st_mode)) fail(ErrorKind::IO, "cannot read " + path + ": " + std::strerror(EISDIR));
    require(S_ISREG(st.st_mode), ErrorKind::IO, "cannot read " + path + ": not a regular file");
    std::vector<uint8_t> bytes;
    uint8_t buffer[1 << 16];
    size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) {
        bytes.insert(bytes.end(), buffer, buffer + n);
        if (bytes.size() >= 8 && png_sig_cmp(bytes.data(), 0, 8) != 0) break;  // the caller reports "not a PNG"
    }
    if (std::ferror(file.get())) fail(ErrorKind::IO, "cannot read " + path + ": " + errno_text());
    return bytes;
}

struct MemoryReader {
    const uint8_t* data;
    size_t size;
    size_t pos;
};

void read_from_memory(png_structp png, png_bytep out, size_t n) {
    auto* reader = static_cast<MemoryReader*>(png_get_io_ptr(png));
    if (n > reader->size - reader->pos) png_error(png, "unexpected end of file (truncated PNG)");
    std::memcpy(out, reader->data + reader->pos, n);
    reader->pos += n;
}

struct PngHeader {
    png_uint_32 width = 0, height = 0;
    int bit_depth = 0, color_type = 0, passes = 1;
    int stored_bits_per_pixel = 0;  // as in the file, before any transformation
    size_t rowbytes = 0;            // after the requested transformations
};

// libpng allocates (and clears) a chunk's buffer from its length field before reading it, so a
// corrupt length would cost up to the 8 MB chunk limit per chunk; walking the lengths first turns
// a truncated or corrupt chunk list into an error without that.
void check_chunk_lengths(const std::vector<uint8_t>& bytes, const std::string& path) {
    size_t pos = 8;
    while (bytes.size() - pos >= 12) {
        const uint32_t length = (uint32_t(bytes[pos]) << 24) | (uint32_t(bytes[pos + 1]) << 16) |
                                (uint32_t(bytes[pos + 2]) << 8) | bytes[pos + 3];
        const std::string type(reinterpret_cast<const char*>(&bytes[pos + 4]), 4);
        require(length <= bytes.size() - pos - 12, ErrorKind::InvalidArgument,
                path + ": corrupt or truncated PNG (chunk length " + std::to_string(length) + " at byte " +
                    std::to_string(pos) + " runs past the end of the file)");
        if (type == "IEND") return;
        pos += 12 + size_t(length);
    }
}

// ---- C-style functions: setjmp targets for libpng errors -------------------------------------

bool read_header(png_structp png, png_infop info, bool to_rgb8, PngHeader* header) {
    if (setjmp(png_jmpbuf(png))) return false;
    png_read_info(png, info);
    int interlace = 0;
    png_get_IHDR(png, info, &header->width, &header->height, &header->bit_depth, &header->color_type,
                 &interlace, nullptr, nullptr);
    header->stored_bits_per_pixel = header->bit_depth * png_get_channels(png, info);
    if (to_rgb8) {
        if (header->color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
        if (header->color_type == PNG_COLOR_TYPE_GRAY && header->bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
        if (header->bit_depth == 16) png_set_scale_16(png);
        if (!(header->color_type & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(png);
        // Also removes the alpha that palette expansion makes from a tRNS chunk.
        png_set_strip_alpha(png);
    }
    header->passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    header->rowbytes = png_get_rowbytes(png, info);
    return true;
}

bool read_rows(png_structp png, png_infop info, png_bytepp rows) {
    if (setjmp(png_jmpbuf(png))) return false;
    png_read_image(png, rows);
    png_read_end(png, info);
    return true;
}

// Decodes into one scratch row (its content is not needed) to reach the chunks after the image data.
bool skip_rows(png_structp png, png_infop info, const PngHeader* header, png_bytep scratch) {
    if (setjmp(png_jmpbuf(png))) return false;
    for (int pass = 0; pass < header->passes; ++pass)
        for (png_uint_32 y = 0; y < header->height; ++y) png_read_row(png, scratch, nullptr);
    png_read_end(png, info);
    return true;
}

struct PngWriteJob {
    png_structp png;
    png_infop info;
    FILE* file;
    png_uint_32 width, height;
    int color_type;
    png_bytepp rows;
    png_textp texts;
    int num_texts;
};

bool write_all(const PngWriteJob* job) {
    if (setjmp(png_jmpbuf(job->png))) return false;
    png_init_io(job->png, job->file);
    png_set_IHDR(job->png, job->info, job->width, job->height, 8, job->color_type, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (job->num_texts > 0) png_set_text(job->png, job->info, job->texts, job->num_texts);
    png_write_info(job->png, job->info);  // text goes before the image data, as PIL writes it
    png_write_image(job->png, job->rows);
    png_write_end(job->png, nullptr);
    return true;
}

// ---- C++ side ------------------------------------------------------------------------------

// Owns libpng's read structs over a file held in memory.
class PngReadSession {
public:
    explicit PngReadSession(const std::string& path) : path_(path), bytes_(read_whole_file(path)) {
        require(bytes_.size() >= 8 && png_sig_cmp(bytes_.data(), 0, 8) == 0, ErrorKind::InvalidArgument,
                path + " is not a PNG file (no PNG signature)");
        check_chunk_lengths(bytes_, path);
        png_ = png_create_read_struct(PNG_LIBPNG_VER_STRING, &sink_, on_png_error, on_png_warning);
        if (png_) info_ = png_create_info_struct(png_);
        if (!png_ || !info_) {
            png_destroy_read_struct(png_ ? &png_ : nullptr, nullptr, nullptr);
            fail(ErrorKind::OutOfMemory, "cannot allocate a PNG decoder for " + path);
        }
        reader_ = {bytes_.data(), bytes_.size(), 0};
        png_set_read_fn(png_, &reader_, read_from_memory);
    }
    ~PngReadSession() { png_destroy_read_struct(&png_, &info_, nullptr); }
    PngReadSession(const PngReadSession&) = delete;
    PngReadSession& operator=(const PngReadSession&) = delete;

    png_structp png() { return png_; }
    size_t file_size() const { return bytes_.size(); }
    png_infop info() { return info_; }

    void check(bool ok) {
        require(ok, ErrorKind::InvalidArgument, path_ + ": corrupt or truncated PNG (" + sink_.message + ")");
    }

private:
    std::string path_;
    std::vector<uint8_t> bytes_;
    PngErrorSink sink_;
    MemoryReader reader_{};
    png_structp png_ = nullptr;
    png_infop info_ = nullptr;
};

// PNG keywords: 1-79 Latin-1 printable characters, no leading/trailing/consecutive spaces.
std::string png_keyword(const std::string& keyword, const std::string& path) {
    const std::string message = "cannot write " + path + ": text keyword \"" + keyword +
                                "\" must be 1 to 79 printable Latin-1 characters without leading, "
                                "trailing or consecutive spaces";
    const std::optional<std::string> latin1 = utf8_to_latin1(keyword);
    require(latin1 && !latin1->empty() && latin1->size() <= 79, ErrorKind::InvalidArgument, message);
    const std::string& k = *latin1;
    for (size_t i = 0; i < k.size(); ++i) {
        const auto c = static_cast<unsigned char>(k[i]);
        require((c >= 32 && c <= 126) || c >= 161, ErrorKind::InvalidArgument, message);
        require(c != ' ' || (i > 0 && i + 1 < k.size() && k[i - 1] != ' '), ErrorKind::InvalidArgument, message);
    }
    return k;
}

int color_type_for(int channels) {
    switch (channels) {
        case 1: return PNG_COLOR_TYPE_GRAY;
        case 2: return PNG_COLOR_TYPE_GRAY_ALPHA;
        case 3: return PNG_COLOR_TYPE_RGB;
        default: return PNG_COLOR_TYPE_RGB_ALPHA;
    }
}

// An unused name beside `path` (same directory, so the final rename cannot cross file systems).
std::string create_temp_beside(const std::string& path, int* fd) {
    static std::atomic<unsigned> counter{0};
    for (int attempt = 0; attempt < 100; ++attempt) {
        std::string temp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
        *fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (*fd >= 0) return temp;
        require(errno == EEXIST, ErrorKind::IO, "cannot create a temporary file for " + path + ": " + errno_text());
    }
    fail(ErrorKind::IO, "cannot create a temporary file for " + path + ": too many name collisions");
}

}  // namespace

Image read_png(const std::string& path) {
    PngReadSession session(path);
    PngHeader header;
    session.check(read_header(session.png(), session.info(), /*to_rgb8=*/true, &header));
    const uint64_t pixels = uint64_t(header.width) * header.height;
    const std::string size = std::to_string(header.width) + "x" + std::to_string(header.height);
    require(pixels <= kMaxPngPixels, ErrorKind::InvalidArgument,
            path + ": image of " + size + " pixels is larger than kiln reads (" + std::to_string(kMaxPngPixels) + " pixels)");
    // Deflate expands at most 1032:1 (258 bytes from a 2-bit code), so a header claiming more pixels
    // than the file can hold is corrupt; checking first avoids a huge allocation for a tiny file.
    const uint64_t stored_bytes = pixels * header.stored_bits_per_pixel / 8;
    require(stored_bytes / 1032 <= session.file_size(), ErrorKind::InvalidArgument,
            path + ": corrupt or truncated PNG (a " + size + " image cannot fit in " +
                std::to_string(session.file_size()) + " bytes)");
    // read_header asked libpng for 8-bit RGB; anything else would be a libpng surprise.
    require(header.rowbytes == size_t(header.width) * 3, ErrorKind::Unsupported,
            path + ": unexpected PNG layout after conversion to RGB");
    Image image;
    image.width = static_cast<int>(header.width);
    image.height = static_cast<int>(header.height);
    image.channels = 3;
    image.pixels.assign(pixels * 3, 0);
    std::vector<png_bytep> rows(header.height);
    for (png_uint_32 y = 0; y < header.height; ++y) rows[y] = image.pixels.data() + size_t(y) * header.rowbytes;
    session.check(read_rows(session.png(), session.info(), rows.data()));
    return image;
}

TextChunks read_png_text(const std::string& path) {
    PngReadSession session(path);
    PngHeader header;
    session.check(read_header(session.png(), session.info(), /*to_rgb8=*/false, &header));
    std::vector<uint8_t> scratch(header.rowbytes);
    session.check(skip_rows(session.png(), session.info(), &header, scratch.data()));

    png_textp texts = nullptr;
    const int count = png_get_text(session.png(), session.info(), &texts, nullptr);
    const auto tolerant_latin1 = [](std::string_view bytes) {
        return is_valid_utf8(bytes) ? std::string(bytes) : latin1_to_utf8(bytes);
    };
    TextChunks chunks;
    for (int i = 0; i < count; ++i) {
        const png_text& t = texts[i];
        const std::string_view body = t.text ? std::string_view(t.text) : std::string_view();
        const bool international = t.compression == PNG_ITXT_COMPRESSION_NONE || t.compression == PNG_ITXT_COMPRESSION_zTXt;
        chunks.emplace_back(tolerant_latin1(t.key ? t.key : ""), international ? sanitize_utf8(body) : tolerant_latin1(body));
    }
    return chunks;
}

void write_png(const std::string& path, const Image& image, const TextChunks& text) {
    require(image.width > 0 && image.height > 0, ErrorKind::InvalidArgument,
            "cannot write " + path + ": image size " + std::to_string(image.width) + "x" +
                std::to_string(image.height) + " is empty or negative");
    require(image.channels >= 1 && image.channels <= 4, ErrorKind::InvalidArgument,
            "cannot write " + path + ": " + std::to_string(image.channels) + " channels (PNG takes 1 to 4)");
    const uint64_t row_bytes = uint64_t(image.width) * image.channels;
    require(row_bytes * image.height == image.pixels.size(), ErrorKind::InvalidArgument,
            "cannot write " + path + ": " + std::to_string(image.pixels.size()) + " bytes of pixels for a " +
                std::to_string(image.width) + "x" + std::to_string(image.height) + "x" +
                std::to_string(image.channels) + " image");

    // libpng copies the chunk texts in png_set_text; these strings only need to outlive that call.
    std::vector<std::string> keys, bodies;
    std::vector<png_text> chunks(text.size());
    for (const auto& [keyword, body] : text) {
        keys.push_back(png_keyword(keyword, path));
        require(is_valid_utf8(body), ErrorKind::InvalidArgument,
                "cannot write " + path + ": text for \"" + keyword + "\" is not valid UTF-8");
        require(body.find('\0') == std::string::npos, ErrorKind::InvalidArgument,
                "cannot write " + path + ": text for \"" + keyword + "\" contains a NUL character");
        std::optional<std::string> latin1 = utf8_to_latin1(body);
        chunks[bodies.size()].compression = latin1 ? PNG_TEXT_COMPRESSION_NONE : PNG_ITXT_COMPRESSION_NONE;
        bodies.push_back(latin1 ? std::move(*latin1) : body);
    }
    for (size_t i = 0; i < chunks.size(); ++i) {
        chunks[i].key = keys[i].data();
        chunks[i].text = bodies[i].data();
        chunks[i].text_length = bodies[i].size();
    }
    std::vector<png_bytep> rows(image.height);
    for (int y = 0; y < image.height; ++y)
        rows[y] = const_cast<png_bytep>(image.pixels.data()) + size_t(y) * row_bytes;  // libpng only reads them

    int fd = -1;
    const std::string temp = create_temp_beside(path, &fd);
    struct TempGuard {
        const std::string& name;
        bool committed = false;
        ~TempGuard() {
            if (!committed) ::unlink(name.c_str());
        }
    } guard{temp};
    std::unique_ptr<FILE, int (*)(FILE*)> file(::fdopen(fd, "wb"), std::fclose);
    if (!file) {
        ::close(fd);
        fail(ErrorKind::IO, "cannot write " + path + ": " + errno_text());
    }

    PngErrorSink sink;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &sink, on_png_error, on_png_warning);
    png_infop info = png ? png_create_info_struct(png) : nullptr;
    struct WriteStructs {
        png_structp* png;
        png_infop* info;
        ~WriteStructs() { png_destroy_write_struct(png, info); }
    } structs{&png, &info};
    require(png && info, ErrorKind::OutOfMemory, "cannot allocate a PNG encoder for " + path);

    const PngWriteJob job{png,        info,           file.get(),    png_uint_32(image.width), png_uint_32(image.height),
                          color_type_for(image.channels), rows.data(), chunks.data(), static_cast<int>(chunks.size())};
    require(write_all(&job), ErrorKind::IO, "cannot write " + path + ": " + sink.message);
    // The call comes first and errno is read after it: as arguments of one require() call, the
    // message (and errno) could be evaluated before the call sets errno.
    if (std::fclose(file.release()) != 0) fail(ErrorKind::IO, "cannot write " + path + ": " + errno_text());
    if (std::rename(temp.c_str(), path.c_str()) != 0)
        fail(ErrorKind::IO, "cannot write " + path + " (renaming the finished temporary file failed): " + errno_text());
    guard.committed = true;
}

}  // namespace kiln
