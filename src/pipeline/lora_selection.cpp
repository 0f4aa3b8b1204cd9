#include "pipeline/lora_selection.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "kiln/error.h"
#include "text/extra_networks.h"
#include "text/python_float.h"

namespace fs = std::filesystem;

namespace kiln {

namespace {

// NAME.safetensors in the folder itself, else the first in its subfolders (in path order, so the same each run).
std::string find_lora_file(const std::string& folder, const std::string& name) {
    const fs::path direct = fs::path(folder) / (name + ".safetensors");
    if (fs::is_regular_file(direct)) return direct.string();
    std::error_code ec;
    std::vector<fs::path> found;
    for (auto it = fs::recursive_directory_iterator(folder, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        if (it->is_regular_file() && it->path().filename() == name + ".safetensors") found.push_back(it->path());
    require(!found.empty(), ErrorKind::IO,
            "no LoRA named '" + name + "': " + direct.string() + " does not exist (nor in a subfolder of " + folder + ")");
    std::sort(found.begin(), found.end());
    return found.front().string();
}

}  // namespace

std::vector<LoraApplication> loras_from_prompt(const std::string& prompt, const std::string& folder) {
    std::vector<LoraApplication> out;
    for (const ExtraNetworkTag& tag : remove_extra_network_tags(prompt).tags) {
        if (!is_lora_tag(tag)) continue;
        const LoraTag t = parse_lora_tag(tag);
        require(!folder.empty(), ErrorKind::InvalidArgument,
                tag.text + " names a LoRA, but no LoRA folder was given (--lora-dir DIR, where DIR holds " + t.name +
                    ".safetensors)");
        require(fs::is_directory(folder), ErrorKind::IO, "LoRA folder " + folder + " does not exist");
        out.push_back({find_lora_file(folder, t.name), t.name, t.te_multiplier, t.unet_multiplier});
    }
    return out;
}

LoraApplication lora_from_argument(const std::string& argument) {
    std::string path = argument;
    double weight = 1.0;
    const size_t colon = argument.rfind(':');
    if (colon != std::string::npos) {
        const std::optional<double> w = python::parse_float(std::string_view(argument).substr(colon + 1));
        if (w) {
            require(std::isfinite(*w), ErrorKind::InvalidArgument, "--lora " + argument + ": the weight is not finite");
            path = argument.substr(0, colon);
            weight = *w;
        }
    }
    require(fs::is_regular_file(path), ErrorKind::IO, "--lora: no such file: " + path);
    return {path, fs::path(path).stem().string(), weight, weight};
}

}  // namespace kiln
