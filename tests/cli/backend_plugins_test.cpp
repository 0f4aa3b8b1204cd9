// The GPU backends are plugins next to the kiln program (pipeline/backend_plugins.h). A run that names no GPU
// loads none of them (and so none of the CUDA libraries); a plugin that is missing or cannot be loaded makes
// its devices unavailable with the reason, and the CPU runs as before.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_expectations.h"
#include "cli/run_process.h"
#include "cli/test_files.h"

using namespace kiln::test;
namespace fs = std::filesystem;

namespace {

const std::string kSd15 = std::string(KILN_TEST_DATA) + "/sd15-mini/sd15-mini.safetensors";

// The plugins this build made: "cuda", "vulkan".
std::vector<std::string> built_plugins() {
    std::vector<std::string> out;
    std::stringstream list(KILN_BUILT_PLUGINS);
    for (std::string name; std::getline(list, name, ',');)
        if (!name.empty()) out.push_back(name);
    return out;
}

bool built(const std::string& kind) {
    for (const std::string& k : built_plugins())
        if (k == kind) return true;
    return false;
}

// `kiln args...` with variables added to its environment (through env(1)).
ProcessResult run_kiln_with(const std::vector<std::string>& env, const std::vector<std::string>& args) {
    std::vector<std::string> all = env;
    all.push_back(KILN_CLI);
    all.insert(all.end(), args.begin(), args.end());
    return run_process("/usr/bin/env", all);
}

std::vector<std::string> txt2img_args(const std::string& out, const std::string& device) {
    return {"txt2img", "-m", kSd15, "-p", "a blue square", "-W", "64", "-H", "64", "--steps", "2",
            "-o", out, "--quiet", "--device", device};
}

// The `not listed: <kind>: ...` line of `kiln info --devices`, or "" when there is none.
std::string reason_line(const std::string& out, const std::string& kind) {
    const size_t at = out.find("not listed: " + kind + ": ");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
}

}  // namespace

TEST(BackendPlugins, RunsThatNameNoGpuLoadNone) {
    TempDir tmp;
    // The dynamic loader's own trace (LD_DEBUG=files, on stderr) names every library a run opens.
    const std::vector<std::vector<std::string>> runs = {
        {"--help"}, {"info", kSd15}, txt2img_args(tmp.file("cpu.png"), "cpu")};
    for (const auto& args : runs) {
        const ProcessResult r = run_kiln_with({"LD_DEBUG=files"}, args);
        expect_success(r);
        for (const std::string lib : {"libkiln-cuda", "libkiln-vulkan", "libcudart", "libcublasLt", "libcudnn"})
            EXPECT_EQ(r.err.find(lib), std::string::npos) << args[0] << " loaded " << lib;
    }
    // The trace does show a plugin when one is loaded: listing the devices loads the Vulkan plugin.
    if (built("vulkan")) {
        const ProcessResult r = run_kiln_with({"LD_DEBUG=files"}, {"info", "--devices"});
        expect_success(r);
        EXPECT_NE(r.err.find("libkiln-vulkan.so"), std::string::npos) << "no trace of the Vulkan plugin";
    }
}

TEST(BackendPlugins, WithoutThemTheCpuRunsAndEachGpuIsUnavailableByName) {
    TempDir empty, tmp;
    const std::string dir = "KILN_PLUGIN_DIR=" + empty.path().string();
    const ProcessResult info = run_kiln_with({dir}, {"info", "--devices"});
    expect_success(info);
    EXPECT_EQ(info.out.rfind("cpu", 0), 0u) << info.out;
    for (const std::string& kind : built_plugins()) {
        const std::string line = reason_line(info.out, kind);
        // CUDA where no driver is installed says so first, without looking for its plugin.
        EXPECT_TRUE(line.find(empty.file("libkiln-" + kind + ".so")) != std::string::npos ||
                    (kind == "cuda" && line.find("libcuda.so.1") != std::string::npos))
            << kind << "\n" << info.out;
    }
    for (const std::string kind : {"cuda", "vulkan"}) {
        const ProcessResult r = run_kiln_with({dir}, txt2img_args(tmp.file(kind + ".png"), kind));
        expect_one_error_line(r, {"device " + kind, kind + ": "}, {"not available"});
        EXPECT_FALSE(fs::exists(tmp.file(kind + ".png")));
    }
    // "auto" finds no GPU and runs on the CPU.
    const ProcessResult r = run_kiln_with({dir}, txt2img_args(tmp.file("auto.png"), "auto"));
    expect_success(r);
    EXPECT_TRUE(fs::exists(tmp.file("auto.png")));
}

TEST(BackendPlugins, APluginThatCannotBeLoadedIsAReasonNotACrash) {
    if (!built("vulkan")) GTEST_SKIP() << "this build has no Vulkan plugin";
    TempDir dir, tmp;
    write_bytes(dir.path() / "libkiln-vulkan.so", std::string(4096, 'x'));  // not a shared object at all
    const std::string env = "KILN_PLUGIN_DIR=" + dir.path().string();
    const ProcessResult info = run_kiln_with({env}, {"info", "--devices"});
    expect_success(info);
    const std::string line = reason_line(info.out, "vulkan");
    EXPECT_NE(line.find("cannot load " + dir.file("libkiln-vulkan.so") + ": "), std::string::npos) << info.out;
    // The loader's own words follow (here "invalid ELF header"; for a plugin whose libraries are missing,
    // "libcudart.so.13: cannot open shared object file").
    EXPECT_NE(lowercase(line).find("elf"), std::string::npos) << line;
    const ProcessResult r = run_kiln_with({env}, txt2img_args(tmp.file("out.png"), "vulkan"));
    expect_one_error_line(r, {"device vulkan", "cannot load"}, {"not available"});
}

TEST(BackendPlugins, TheBuiltPluginsLoad) {
    // Every symbol a plugin takes from the kiln program must be there, or it fails to load ("undefined
    // symbol"). CUDA: with a stand-in driver (tests/cli/fake_cuda_driver) first in the library path, so that
    // the plugin is loaded even where no NVIDIA driver is installed; the CUDA runtime then finds the driver
    // unusable. (Where the stand-in's folder is missing, as in a staged copy, the real driver is used.)
    std::vector<std::string> env;
    if (built("cuda")) {
        const char* path = std::getenv("LD_LIBRARY_PATH");
        env.push_back(std::string("LD_LIBRARY_PATH=") + KILN_FAKE_CUDA_DRIVER_DIR + (path ? ":" + std::string(path) : ""));
    }
    const ProcessResult r = run_kiln_with(env, {"info", "--devices"});
    expect_success(r);
    for (const std::string& kind : built_plugins()) {
        EXPECT_EQ(r.out.find("not listed: " + kind + ": cannot load"), std::string::npos) << r.out;
        EXPECT_EQ(r.out.find("not listed: " + kind + ": no plugin"), std::string::npos) << r.out;
    }
    // CI installs lavapipe (.ci/run): there the Vulkan plugin must find its device.
    const char* expect = std::getenv("KILN_EXPECT_VULKAN");
    if (built("vulkan") && expect && std::string(expect) == "1")
        EXPECT_NE(r.out.find("\nvulkan:0 "), std::string::npos) << r.out;
}
