#include "text/builtin_vocab.h"

#include "kiln/error.h"

#ifndef KILN_CLIP_VOCAB_TXT
#error "KILN_CLIP_VOCAB_TXT (path of the unpacked clip_merges.txt) must be defined by the build"
#endif

// The assembler copies the file into read-only data at build time (.incbin), which is far cheaper to
// compile than a 3.2 MB array literal. The path comes from CMake; OBJECT_DEPENDS rebuilds on change.
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
        ".globl " KILN_SYM(kiln_clip_vocab_begin) "\n"
        KILN_SYMTYPE(kiln_clip_vocab_begin)
        KILN_SYM(kiln_clip_vocab_begin) ":\n"
        ".incbin \"" KILN_CLIP_VOCAB_TXT "\"\n"
        ".globl " KILN_SYM(kiln_clip_vocab_end) "\n"
        KILN_SYM(kiln_clip_vocab_end) ":\n"
        ".byte 0\n"
        KILN_RODATA_END);

extern "C" const char kiln_clip_vocab_begin[];
extern "C" const char kiln_clip_vocab_end[];

namespace kiln {
namespace {

constexpr size_t kClipMergeCount = 49152 - 256 - 2;  // as in CLIP's simple_tokenizer

std::vector<std::string> parse_merges(std::string_view text) {
    std::vector<std::string> merges;
    merges.reserve(kClipMergeCount);
    size_t pos = text.find('\n');  // skip the header line
    while (pos != std::string::npos && merges.size() < kClipMergeCount) {
        const size_t start = pos + 1;
        pos = text.find('\n', start);
        merges.emplace_back(text.substr(start, (pos == std::string::npos ? text.size() : pos) - start));
    }
    require(merges.size() == kClipMergeCount, ErrorKind::InvalidModel,
            "builtin CLIP vocabulary: expected " + std::to_string(kClipMergeCount) + " merges, found " +
                std::to_string(merges.size()));
    return merges;
}

}  // namespace

std::string_view builtin_clip_vocab_text() {
    return {kiln_clip_vocab_begin, static_cast<size_t>(kiln_clip_vocab_end - kiln_clip_vocab_begin)};
}

const std::vector<std::string>& builtin_clip_merges() {
    static const std::vector<std::string> merges = parse_merges(builtin_clip_vocab_text());
    return merges;
}

}  // namespace kiln
