// Textual-inversion files in the layouts AUTOMATIC1111 reads: its own .pt (made by torch.save in
// make_ckpt_fixtures.py, tools/ckpt-ti/scripts.tar.xz, with a dict or an old ParameterDict), 'emb_params' and
// SDXL .safetensors,
// and files it refuses; a folder with a bad file and a repeated name.
#include <gtest/gtest.h>

#include <cmath>

#include "io/io_test_util.h"
#include "io/safetensors.h"
#include "text/textual_inversion.h"

using namespace kiln;
using kiln::test::expect_error;

namespace {

// The fixture script's values: element i of tensor k is (i - 5) * 0.25 + k.
void expect_fixture_vectors(const TextualInversion& ti, int k) {
    ASSERT_EQ(ti.vectors, 2);
    const Tensor* v = ti.vectors_for("", 3);
    ASSERT_NE(v, nullptr);
    for (int64_t i = 0; i < v->numel(); ++i) EXPECT_EQ((*v)[i], float((double(i) - 5) * 0.25 + k)) << i;
}

Tensor filled(Shape shape, float value) {
    Tensor t(shape);
    for (int64_t i = 0; i < t.numel(); ++i) t[i] = value + float(i);
    return t;
}

}  // namespace

TEST(TextualInversionFiles, WebuiPtFilesThroughThePickleReader) {
    const std::string dir = std::string(KILN_CKPT_DATA) + "/";
    const TextualInversion a = load_textual_inversion(dir + "ti_a1111.pt");
    EXPECT_EQ(a.name, "ti_a1111");
    expect_fixture_vectors(a, 7);
    expect_fixture_vectors(load_textual_inversion(dir + "ti_parameterdict.pt"), 8);
}

TEST(TextualInversionFiles, SafetensorsLayoutsAndWhichEncoderTakesThem) {
    kiln::test::TempDir dir;
    write_safetensors(dir.file("one.safetensors"), {{"emb_params", filled({4}, 1)}});  // [dim]: one vector
    const TextualInversion one = load_textual_inversion(dir.file("one.safetensors"));
    EXPECT_EQ(one.vectors, 1);
    EXPECT_NE(one.vectors_for("clip_l", 4), nullptr);  // a single part fits any encoder of its width
    EXPECT_EQ(one.vectors_for("", 5), nullptr);

    write_safetensors(dir.file("xl.safetensors"), {{"clip_g", filled({2, 6}, 0)}, {"clip_l", filled({2, 4}, 0)}});
    const TextualInversion xl = load_textual_inversion(dir.file("xl.safetensors"));
    EXPECT_EQ(xl.vectors, 2);
    EXPECT_NE(xl.vectors_for("clip_l", 4), nullptr);
    EXPECT_NE(xl.vectors_for("clip_g", 6), nullptr);
    EXPECT_EQ(xl.vectors_for("", 4), nullptr);  // not for an SD 1.x encoder: the webui skips it there
}

TEST(TextualInversionFiles, FilesTheWebuiRefusesAreErrorsNamingThem) {
    kiln::test::TempDir dir;
    const std::vector<std::pair<std::string, std::vector<std::pair<std::string, Tensor>>>> bad = {
        {"several terms", {{"a", filled({1, 4}, 0)}, {"b", filled({1, 4}, 0)}}},
        {"shape", {{"emb_params", filled({1, 2, 4}, 0)}}},
        {"1 to 75", {{"emb_params", filled({76, 4}, 0)}}},
        {"NaN", {{"emb_params", Tensor({2, 4}, {0, 0, 0, NAN, 0, 0, 0, 0})}}},
        {"different numbers of vectors", {{"clip_g", filled({2, 6}, 0)}, {"clip_l", filled({3, 4}, 0)}}},
    };
    for (const auto& [message, tensors] : bad) {
        const std::string path = dir.file("bad.safetensors");
        write_safetensors(path, tensors);
        const Error e = expect_error([&] { load_textual_inversion(path); });
        EXPECT_EQ(e.kind(), ErrorKind::InvalidModel);
        EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
}

TEST(TextualInversionFiles, FolderSkipsBadFilesAndRepeatedNames) {
    kiln::test::TempDir dir;
    // Files are read in name order: good.pt (safetensors bytes: files are recognised by content) first, so
    // good.safetensors repeats its name and is skipped.
    write_safetensors(dir.file("good.pt"), {{"emb_params", filled({1, 4}, 0)}});
    write_safetensors(dir.file("good.safetensors"), {{"emb_params", filled({2, 4}, 0)}});
    kiln::test::write_bytes(dir.file("broken.pt"), "PK\x03\x04 truncated");
    kiln::test::write_bytes(dir.file("notes.txt"), "ignored: not an embedding's extension");
    std::vector<std::string> notices;
    const std::vector<TextualInversion> all =
        load_embeddings_dir(dir.path().string(), [&](const std::string& line) { notices.push_back(line); });
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].name, "good");
    EXPECT_EQ(all[0].vectors, 1);
    ASSERT_EQ(notices.size(), 2u);
    EXPECT_NE(notices[0].find("broken.pt"), std::string::npos) << notices[0];
    EXPECT_NE(notices[1].find("good.safetensors has the name of an embedding read before it"), std::string::npos)
        << notices[1];
    EXPECT_EQ(expect_error([&] { load_embeddings_dir(dir.file("missing")); }).kind(), ErrorKind::IO);
}
