// OpenAI CLIP's BPE merge list (assets/clip/clip_merges.txt.tar.xz, MIT), compiled into the library
// so that single-file checkpoints, which carry no tokenizer, work from any directory.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// The start of OpenAI's bpe_simple_vocab_16e6.txt, byte for byte: its header line and the merges CLIP reads
// (the rest of the file, unused by CLIP's tokenizer, is not stored).
std::string_view builtin_clip_vocab_text();

// The merges CLIP uses: lines 1 .. 49152-256-2 of the decompressed file (line 0 is a header), each
// "left right". Parsed on first use, then kept; safe to call from several threads.
const std::vector<std::string>& builtin_clip_merges();

}  // namespace kiln
