// Broken tokenizer files and bad arguments give a kiln::Error naming the culprit, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/error.h"
#include "text/clip_tokenizer.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

const std::string kTokenizerDir = std::string(KILN_TEST_DATA) + "/sd15-mini/diffusers/tokenizer";

class TokenizerBadInput : public ::testing::Test {
protected:
    void SetUp() override {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        dir_ = fs::path(::testing::TempDir()) / (std::string("kiln_tokenizer_") + info->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    std::string write(const std::string& name, const std::string& content) {
        const std::string path = (dir_ / name).string();
        std::ofstream(path, std::ios::binary) << content;
        return path;
    }
    static std::string read(const std::string& path) {
        std::ifstream in(path, std::ios::binary);
        std::ostringstream s;
        s << in.rdbuf();
        return s.str();
    }
    std::string real_vocab() { return kTokenizerDir + "/vocab.json"; }
    std::string real_merges() { return kTokenizerDir + "/merges.txt"; }

    fs::path dir_;
};

// Runs `f`, expects a kiln::Error of `kind` whose message contains every string of `needles`.
template <typename F>
void expect_error(F&& f, ErrorKind kind, std::initializer_list<std::string> needles) {
    try {
        f();
        ADD_FAILURE() << "no kiln::Error thrown";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), kind) << e.what();
        for (const std::string& needle : needles) EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

}  // namespace

TEST_F(TokenizerBadInput, MissingFiles) {
    const std::string missing = (dir_ / "nope.json").string();
    expect_error([&] { ClipTokenizer::from_files(missing, real_merges()); }, ErrorKind::IO, {missing});
    expect_error([&] { ClipTokenizer::from_files(real_vocab(), missing); }, ErrorKind::IO, {missing});
    expect_error([&] { ClipTokenizer::from_folder((dir_ / "absent").string()); }, ErrorKind::IO, {"absent"});
    // A folder without merges.txt.
    write("vocab.json", read(real_vocab()));
    expect_error([&] { ClipTokenizer::from_folder(dir_.string()); }, ErrorKind::IO, {"merges.txt"});
}

TEST_F(TokenizerBadInput, GarbledVocab) {
    const std::string merges = real_merges();
    for (const std::string& content : {std::string("{\"!\": 0, \"\\\"\": "), std::string("\x1f\x8b\x08 binary"),
                                       std::string("[\"!\", \"a\"]"), std::string("{}"),
                                       std::string("{\"!\": \"zero\"}"), std::string("{\"!\": -1}"),
                                       std::string("{\"!\": 0.5}")}) {
        const std::string path = write("vocab.json", content);
        expect_error([&] { ClipTokenizer::from_files(path, merges); }, ErrorKind::InvalidModel, {path});
    }
    // Valid JSON that lacks the byte-level tokens.
    const std::string path = write("vocab.json", "{\"a\": 0, \"b\": 1}");
    expect_error([&] { ClipTokenizer::from_files(path, merges); }, ErrorKind::InvalidModel, {path});
}

TEST_F(TokenizerBadInput, VocabWithoutSpecialTokens) {
    auto vocab = nlohmann::json::parse(read(real_vocab()));
    vocab.erase("<|startoftext|>");
    const std::string path = write("vocab.json", vocab.dump());
    expect_error([&] { ClipTokenizer::from_files(path, real_merges()); }, ErrorKind::InvalidModel,
                 {path, "<|startoftext|>"});
}

TEST_F(TokenizerBadInput, GarbledMerges) {
    const std::string vocab = real_vocab();
    const std::string empty = write("empty.txt", "");
    expect_error([&] { ClipTokenizer::from_files(vocab, empty); }, ErrorKind::InvalidModel, {empty});
    const std::string header_only = write("header.txt", "#version: 0.2\n");
    expect_error([&] { ClipTokenizer::from_files(vocab, header_only); }, ErrorKind::InvalidModel, {header_only});
    const std::string one_part = write("one.txt", "#version: 0.2\ni n\nthe\n");
    expect_error([&] { ClipTokenizer::from_files(vocab, one_part); }, ErrorKind::InvalidModel, {one_part, "merge 2"});
    const std::string three_parts = write("three.txt", "#version: 0.2\ni n t\n");
    expect_error([&] { ClipTokenizer::from_files(vocab, three_parts); }, ErrorKind::InvalidModel, {three_parts});
    const std::string unknown = write("unknown.txt", "#version: 0.2\ni n\nqqqzz xyzzy\n");
    expect_error([&] { ClipTokenizer::from_files(vocab, unknown); }, ErrorKind::InvalidModel, {unknown, "qqqzz"});
    // The vocabulary file itself used as merges: lines that are not "left right" pairs.
    expect_error([&] { ClipTokenizer::from_files(vocab, vocab); }, ErrorKind::InvalidModel, {vocab});
}

TEST_F(TokenizerBadInput, MergesWithWindowsLineEndingsAreAccepted) {
    std::string merges = read(real_merges());
    std::string crlf;
    for (char c : merges) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
    const ClipTokenizer a = ClipTokenizer::from_files(real_vocab(), write("merges.txt", crlf));
    const ClipTokenizer b = ClipTokenizer::from_files(real_vocab(), real_merges());
    EXPECT_EQ(a.encode("a photograph of an astronaut"), b.encode("a photograph of an astronaut"));
}

TEST_F(TokenizerBadInput, GarbledTokenizerConfig) {
    write("vocab.json", read(real_vocab()));
    write("merges.txt", read(real_merges()));
    const std::string config = write("tokenizer_config.json", "{\"pad_token\": ");
    expect_error([&] { ClipTokenizer::from_folder(dir_.string()); }, ErrorKind::InvalidModel, {config});
    write("tokenizer_config.json", "{\"pad_token\": 5}");
    expect_error([&] { ClipTokenizer::from_folder(dir_.string()); }, ErrorKind::InvalidModel, {config});
    write("tokenizer_config.json", "{\"pad_token\": \"<pad-not-in-vocab>\"}");
    expect_error([&] { ClipTokenizer::from_folder(dir_.string()); }, ErrorKind::InvalidModel,
                 {config, "<pad-not-in-vocab>"});
    // The AddedToken form that transformers also writes.
    write("tokenizer_config.json", "{\"pad_token\": {\"content\": \"!\", \"special\": true}}");
    EXPECT_EQ(ClipTokenizer::from_folder(dir_.string()).pad_id(), 0);
    // No config at all: CLIP's default pad token.
    fs::remove(dir_ / "tokenizer_config.json");
    const ClipTokenizer tok = ClipTokenizer::from_folder(dir_.string());
    EXPECT_EQ(tok.pad_id(), tok.eos_id());
}

TEST_F(TokenizerBadInput, BadArguments) {
    ClipTokenizer tok = ClipTokenizer::builtin();
    expect_error([&] { tok.token_id("definitely-not-a-token"); }, ErrorKind::InvalidArgument, {"definitely-not-a-token"});
    expect_error([&] { tok.set_pad_token("<pad>"); }, ErrorKind::InvalidArgument, {"<pad>"});
    expect_error([&] { tok.set_pad_token(""); }, ErrorKind::InvalidArgument, {"pad"});
    EXPECT_EQ(tok.pad_id(), tok.eos_id());  // unchanged by the failed calls
    expect_error([&] { tok.encode_padded("a cat", tok.pad_id(), 1); }, ErrorKind::InvalidArgument, {"length"});
    expect_error([&] { tok.encode_padded("a cat", tok.pad_id(), -5); }, ErrorKind::InvalidArgument, {"length"});
    expect_error([&] { tok.encode_padded("a cat", -1); }, ErrorKind::InvalidArgument, {"pad id"});
    expect_error([&] { tok.encode_padded("a cat", 49408); }, ErrorKind::InvalidArgument, {"pad id"});
}

TEST_F(TokenizerBadInput, ArbitraryBytesNeverThrow) {
    const ClipTokenizer tok = ClipTokenizer::builtin();
    // Every byte value, in every position of a short window, plus long runs of invalid data.
    std::string all;
    for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
    EXPECT_NO_THROW(tok.encode(all));
    for (int b = 0; b < 256; ++b) {
        std::string s = "ab";
        s.push_back(static_cast<char>(b));
        s += "\xE2\x82";
        s.push_back(static_cast<char>(b));
        EXPECT_NO_THROW(tok.encode_padded(s, tok.pad_id())) << b;
    }
    EXPECT_EQ(tok.encode_padded(std::string(10000, '\xFF'), tok.pad_id()).size(), 77u);
    // One enormous "word": BPE stays fast (a priority queue, not a quadratic rescan).
    EXPECT_FALSE(tok.encode(std::string(200000, 'a')).empty());
}
