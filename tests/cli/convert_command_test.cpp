// `kiln convert`: writes a GGUF file kiln loads, reports what it converted, and refuses the input as output
// with one error line, leaving the input untouched. A diffusers folder's file draws the folder's image.
#include <gtest/gtest.h>

#include "cli/cli_expectations.h"
#include "cli/run_process.h"
#include "cli/test_files.h"
#include "image/png.h"

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

TEST(ConvertCommand, DiffusersFolderDrawsTheFoldersImage) {
    TempDir dir;
    for (const std::string model : {"sd15-mini", "sd2-mini", "sdxl-mini"}) {
        SCOPED_TRACE(model);
        const std::string folder = std::string(KILN_TEST_DATA) + "/" + model + "/diffusers";
        const std::string out = dir.file(model + ".gguf");
        const ProcessResult r = run_kiln({"convert", "-m", folder, "--weights", "q8_0", "-o", out, "-q"});
        expect_success(r);
        EXPECT_NE(r.out.find("Q8_0"), std::string::npos) << r.describe();
        auto pixels = [&](const std::string& m) {
            const std::string png = dir.file("image.png");
            // The sampler's settings are given: the GGUF is read as a single file, which has the reference scheduler
            // config (no timestep_spacing), where the folder has its own.
            expect_success(run_kiln({"txt2img", "-m", m, "-p", "a red circle", "-W", "64", "-H", "64", "--steps", "2",
                                     "--seed", "3", "--weights", "q8_0", "--prediction", "eps", "--sampler", "euler",
                                     "--timestep-spacing", "leading", "-o", png, "--quiet", "--device", "cpu"}));
            return kiln::read_png(png).pixels;
        };
        EXPECT_EQ(pixels(out), pixels(folder));
    }
}
