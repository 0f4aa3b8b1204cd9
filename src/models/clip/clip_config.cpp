#include "models/clip/clip_config.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kiln/error.h"

namespace kiln {

void ClipTextConfig::validate(const std::string& source) const {
    auto positive = [&](int v, const char* key) {
        require(v > 0, ErrorKind::InvalidModel,
                source + ": CLIP text config " + key + " must be positive, is " + std::to_string(v));
    };
    positive(hidden, "hidden_size");
    positive(layers, "num_hidden_layers");
    positive(heads, "num_attention_heads");
    positive(intermediate, "intermediate_size");
    positive(max_positions, "max_position_embeddings");
    positive(vocab, "vocab_size");
    require(projection_dim >= 0, ErrorKind::InvalidModel,
            source + ": CLIP text config projection_dim must not be negative");
    require(hidden % heads == 0, ErrorKind::InvalidModel,
            source + ": CLIP text config hidden_size " + std::to_string(hidden) + " is not divisible by " +
                std::to_string(heads) + " attention heads");
    require(act == "quick_gelu" || act == "gelu", ErrorKind::Unsupported,
            source + ": CLIP text config hidden_act '" + act + "' is not supported (quick_gelu or gelu)");
    require(eps > 0.0f, ErrorKind::InvalidModel, source + ": CLIP text config layer_norm_eps must be positive");
}

namespace {

int int_key(const nlohmann::json& j, const char* key, int fallback, const std::string& source) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    const auto& v = j[key];
    require(v.is_number_integer(), ErrorKind::InvalidModel,
            source + ": '" + key + "' must be an integer, is " + v.dump());
    const int64_t x = v.get<int64_t>();
    require(x >= -1'000'000'000 && x <= 1'000'000'000, ErrorKind::InvalidModel,
            source + ": '" + key + "' is out of range: " + v.dump());
    return static_cast<int>(x);
}

}  // namespace

ClipTextConfig parse_clip_text_config(const std::string& json_text, const std::string& source) {
    nlohmann::json root;
    try {
        root = nlohmann::json::parse(json_text);
    } catch (const nlohmann::json::exception& e) {
        fail(ErrorKind::InvalidModel, source + ": not valid JSON: " + e.what());
    }
    require(root.is_object(), ErrorKind::InvalidModel, source + ": a CLIP text config must be a JSON object");
    // A full CLIPConfig nests the text tower's settings; the architecture stays at the top level.
    const nlohmann::json& j = root.contains("text_config") && root["text_config"].is_object() ? root["text_config"] : root;

    ClipTextConfig c;
    c.hidden = int_key(j, "hidden_size", c.hidden, source);
    c.layers = int_key(j, "num_hidden_layers", c.layers, source);
    c.heads = int_key(j, "num_attention_heads", c.heads, source);
    c.intermediate = int_key(j, "intermediate_size", c.intermediate, source);
    c.max_positions = int_key(j, "max_position_embeddings", c.max_positions, source);
    c.vocab = int_key(j, "vocab_size", c.vocab, source);
    if (j.contains("hidden_act") && !j["hidden_act"].is_null()) {
        require(j["hidden_act"].is_string(), ErrorKind::InvalidModel, source + ": 'hidden_act' must be a string");
        c.act = j["hidden_act"].get<std::string>();
    }
    if (j.contains("layer_norm_eps") && !j["layer_norm_eps"].is_null()) {
        // Range-checked as a double: converting one beyond float's range is undefined behaviour.
        require(j["layer_norm_eps"].is_number() &&
                    std::fabs(j["layer_norm_eps"].get<double>()) <= std::numeric_limits<float>::max(),
                ErrorKind::InvalidModel, source + ": 'layer_norm_eps' must be a number within float range");
        c.eps = j["layer_norm_eps"].get<float>();
    }

    bool with_projection = false;
    if (root.contains("architectures") && root["architectures"].is_array())
        for (const auto& a : root["architectures"])
            if (a.is_string() && a.get<std::string>() == "CLIPTextModelWithProjection") with_projection = true;
    // transformers' default projection_dim is 512.
    c.projection_dim = with_projection ? int_key(j, "projection_dim", 512, source) : 0;
    require(!with_projection || c.projection_dim > 0, ErrorKind::InvalidModel,
            source + ": CLIPTextModelWithProjection needs a positive projection_dim");

    c.validate(source);
    return c;
}

ClipTextConfig load_clip_text_config(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    require(in.good(), ErrorKind::IO, "cannot open CLIP text config " + path);
    std::ostringstream ss;
    ss << in.rdbuf();
    require(!in.bad(), ErrorKind::IO, "cannot read CLIP text config " + path);
    return parse_clip_text_config(ss.str(), path);
}

int clip_heads_for_hidden(int hidden) {
    // Test-size models (the fixtures' 32- and 48-wide encoders) use 4 heads; real ones 64-wide heads.
    if (hidden > 0 && hidden < 256) return 4;
    switch (hidden) {
        case 768: return 12;   // OpenAI CLIP ViT-L/14 (SD 1.x, SDXL's first encoder)
        case 1024: return 16;  // OpenCLIP ViT-H/14 (SD 2.x)
        case 1280: return 20;  // OpenCLIP ViT-bigG/14 (SDXL's second encoder)
        default: break;
    }
    require(hidden > 0 && hidden % 64 == 0, ErrorKind::Unsupported,
            "cannot tell the attention heads of a CLIP text model of width " + std::to_string(hidden) +
                " (known widths: 768, 1024, 1280, or a multiple of 64)");
    return hidden / 64;
}

}  // namespace kiln
