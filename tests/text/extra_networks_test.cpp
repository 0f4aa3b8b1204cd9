// AUTOMATIC1111's extra-network tags taken out of prompts. The expected results are what Python's
// re.sub(r"<(\w+):([^>]+)>", "", prompt) and finditer give (the webui's modules/extra_networks.py pattern),
// run on these strings.
#include <gtest/gtest.h>

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

}  // namespace
