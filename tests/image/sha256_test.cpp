#include <gtest/gtest.h>

#include "image/sha256.h"
#include "image_test_support.h"
#include "kiln/error.h"

using namespace kiln;
using namespace kiln::test;

namespace {
std::string hash_of(const TempDir& dir, const std::string& content) {
    const std::string path = dir.file("data.bin");
    write_bytes(path, std::vector<uint8_t>(content.begin(), content.end()));
    return sha256_file_hex(path);
}
}  // namespace

TEST(Sha256, FipsTestVectors) {
    // FIPS 180-2, appendix B (one block, two blocks, one million 'a'), and the empty message.
    TempDir dir;
    EXPECT_EQ(hash_of(dir, "abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    std::string two_blocks;  // "abcdbcde...nopq": the 14 four-letter windows of "abcdefghijklmnopq"
    for (int i = 0; i < 14; ++i) two_blocks += std::string("abcdefghijklmnopq").substr(i, 4);
    ASSERT_EQ(two_blocks.size(), 56u);
    EXPECT_EQ(hash_of(dir, two_blocks),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    // One million bytes spans the reader's 1 MiB blocks' boundary case of a short last read.
    EXPECT_EQ(hash_of(dir, std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    EXPECT_EQ(hash_of(dir, ""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256, ModelHashIsTheFirstTenDigits) {
    TempDir dir;
    const std::string path = dir.file("model.safetensors");
    write_bytes(path, {'a', 'b', 'c'});
    EXPECT_EQ(model_hash(path), "ba7816bf8f");
}

TEST(Sha256, IoErrorsNameTheFile) {
    TempDir dir;
    for (const std::string& path : {dir.file("missing.safetensors"), dir.path()}) {
        try {
            sha256_file_hex(path);
            ADD_FAILURE() << "no error for " << path;
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::IO);
            EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
        }
    }
}
