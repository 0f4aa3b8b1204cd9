// `kiln prompt`'s AND parts and the webui's token counter, against the webui's own results
// (tests/data/prompt-syntax/a1111_and_emphasis.tar.xz) and, with --embeddings-dir, against its tokenize_line with
// textual-inversion embeddings (tools/ckpt-ti/scripts.tar.xz: ti_chunks_reference.py).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/run_process.h"
#include "io/io_test_util.h"
#include "io/safetensors.h"
#include "text/a1111_fixture.h"

using namespace kiln;
using namespace kiln::test;
using nlohmann::json;

namespace {

const std::string kData = KILN_TEST_DATA;

json run_prompt(const std::vector<std::string>& args) {
    const ProcessResult r = run_kiln(args, std::chrono::seconds(60));
    EXPECT_TRUE(r.exited && r.exit_code == 0) << r.describe();
    return r.out.empty() ? json() : json::parse(r.out);
}

json read(const std::string& path) {
    std::ifstream in(path);
    return json::parse(in);
}

}  // namespace

TEST(PromptCommandAnd, PartsAndCounterAreTheWebuis) {
    int checked = 0;
    for (const json& c : read(std::string(KILN_PROMPT_AND_DATA) + "/a1111_and.json")) {
        const std::string prompt = c.at("prompt");
        // The hand-written prompts whose schedules kiln can print (not "[a:b:1e400]", an error for `kiln prompt`).
        if (!c.contains("token_count") || prompt.find("1e400") != std::string::npos) continue;
        SCOPED_TRACE(json(prompt).dump());
        const json out = run_prompt({"prompt", prompt});
        ASSERT_FALSE(out.is_null());
        EXPECT_EQ(out.at("token_count"), c.at("token_count"));
        // The parts of the prompt without its extra-network tags: the same as the webui's where it has none.
        if (prompt.find('<') != std::string::npos) continue;
        ASSERT_EQ(out.at("and_parts").size(), c.at("parts").size());
        for (size_t i = 0; i < c.at("parts").size(); ++i) {
            EXPECT_EQ(out.at("and_parts")[i].at("text"), c.at("parts")[i][0]);
            EXPECT_TRUE(same_double(fixture_double(out.at("and_parts")[i].at("weight")), fixture_double(c.at("parts")[i][1])));
        }
        if (++checked == 12) break;  // each case is a process; a dozen cover the wiring (the library test has all)
    }
    EXPECT_EQ(checked, 12);
}

TEST(PromptCommandAnd, EmbeddingsCountTheirVectors) {
    const json ref = read(std::string(KILN_TI_DATA) + "/ti-chunks.json");
    const std::string model = kData + "/sd15-mini/diffusers";
    TempDir dir;
    for (const auto& [name, vectors] : ref.at("embeddings").items())
        write_safetensors(dir.file(name + ".safetensors"), {{"emb_params", Tensor(Shape{vectors.get<int64_t>(), 32})}});
    for (const json& c : ref.at("cases")) {
        const std::string prompt = c.at("prompt");
        SCOPED_TRACE(prompt);
        const json out = run_prompt({"prompt", "-m", model, "--embeddings-dir", dir.path().string(), prompt});
        ASSERT_FALSE(out.is_null());
        EXPECT_EQ(out.at("token_count"), c.at("token_count"));
        EXPECT_EQ(out.at("text_encoders")[0].at("schedules")[0].at("token_count"), c.at("token_count"));
    }
    // An embedding of another width does not fit the model: its name is words, as in the webui.
    TempDir other;
    write_safetensors(other.file("kilnstyle.safetensors"), {{"emb_params", Tensor(Shape{3, 7})}});
    const json words = run_prompt({"prompt", "-m", model, "--embeddings-dir", other.path().string(), "a photo of kilnstyle"});
    const json plain = run_prompt({"prompt", "-m", model, "a photo of kilnstyle"});
    EXPECT_EQ(words.at("text_encoders"), plain.at("text_encoders"));
    // (The comparison can fail: where the embedding fits, its vectors' places are not the name's tokens.)
    const json used = run_prompt({"prompt", "-m", model, "--embeddings-dir", dir.path().string(), "a photo of kilnstyle"});
    EXPECT_NE(used.at("text_encoders"), plain.at("text_encoders"));
}
