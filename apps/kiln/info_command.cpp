// `kiln info`: a model's architecture and components, or the generation parameters in a PNG.
#include <cstdio>
#include <fstream>

#include "commands.h"
#include "image/infotext.h"
#include "models/model_info.h"

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
    if (is_png(path)) std::fputs(describe_png_parameters(path).c_str(), stdout);
    else std::fputs(format_model_info(inspect_model(path)).c_str(), stdout);
    return 0;
}

}  // namespace kiln::cli
