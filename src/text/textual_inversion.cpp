#include "text/textual_inversion.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "io/safetensors.h"
#include "kiln/error.h"

namespace fs = std::filesystem;

namespace kiln {

namespace {

constexpr int kMaxVectors = 75;  // one prompt chunk

Tensor as_vectors(const SafetensorsFile& file, const std::string& name) {
    Tensor t = file.load(name);
    const Shape shape = t.shape();
    require(shape.size() == 1 || shape.size() == 2, ErrorKind::InvalidModel,
            file.path() + ": embedding tensor " + quote_name(name) + " has shape " + shape_str(shape) +
                ", not [vectors, width]");
    if (shape.size() == 1) return Tensor(Shape{1, shape[0]}, std::vector<float>(t.data(), t.data() + t.numel()));
    return t;
}

}  // namespace

const Tensor* TextualInversion::vectors_for(const std::string& sdxl_key, int64_t width) const {
    auto it = parts.count("") ? parts.find("") : parts.find(sdxl_key);
    if (it == parts.end() || it->second.dim(1) != width) return nullptr;
    return &it->second;
}

TextualInversion load_textual_inversion(const std::string& path) {
    const SafetensorsFile file = SafetensorsFile::open(path);
    TextualInversion ti;
    ti.path = path;
    ti.name = fs::path(path).stem().string();
    const std::vector<std::string> names = file.names();
    std::vector<std::string> params;
    for (const std::string& n : names)
        if (n.rfind("string_to_param.", 0) == 0) params.push_back(n);
    if (!params.empty()) {
        require(params.size() == 1, ErrorKind::InvalidModel, path + ": the embedding file has several terms in it");
        ti.parts[""] = as_vectors(file, params[0]);
    } else if (file.has("clip_l") && file.has("clip_g")) {
        ti.parts["clip_l"] = as_vectors(file, "clip_l");
        ti.parts["clip_g"] = as_vectors(file, "clip_g");
        require(ti.parts["clip_l"].dim(0) == ti.parts["clip_g"].dim(0), ErrorKind::InvalidModel,
                path + ": clip_l and clip_g hold different numbers of vectors");
    } else {
        require(!names.empty(), ErrorKind::InvalidModel, path + ": no embedding tensor in the file");
        require(names.size() == 1, ErrorKind::InvalidModel, path + ": the embedding file has several terms in it");
        ti.parts[""] = as_vectors(file, names[0]);
    }
    ti.vectors = static_cast<int>(ti.parts.begin()->second.dim(0));
    require(ti.vectors >= 1 && ti.vectors <= kMaxVectors, ErrorKind::InvalidModel,
            path + ": an embedding of " + std::to_string(ti.vectors) + " vectors (1 to " + std::to_string(kMaxVectors) +
                " fit a prompt chunk)");
    for (const auto& [key, t] : ti.parts)
        if (!std::all_of(t.data(), t.data() + t.numel(), [](float v) { return std::isfinite(v); }))
            fail(ErrorKind::InvalidModel, path + ": the embedding holds NaN or infinity");  // message made only then
    return ti;
}

std::vector<TextualInversion> load_embeddings_dir(const std::string& dir,
                                                  const std::function<void(const std::string&)>& notice) {
    require(fs::is_directory(dir), ErrorKind::IO, "no such embeddings folder: " + dir);
    std::vector<fs::path> files;
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
        const std::string ext = e.path().extension().string();
        if (e.is_regular_file() && (ext == ".pt" || ext == ".bin" || ext == ".ckpt" || ext == ".safetensors"))
            files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    std::vector<TextualInversion> out;
    for (const fs::path& f : files) {
        const bool taken = std::any_of(out.begin(), out.end(), [&](const TextualInversion& t) { return t.name == f.stem().string(); });
        if (taken) {
            if (notice) notice("embedding skipped: " + f.string() + " has the name of an embedding read before it");
            continue;
        }
        try {
            out.push_back(load_textual_inversion(f.string()));
        } catch (const Error& e) {
            if (notice) notice(std::string("embedding skipped: ") + e.what());
        }
    }
    return out;
}

}  // namespace kiln
