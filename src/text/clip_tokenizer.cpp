#include "text/clip_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/error.h"
#include "text/builtin_vocab.h"
#include "text/clip_tokenizer_bpe.h"
#include "text/unicode.h"

namespace kiln {
namespace {

const std::string kStartOfText = "<|startoftext|>";
const std::string kEndOfText = "<|endoftext|>";

std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    require(in.good(), ErrorKind::IO, "cannot open " + path);
    std::ostringstream buffer;
    buffer << in.rdbuf();
    require(!in.bad(), ErrorKind::IO, "cannot read " + path);
    return buffer.str();
}

nlohmann::json parse_json_file(const std::string& path) {
    const std::string text = read_text_file(path);
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        fail(ErrorKind::InvalidModel, path + ": not valid JSON (" + e.what() + ")");
    }
}

std::unordered_map<std::string, int> read_vocab_json(const std::string& path) {
    const nlohmann::json json = parse_json_file(path);
    require(json.is_object() && !json.empty(), ErrorKind::InvalidModel,
            path + ": expected a JSON object mapping tokens to ids");
    std::unordered_map<std::string, int> vocab;
    vocab.reserve(json.size());
    for (const auto& [token, value] : json.items()) {
        // The message only on failure: made for each of ~49k tokens it cost more than the parse.
        if (!(value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() < (int64_t{1} << 30)))
            fail(ErrorKind::InvalidModel, path + ": token '" + token + "' has no valid id (" + value.dump() + ")");
        vocab.emplace(token, value.get<int>());
    }
    return vocab;
}

std::vector<std::string> read_merges_txt(const std::string& path) {
    const std::string text = read_text_file(path);
    std::vector<std::string> merges;
    size_t start = 0;
    while (start < text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        std::string line = text.substr(start, end - start);
        start = end + 1;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        // The "#version" header is not a merge (tokenizers skips it the same way); nor are blank lines.
        if (line.empty() || line.rfind("#version", 0) == 0) continue;
        merges.push_back(std::move(line));
    }
    require(!merges.empty(), ErrorKind::InvalidModel, path + ": no merges found");
    return merges;
}

// CLIP's vocabulary as simple_tokenizer.py builds it: the 256 byte characters in code point order, the
// same with "</w>", one token per merge, then the two special tokens (ids 49406, 49407).
std::unordered_map<std::string, int> builtin_vocab(const std::vector<std::string>& merges) {
    std::vector<std::string> byte_tokens(ClipBpe::byte_chars().begin(), ClipBpe::byte_chars().end());
    std::sort(byte_tokens.begin(), byte_tokens.end(), [](const std::string& a, const std::string& b) {
        return unicode::decode_utf8(a) < unicode::decode_utf8(b);
    });
    std::vector<std::string> tokens = byte_tokens;
    for (const auto& t : byte_tokens) tokens.push_back(t + "</w>");
    for (const auto& merge : merges) {
        std::string joined = merge;
        joined.erase(std::remove(joined.begin(), joined.end(), ' '), joined.end());
        tokens.push_back(std::move(joined));
    }
    tokens.push_back(kStartOfText);
    tokens.push_back(kEndOfText);
    std::unordered_map<std::string, int> vocab;
    vocab.reserve(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) vocab.insert_or_assign(tokens[i], static_cast<int>(i));
    return vocab;
}

// The pad token of a transformers tokenizer config: a string, or an AddedToken object with "content".
std::string pad_token_of(const nlohmann::json& config, const std::string& path) {
    if (!config.is_object() || !config.contains("pad_token") || config["pad_token"].is_null()) return kEndOfText;
    const nlohmann::json& pad = config["pad_token"];
    if (pad.is_string()) return pad.get<std::string>();
    require(pad.is_object() && pad.contains("content") && pad["content"].is_string(), ErrorKind::InvalidModel,
            path + ": pad_token must be a string or an object with a string \"content\"");
    return pad["content"].get<std::string>();
}

