#include "models/diffusers_as_original.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>

#include "kiln/error.h"
#include "models/clip/clip_single_file.h"
#include "models/model.h"
#include "models/unet/unet_config.h"
#include "models/vae/vae_single_file.h"

namespace fs = std::filesystem;

namespace kiln {

namespace {

using Inverse = std::function<std::optional<WeightMapping>(const std::string& name, const TensorInfo& info)>;

// Every tensor of one component's weights file placed under its original name.
void add_component(std::map<std::string, OriginalTensor>& out, const fs::path& dir, const std::string& stem,
                   const Inverse& inverse) {
    const std::string path = diffusers_component_weights(dir.string(), stem);
    require(!path.empty(), ErrorKind::InvalidModel, "no " + stem + ".safetensors (or .bin) in " + dir.string());
    auto file = std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path));
    for (const std::string& name : file->names()) {
        if (name == "text_model.embeddings.position_ids") continue;  // a buffer, not a weight
        const std::optional<WeightMapping> m = inverse(name, file->info(name));
        require(m.has_value(), ErrorKind::InvalidModel,
                path + ": tensor " + quote_name(name) + " has no name in the original (single-file) layout");
        OriginalTensor& t = out[m->file_name];
        t.file = file;
        t.parts.emplace_back(name, *m);
    }
}

}  // namespace

std::map<std::string, OriginalTensor> diffusers_as_original(const std::string& dir) {
    const StableDiffusionModel model = load_model(dir);  // the loader's checks; its configs and architecture
    const fs::path root(dir);
    std::map<std::string, OriginalTensor> out;
    auto hf = [](const char* prefix) -> Inverse {
        return [prefix](const std::string& n, const TensorInfo&) { return clip_hf_original(n, prefix); };
    };
    auto openclip = [](const char* prefix) -> Inverse {
        return [prefix](const std::string& n, const TensorInfo&) { return openclip_original(n, prefix); };
    };
    switch (model.arch) {
        case Architecture::SD1: add_component(out, root / "text_encoder", "model", hf(kSd1ClipPrefix)); break;
        case Architecture::SD2: add_component(out, root / "text_encoder", "model", openclip(kSd2OpenClipPrefix)); break;
        case Architecture::SDXL:
            add_component(out, root / "text_encoder", "model", hf(kSdxlClipPrefix));
            add_component(out, root / "text_encoder_2", "model", openclip(kSdxlOpenClipPrefix));
            break;
    }
    const UNetConfig& unet = model.unet->config();
    add_component(out, root / "unet", "diffusion_pytorch_model",
                  [&unet](const std::string& n, const TensorInfo&) -> std::optional<WeightMapping> {
                      const std::string original = unet_ldm_name(n, unet, "model.diffusion_model.");
                      if (original.empty()) return std::nullopt;
                      return WeightMapping{original};
                  });
    const int levels = int(model.vae->config().block_out_channels.size());
    add_component(out, root / "vae", "diffusion_pytorch_model", [levels](const std::string& n, const TensorInfo& info) {
        return ldm_vae_original(n, info.shape.size(), levels);
    });

    // The single-file loader takes each part back by its WeightMapping: a fused tensor must have every row slice
    // once, in order; any other tensor exactly one part.
    for (auto& [name, t] : out) {
        std::sort(t.parts.begin(), t.parts.end(),
                  [](const auto& a, const auto& b) { return a.second.part < b.second.part; });
        const int parts = t.parts.front().second.parts;
        bool whole = int(t.parts.size()) == parts;
        for (size_t i = 0; i < t.parts.size(); ++i) whole = whole && t.parts[i].second.part == int(i);
        if (!whole) {
            std::string have;
            for (const auto& [n, m] : t.parts) have += (have.empty() ? "" : ", ") + n;
            fail(ErrorKind::InvalidModel, t.file->path() + ": the original layout's " + quote_name(name) +
                                              " is made of " + std::to_string(parts) +
                                              " of its tensors (rows in order), but it has: " + have);
        }
    }
    return out;
}

}  // namespace kiln
