// Which file a prompt's <lora:NAME:W> means in a LoRA folder, by the webui's rules (extensions-builtin/Lora/
// networks.py list_available_networks and load_networks, modules/util.py walk_files): names, ss_output_name
// aliases, the "forbidden" aliases, and the order of the folders.
#include <gtest/gtest.h>

#include <filesystem>

#include "io/io_test_util.h"
#include "io/safetensors.h"
#include "kiln/error.h"
#include "pipeline/lora_selection.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

// Only the files' names and metadata matter here; the tensor is a placeholder.
void lora_file(const fs::path& path, const std::string& alias = "") {
    fs::create_directories(path.parent_path());
    std::map<std::string, std::string> meta;
    if (!alias.empty()) meta["ss_output_name"] = alias;
    write_safetensors(path.string(), {{"x", Tensor(Shape{1})}}, DType::F32, meta);
}

std::string found(const test::TempDir& dir, const std::string& name) {
    const std::vector<LoraApplication> l = loras_from_prompt("a <lora:" + name + ":0.5>", dir.path().string());
    EXPECT_EQ(l.size(), 1u);
    EXPECT_EQ(l.at(0).name, name);  // the name as written: what the PNG's "Lora hashes" records
    return fs::relative(l.at(0).path, dir.path()).string();
}

bool missing(const test::TempDir& dir, const std::string& name) {
    try {
        loras_from_prompt("<lora:" + name + ":1>", dir.path().string());
        return false;
    } catch (const Error& e) {
        return e.kind() == ErrorKind::IO;
    }
}

}  // namespace

TEST(LoraSelection, NamesAndAliasesAsTheWebui) {
    test::TempDir dir;
    lora_file(dir.path() / "a.safetensors", "Alpha");
    lora_file(dir.path() / "sub" / "b.safetensors", "Beta");
    lora_file(dir.path() / "p.pt");
    EXPECT_EQ(found(dir, "a"), "a.safetensors");
    EXPECT_EQ(found(dir, "Alpha"), "a.safetensors");
    EXPECT_EQ(found(dir, "Beta"), "sub/b.safetensors");
    EXPECT_EQ(found(dir, "p"), "p.pt");
    EXPECT_TRUE(missing(dir, "alpha"));  // aliases are looked up as written
    EXPECT_TRUE(missing(dir, "nothing"));
}

TEST(LoraSelection, ConflictsResolveAsTheWebui) {
    test::TempDir dir;
    lora_file(dir.path() / "a.safetensors");
    lora_file(dir.path() / "z.safetensors", "a");  // another file's name as alias: the file of that name wins
    lora_file(dir.path() / "x.safetensors", "shared");
    lora_file(dir.path() / "y.safetensors", "Shared");
    lora_file(dir.path() / "w.safetensors", "shared");  // met twice: forbidden, found by file name only (none)
    lora_file(dir.path() / "v.safetensors", "none");    // "none" is forbidden from the start
    lora_file(dir.path() / "dup.safetensors");
    lora_file(dir.path() / "sub2" / "dup.safetensors");
    lora_file(dir.path() / "sub10" / "dup.safetensors");  // walked after sub2 (natural order): the last one wins
    EXPECT_EQ(found(dir, "a"), "a.safetensors");
    EXPECT_EQ(found(dir, "z"), "z.safetensors");
    EXPECT_TRUE(missing(dir, "shared"));
    EXPECT_TRUE(missing(dir, "Shared"));  // "shared" was forbidden in lower case, which "Shared" lowers to
    EXPECT_TRUE(missing(dir, "none"));
    EXPECT_EQ(found(dir, "dup"), "sub10/dup.safetensors");
}
