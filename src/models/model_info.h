// What `kiln info MODEL` prints: architecture, layout, and each component's parameter count and
// dtypes, read from the file headers alone (no weights are loaded).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln {

struct ComponentInfo {
    std::string name;                        // "unet", "vae", "text_encoder", "text_encoder_2", "other"
    int64_t parameters = 0;
    int64_t tensors = 0;
    std::map<std::string, int64_t> dtypes;   // dtype name -> tensor count
};

struct ModelInfo {
    std::string path, architecture, layout;
    uint64_t bytes = 0;
    std::vector<ComponentInfo> components;
};

ModelInfo inspect_model(const std::string& path);
std::string format_model_info(const ModelInfo& info);

}  // namespace kiln
