#include "text/builtin_vocab.h"

#include <zlib.h>

#include "kiln/error.h"

#ifndef KILN_CLIP_VOCAB_GZ
#error "KILN_CLIP_VOCAB_GZ (path of bpe_simple_vocab_16e6.txt.gz) must be defined by the build"
#endif

// The assembler copies the file into read-only data at build time (.incbin), which is far cheaper to
// compile than a 1.3 MB array literal. The path comes from CMake; OBJECT_DEPENDS rebuilds on change.
#if defined(__APPLE__)
#define KILN_SYM(name) "_" #name
#define KILN_RODATA ".const_data\n"
#define KILN_RODATA_END ".text\n"
#define KILN_SYMTYPE(name)
#elif defined(__ELF__)
#define KILN_SYM(name) #name
#define KILN_RODATA ".pushsection .rodata\n"
#define KILN_RODATA_END ".popsection\n"
#define KILN_SYMTYPE(name) ".type " #name ", @object\n"
#else
#error "embedding the CLIP vocabulary needs an ELF or Mach-O assembler"
#endif

__asm__(KILN_RODATA
        ".balign 16\n"
        ".globl " KILN_SYM(kiln_clip_vocab_gz_begin) "\n"
        KILN_SYMTYPE(kiln_clip_vocab_gz_begin)
        KILN_SYM(kiln_clip_vocab_gz_begin) ":\n"
        ".incbin \"" KILN_CLIP_VOCAB_GZ "\"\n"
        ".globl " KILN_SYM(kiln_clip_vocab_gz_end) "\n"
        KILN_SYM(kiln_clip_vocab_gz_end) ":\n"
        ".byte 0\n"
        KILN_RODATA_END);

extern "C" const char kiln_clip_vocab_gz_begin[];
extern "C" const char kiln_clip_vocab_gz_end[];

namespace kiln {
namespace {

constexpr size_t kClipMergeCount = 49152 - 256 - 2;  // as in CLIP's simple_tokenizer

std::string gunzip(std::string_view gz) {
    z_stream zs{};
    // 16 + MAX_WBITS: expect a gzip header and trailer, not a raw zlib stream.
    if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) fail(ErrorKind::OutOfMemory, "zlib: inflateInit2 failed");
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
    zs.avail_in = static_cast<uInt>(gz.size());
    std::string out(gz.size() * 3, '\0');
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
        if (zs.total_out == out.size()) out.resize(out.size() * 2);
        zs.next_out = reinterpret_cast<Bytef*>(out.data() + zs.total_out);
        zs.avail_out = static_cast<uInt>(out.size() - zs.total_out);
        rc = inflate(&zs, Z_NO_FLUSH);
        if (rc != Z_OK && rc != Z_STREAM_END) {
            inflateEnd(&zs);
            fail(ErrorKind::InvalidModel, "builtin CLIP vocabulary: corrupt gzip data (zlib error " +
                                              std::to_string(rc) + ")");
        }
    }
    out.resize(zs.total_out);
    inflateEnd(&zs);
    return out;
}

std::vector<std::string> parse_merges(const std::string& text) {
    std::vector<std::string> merges;
    merges.reserve(kClipMergeCount);
    size_t pos = text.find('\n');  // skip the header line
    while (pos != std::string::npos && merges.size() < kClipMergeCount) {
        const size_t start = pos + 1;
        pos = text.find('\n', start);
        merges.push_back(text.substr(start, (pos == std::string::npos ? text.size() : pos) - start));
    }
    require(merges.size() == kClipMergeCount, ErrorKind::InvalidModel,
            "builtin CLIP vocabulary: expected " + std::to_string(kClipMergeCount) + " merges, found " +
                std::to_string(merges.size()));
    return merges;
}

}  // namespace

std::string_view builtin_clip_vocab_gz() {
    return {kiln_clip_vocab_gz_begin, static_cast<size_t>(kiln_clip_vocab_gz_end - kiln_clip_vocab_gz_begin)};
}

const std::vector<std::string>& builtin_clip_merges() {
    static const std::vector<std::string> merges = parse_merges(gunzip(builtin_clip_vocab_gz()));
    return merges;
}

}  // namespace kiln
