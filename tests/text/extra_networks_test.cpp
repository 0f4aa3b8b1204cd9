// AUTOMATIC1111's extra-network tags taken out of prompts. The expected results are what Python's
// re.sub(r"<(\w+):([^>]+)>", "", prompt) and finditer give (the webui's modules/extra_networks.py pattern),
// run on these strings.
#include <gtest/gtest.h>

#include "kiln/error.h"
#include "text/extra_networks.h"

using namespace kiln;

namespace {

struct Case {
    std::string prompt, without;
    std::vector<std::string> tags;
};

TEST(ExtraNetworks, TagsAreTakenOutAsTheWebuiDoes) {
    const std::vector<Case> cases = {
        {"a <lora:foo:0.8> cat", "a  cat", {"<lora:foo:0.8>"}},
        {"<lora:>", "<lora:>", {}},
        {"<:x>", "<:x>", {}},
        {"a < b: c > d", "a < b: c > d", {}},
        {"<lora:a<b:1>", "", {"<lora:a<b:1>"}},
        {"x<hypernet:n>y<lora:z:1>", "xy", {"<hypernet:n>", "<lora:z:1>"}},
        {"<a:b", "<a:b", {}},
        {"<\xc3\xa4_1:x y>z", "z", {"<\xc3\xa4_1:x y>"}},
        {"<lora:a\nb>", "", {"<lora:a\nb>"}},
        {"<lora<lora:x:1>", "<lora", {"<lora:x:1>"}},
        {"(castle:1.3) [blurry]", "(castle:1.3) [blurry]", {}},
    };
    for (const Case& c : cases) {
        const PromptWithoutTags got = remove_extra_network_tags(c.prompt);
        EXPECT_EQ(got.prompt, c.without) << c.prompt;
        std::vector<std::string> tags;
        for (const ExtraNetworkTag& t : got.tags) tags.push_back(t.text);
        EXPECT_EQ(tags, c.tags) << c.prompt;
    }
    EXPECT_EQ(remove_extra_network_tags("<lora:name:0.5>").tags.at(0).kind, "lora");
}

// The webui's Lora extension (extra_networks_lora.py): items split at ':', "k=v" items named; te = the second
// positional item or te=, else 1; unet = the third, else te; or unet=.
TEST(ExtraNetworks, LoraTagsReadAsTheWebuiReadsThem) {
    struct Case {
        std::string tag, name;
        double te, unet;
    };
    const Case cases[] = {
        {"<lora:film:0.7>", "film", 0.7, 0.7},      {"<lora:film>", "film", 1.0, 1.0},
        {"<lora:film:0.5:0.25>", "film", 0.5, 0.25}, {"<lora:film:unet=0.3>", "film", 1.0, 0.3},
        {"<lora:film:te=0.2:0.9>", "film", 0.2, 0.2}, {"<lora:film: 1e-1 :te=2>", "film", 2.0, 2.0},
        {"<lyco:my film:0.5>", "my film", 0.5, 0.5}, {"<lora:a=b=c:0.5>", "a=b=c", 0.5, 0.5},
    };
    for (const Case& c : cases) {
        const ExtraNetworkTag tag = remove_extra_network_tags(c.tag).tags.at(0);
        ASSERT_TRUE(is_lora_tag(tag)) << c.tag;
        const LoraTag t = parse_lora_tag(tag);
        EXPECT_EQ(t.name, c.name) << c.tag;
        EXPECT_EQ(t.te_multiplier, c.te) << c.tag;
        EXPECT_EQ(t.unet_multiplier, c.unet) << c.tag;
    }
    EXPECT_FALSE(is_lora_tag(remove_extra_network_tags("<hypernet:x:1>").tags.at(0)));
    for (const char* bad : {"<lora:film:x>", "<lora:film:1:nan>", "<lora:film:1e999>", "<lora:te=1>"})
        EXPECT_THROW(parse_lora_tag(remove_extra_network_tags(bad).tags.at(0)), kiln::Error) << bad;
}

}  // namespace
