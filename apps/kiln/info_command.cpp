// `kiln info`: a model's architecture and components, or the generation parameters in a PNG.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "commands.h"
#include "runtime/openblas_core.h"
#include "image/infotext.h"
#include "kiln/error.h"
#include "models/model_info.h"
#include "core/backend.h"
#include "pipeline/backend_plugins.h"

namespace kiln::cli {

namespace {

bool is_png(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    char sig[8] = {};
    f.read(sig, 8);
    return f.gcount() == 8 && std::string(sig, 8) == "\x89PNG\r\n\x1a\n";
}

}  // namespace

int run_info(const std::string& path) {
    // Only regular files and folders: opening a FIFO or device to sniff its signature would block.
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    require(!ec && std::filesystem::exists(status), ErrorKind::IO, "no such file or folder: " + path);
    require(std::filesystem::is_regular_file(status) || std::filesystem::is_directory(status), ErrorKind::IO,
            path + " is not a regular file or folder");
    std::string text = is_png(path) ? describe_png_parameters(path) : format_model_info(inspect_model(path));
    if (!text.empty() && text.back() != '\n') text += '\n';
    std::fputs(text.c_str(), stdout);
    return 0;
}

int run_info_devices() {
    register_backend_plugins();
    std::vector<std::string> why;
    for (const DeviceDescription& d : list_devices(&why)) {
        std::printf("%-8s %s", device_name(d.device).c_str(), d.name.c_str());
        if (!d.device.is_cpu())
            std::printf(", %.1f GiB (%.1f GiB free), %s", double(d.memory.total) / (1 << 30),
                        double(d.memory.free) / (1 << 30), d.detail.c_str());
        else if (const std::string blas = openblas_core_name(); !blas.empty())
            std::printf(", OpenBLAS's %s kernels", blas.c_str());  // README, "CPU speed"
        std::printf("\n");
    }
    // Each backend that found nothing (or skipped a device) says why, e.g. "cuda: this build has no CUDA backend".
    for (const std::string& w : why) std::printf("not listed: %s\n", w.c_str());
    return 0;
}

}  // namespace kiln::cli