bool matches_at(const std::u32string& text, size_t pos, const std::u32string& token) {
    return text.compare(pos, token.size(), token) == 0;
}

}  // namespace

ClipTokenizer::ClipTokenizer(std::shared_ptr<const ClipBpe> bpe, const std::string& vocab_source)
    : bpe_(std::move(bpe)) {
    for (const std::string* special : {&kStartOfText, &kEndOfText}) {
        require(bpe_->vocab().count(*special) != 0, ErrorKind::InvalidModel,
                vocab_source + ": the vocabulary lacks the special token " + *special);
    }
    bos_id_ = bpe_->vocab().at(kStartOfText);
    eos_id_ = bpe_->vocab().at(kEndOfText);
    pad_id_ = eos_id_;
    set_pad_token(kEndOfText);
}

ClipTokenizer ClipTokenizer::from_files(const std::string& vocab_json, const std::string& merges_txt) {
    auto vocab = read_vocab_json(vocab_json);
    const auto merges = read_merges_txt(merges_txt);
    return ClipTokenizer(std::make_shared<const ClipBpe>(std::move(vocab), merges, vocab_json, merges_txt), vocab_json);
}

ClipTokenizer ClipTokenizer::from_folder(const std::string& tokenizer_dir) {
    const std::filesystem::path dir(tokenizer_dir);
    require(std::filesystem::is_directory(dir), ErrorKind::IO, "tokenizer folder not found: " + tokenizer_dir);
    ClipTokenizer tokenizer = from_files((dir / "vocab.json").string(), (dir / "merges.txt").string());
    for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
        const std::string path = (dir / name).string();
        if (!std::filesystem::exists(path)) continue;
        const std::string pad = pad_token_of(parse_json_file(path), path);
        require(tokenizer.bpe_->vocab().count(pad) != 0, ErrorKind::InvalidModel,
                path + ": pad_token '" + pad + "' is not in the vocabulary");
        tokenizer.set_pad_token(pad);
        break;
    }
    return tokenizer;
}

ClipTokenizer ClipTokenizer::builtin() {
    static const std::shared_ptr<const ClipBpe> bpe = [] {
        const std::string source = "builtin CLIP vocabulary";
        const auto& merges = builtin_clip_merges();
        return std::make_shared<const ClipBpe>(builtin_vocab(merges), merges, source, source);
    }();
    return ClipTokenizer(bpe, "builtin CLIP vocabulary");
}

void ClipTokenizer::set_pad_token(const std::string& token) {
    require(!token.empty(), ErrorKind::InvalidArgument, "the pad token must not be empty");
    pad_id_ = token_id(token);
    specials_ = {{unicode::decode_utf8(kStartOfText), bos_id_}, {unicode::decode_utf8(kEndOfText), eos_id_}};
    if (token != kStartOfText && token != kEndOfText) specials_.push_back({unicode::decode_utf8(token), pad_id_});
    // Longest first, so that trying them in order at a position gives the longest match.
    std::stable_sort(specials_.begin(), specials_.end(),
                     [](const Special& a, const Special& b) { return a.text.size() > b.text.size(); });
}

int ClipTokenizer::token_id(const std::string& token) const {
    const auto it = bpe_->vocab().find(token);
    require(it != bpe_->vocab().end(), ErrorKind::InvalidArgument, "unknown CLIP token '" + token + "'");
    return it->second;
}

std::optional<int> ClipTokenizer::find_token_id(const std::string& token) const {
    const auto it = bpe_->vocab().find(token);
    if (it == bpe_->vocab().end()) return std::nullopt;
    return it->second;
}

size_t ClipTokenizer::vocab_size() const { return bpe_->vocab().size(); }

