#include <gtest/gtest.h>

#include "image/utf8.h"

using namespace kiln;

TEST(Utf8, RejectsIllFormedSequences) {
    // Unicode 15, table 3-7 (well-formed UTF-8 byte sequences).
    EXPECT_TRUE(is_valid_utf8("plain"));
    EXPECT_TRUE(is_valid_utf8("\xC3\xA9 \xE5\xAE\x87 \xF0\x9F\x9A\x80 \xEF\xBF\xBD \xF4\x8F\xBF\xBF"));
    for (const char* bad : {"\x80", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                            "\xF5\x80\x80\x80", "\xFF", "\xC3", "\xE5\xAE", "a\xC3(", "\xF0\x9F\x9A"}) {
        EXPECT_FALSE(is_valid_utf8(bad)) << bad;
    }
}

TEST(Utf8, Latin1Conversions) {
    EXPECT_EQ(latin1_to_utf8("caf\xE9 \xFF\x01"), "caf\xC3\xA9 \xC3\xBF\x01");
    EXPECT_EQ(utf8_to_latin1("caf\xC3\xA9 \xC3\xBF"), std::optional<std::string>("caf\xE9 \xFF"));
    EXPECT_EQ(utf8_to_latin1("\xC4\x80"), std::nullopt);  // U+0100 is beyond Latin-1
    EXPECT_EQ(utf8_to_latin1("\xC3"), std::nullopt);
    for (int b = 0; b < 256; ++b) {
        const std::string one(1, static_cast<char>(b));
        EXPECT_EQ(utf8_to_latin1(latin1_to_utf8(one)), std::optional<std::string>(one)) << b;
    }
}

TEST(Utf8, SanitizeReplacesEachBadByte) {
    EXPECT_EQ(sanitize_utf8("ok \xC3\xA9"), "ok \xC3\xA9");
    EXPECT_EQ(sanitize_utf8("a\xFF" "b\xE5\xAE"), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD");
}
