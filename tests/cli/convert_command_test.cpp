// `kiln convert`: writes a GGUF file kiln loads, reports what it converted, and refuses the input as output
// with one error line, leaving the input untouched.
#include <gtest/gtest.h>

#include "cli/cli_expectations.h"
#include "cli/run_process.h"
#include "cli/test_files.h"

using namespace kiln::test;

TEST(ConvertCommand, WritesGgufAndNeverTheInput) {
    TempDir dir;
    const std::string in = dir.file("in.safetensors"), out = dir.file("out.gguf");
    fs::copy_file(std::string(KILN_TEST_DATA) + "/sd15-mini/sd15-mini.safetensors", in);
    const FileSnapshot before = FileSnapshot::of(in);
    const ProcessResult r = run_kiln({"convert", "-m", in, "--weights", "q4_K", "-o", out});
    expect_success(r);
    EXPECT_NE(r.out.find("Q5_0"), std::string::npos) << r.describe();  // q4_K's fallback on 32-wide rows
    expect_success(run_kiln({"info", out}));
    expect_one_error_line(run_kiln({"convert", "-m", in, "--weights", "q8_0", "-o", in}), {in}, {"is the input"});
    EXPECT_TRUE(FileSnapshot::of(in) == before);
}
