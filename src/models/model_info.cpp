#include "models/model_info.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/safetensors.h"
#include "kiln/error.h"
#include "models/model.h"

namespace fs = std::filesystem;

namespace kiln {

namespace {

void count(ComponentInfo& c, const SafetensorsFile& f, const std::string& name) {
    const TensorInfo& t = f.info(name);
    c.parameters += shape_numel(t.shape);
    c.tensors += 1;
    c.dtypes[dtype_name(t.dtype)] += 1;
}

// Single files: components by name prefix, in the order users think of them.
const std::pair<const char*, const char*> kPrefixes[] = {
    {"model.diffusion_model.", "unet"},
    {"first_stage_model.", "vae"},
    {"cond_stage_model.", "text_encoder"},
    {"conditioner.embedders.0.", "text_encoder"},
    {"conditioner.embedders.1.", "text_encoder_2"},
};

// Which architecture's UNet by its cross-attention's width (a key projection's input: [C, context]).
std::string unet_alone_architecture(const SafetensorsFile& f) {
    for (const std::string& n : f.names()) {
        const std::string tail = "attn2.to_k.weight";
        if (n.size() < tail.size() || n.compare(n.size() - tail.size(), tail.size(), tail) != 0) continue;
        const Shape& shape = f.info(n).shape;
        if (shape.size() != 2) break;
        const int64_t context = shape[1];
        const std::string name = context == 768 ? "SD 1.x" : context == 1024 ? "SD 2.x" : context == 2048 ? "SDXL" : "";
        return (name.empty() ? "" : name + " ") + "UNet (cross-attention of " + std::to_string(context) + " values a token)";
    }
    return "UNet";
}

// A file holding a UNet alone (either layout), described as --unet takes it.
ModelInfo unet_alone_info(ModelInfo info, const SafetensorsFile& f, const std::string& layout) {
    info.layout = layout + ": use it as --unet beside a checkpoint (-m)";
    info.architecture = unet_alone_architecture(f);
    ComponentInfo c;
    c.name = "unet";
    for (const std::string& n : f.names()) count(c, f, n);
    info.components.push_back(c);
    return info;
}

}  // namespace

ModelInfo inspect_model(const std::string& path) {
    ModelInfo info;
    info.path = path;
    const fs::path p(path);
    require(fs::exists(p), ErrorKind::IO, "no such file or folder: " + path);
    if (fs::is_directory(p) && !fs::exists(p / "model_index.json")) {
        // A diffusers model's unet/ folder, which --unet takes.
        const std::string weights = diffusers_component_weights(path, "diffusion_pytorch_model");
        if (!weights.empty()) {
            SafetensorsFile f = SafetensorsFile::open(weights);
            if (holds_diffusers_unet(f)) {
                info.bytes = f.file_size();
                return unet_alone_info(info, f, "a diffusers UNet folder");
            }
        }
        fail(ErrorKind::InvalidModel, path + " is a folder but not a diffusers model (no model_index.json) nor its "
                                             "UNet's folder");
    }
    if (fs::is_directory(p)) {
        info.layout = layout_name(FileLayout::DiffusersFolder);
        for (const std::string comp : {"text_encoder", "text_encoder_2", "unet", "vae"}) {
            const fs::path dir = p / comp;
            if (!fs::is_directory(dir)) continue;
            // The weights file the loader takes: a .safetensors one, else a PyTorch .bin.
            std::vector<fs::path> files;
            for (const auto& entry : fs::directory_iterator(dir))
                if (entry.path().extension() == ".safetensors" || entry.path().extension() == ".bin")
                    files.push_back(entry.path());
            std::stable_partition(files.begin(), files.end(), [](const fs::path& f) { return f.extension() == ".safetensors"; });
            for (const fs::path& file : files) {
                SafetensorsFile f = SafetensorsFile::open(file.string());
                ComponentInfo c;
                c.name = comp;
                for (const std::string& n : f.names()) count(c, f, n);
                info.bytes += f.file_size();
                info.components.push_back(c);
                break;
            }
        }
        info.architecture = fs::is_directory(p / "text_encoder_2") ? "SDXL" : "SD 1.x / 2.x";
        // The text encoder's activation tells OpenCLIP (SD 2.x) from OpenAI CLIP (SD 1.x).
        if (!fs::is_directory(p / "text_encoder_2") && fs::exists(p / "text_encoder" / "config.json")) {
            std::ifstream cfg(p / "text_encoder" / "config.json");
            std::string text((std::istreambuf_iterator<char>(cfg)), std::istreambuf_iterator<char>());
            info.architecture = text.find("\"gelu\"") != std::string::npos ? "SD 2.x" : "SD 1.x";
        }
    } else {
        SafetensorsFile f = SafetensorsFile::open(path);
        info.bytes = f.file_size();
        if (holds_unet_alone(f)) return unet_alone_info(info, f, "a UNet alone (ComfyUI-GGUF's layout)");
        if (holds_diffusers_unet(f)) return unet_alone_info(info, f, "a UNet alone in diffusers' layout");
        info.layout = layout_name(FileLayout::SingleFile);
        info.architecture = architecture_name(detect_single_file_architecture(f));
        std::map<std::string, ComponentInfo> by_name;
        ComponentInfo other;
        other.name = "other";
        for (const std::string& n : f.names()) {
            bool found = false;
            for (const auto& [prefix, comp] : kPrefixes) {
                if (n.rfind(prefix, 0) == 0) {
                    auto& c = by_name[comp];
                    c.name = comp;
                    count(c, f, n);
                    found = true;
                    break;
                }
            }
            if (!found) count(other, f, n);
        }
        for (const char* comp : {"text_encoder", "text_encoder_2", "unet", "vae"})
            if (by_name.count(comp)) info.components.push_back(by_name[comp]);
        if (other.tensors) info.components.push_back(other);
    }
    return info;
}

std::string format_model_info(const ModelInfo& info) {
    std::ostringstream o;
    o << "model:        " << info.path << "\n"
      << "architecture: " << info.architecture << "\n"
      << "layout:       " << info.layout << "\n"
      << "size:         " << info.bytes / 1e6 << " MB\n"
      << "components:\n";
    int64_t total = 0;
    for (const ComponentInfo& c : info.components) {
        o << "  " << c.name << std::string(c.name.size() < 16 ? 16 - c.name.size() : 1, ' ') << c.parameters / 1e6
          << " M parameters in " << c.tensors << " tensors (";
        bool first = true;
        for (const auto& [dtype, n] : c.dtypes) {
            o << (first ? "" : ", ") << dtype << " x" << n;
            first = false;
        }
        o << ")\n";
        if (c.name != "other") total += c.parameters;
    }
    o << "  total           " << total / 1e6 << " M parameters\n";
    return o.str();
}

}  // namespace kiln