std::vector<int> ClipTokenizer::encode(const std::string& text) const {
    const std::u32string chars = unicode::decode_utf8(text);

    std::vector<int> ids;
    ids.reserve(text.size() / 3 + 4);
    // Special tokens are cut out of the raw text before any normalisation, as the tokenizers library's
    // added vocabulary does for tokens with normalized=False: "<|endoftext|>" is one id, "<|EndOfText|>" is not.
    size_t segment_start = 0;
    for (size_t pos = 0; pos < chars.size();) {
        size_t matched = specials_.size();
        for (size_t k = 0; k < specials_.size() && matched == specials_.size(); ++k) {
            if (matches_at(chars, pos, specials_[k].text)) matched = k;
        }
        if (matched == specials_.size()) {
            ++pos;
            continue;
        }
        encode_segment(chars.substr(segment_start, pos - segment_start), ids);
        ids.push_back(specials_[matched].id);
        pos += specials_[matched].text.size();
        segment_start = pos;
    }
    encode_segment(chars.substr(segment_start), ids);
    return ids;
}

void ClipTokenizer::encode_segment(const std::u32string& segment, std::vector<int>& out) const {
    if (segment.empty()) return;
    // Normaliser: NFC, then lowercase. (Its third step, collapsing whitespace runs to one space, cannot
    // change the result: the pre-tokenizer drops all whitespace.)
    const std::u32string composed = unicode::nfc(segment);
    std::u32string text;
    text.reserve(composed.size());
    for (char32_t cp : composed) unicode::append_lowercase(text, cp);

    // Pre-tokenizer: CLIP's pattern 's|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+, matched
    // leftmost-first; text between matches (whitespace) is dropped. The pattern's literal special-token
    // alternatives are left out: only a differently-cased one can reach here, and the ByteLevel
    // pre-tokenizer that follows splits it again into exactly the pieces this loop produces.
    std::string word;
    const size_t n = text.size();
    size_t i = 0;
    while (i < n) {
        const char32_t c = text[i];
        size_t end = i + 1;
        if (unicode::is_whitespace(c)) {
            ++i;
            continue;
        }
        if (c == U'\'' && i + 1 < n) {
            const char32_t c1 = text[i + 1], c2 = i + 2 < n ? text[i + 2] : 0;
            if (c1 == U's' || c1 == U't' || c1 == U'm' || c1 == U'd') {
                end = i + 2;
            } else if ((c1 == U'r' && c2 == U'e') || (c1 == U'v' && c2 == U'e') || (c1 == U'l' && c2 == U'l')) {
                end = i + 3;
            }
        }
        if (end == i + 1) {
            if (unicode::is_letter(c)) {
                while (end < n && unicode::is_letter(text[end])) ++end;
            } else if (!unicode::is_number(c)) {  // a digit stands alone
                while (end < n && !unicode::is_whitespace(text[end]) && !unicode::is_letter(text[end]) &&
                       !unicode::is_number(text[end]))
                    ++end;
            }
        }
        word.clear();
        for (size_t k = i; k < end; ++k) unicode::append_utf8(word, text[k]);
        bpe_->encode_word(word, out);
        i = end;
    }
}

std::vector<int> ClipTokenizer::encode_padded(const std::string& text, int pad_id, int length) const {
    require(length >= 2, ErrorKind::InvalidArgument,
            "encode_padded: length must be at least 2 (bos + eos), got " + std::to_string(length));
    require(pad_id >= 0 && pad_id <= bpe_->max_id(), ErrorKind::InvalidArgument,
            "encode_padded: pad id " + std::to_string(pad_id) + " is outside the vocabulary");
    const std::vector<int> ids = encode(text);
    const size_t keep = std::min(ids.size(), static_cast<size_t>(length) - 2);
    std::vector<int> out;
    out.reserve(static_cast<size_t>(length));
    out.push_back(bos_id_);
    out.insert(out.end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(keep));
    out.push_back(eos_id_);
    out.resize(static_cast<size_t>(length), pad_id);
    return out;
}

}  // namespace kiln
