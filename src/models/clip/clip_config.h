// The shape of a CLIP text transformer, as transformers' CLIPTextConfig describes it.
#pragma once
#include <string>

namespace kiln {

// The defaults are transformers' CLIPTextConfig defaults (what a config.json that omits a key means).
struct ClipTextConfig {
    int hidden = 512;                // hidden_size
    int layers = 12;                 // num_hidden_layers
    int heads = 8;                   // num_attention_heads
    int intermediate = 2048;         // intermediate_size (the MLP's inner width)
    std::string act = "quick_gelu";  // hidden_act: "quick_gelu" (OpenAI CLIP) or "gelu" (OpenCLIP)
    float eps = 1e-5f;               // layer_norm_eps
    int max_positions = 77;          // max_position_embeddings
    int vocab = 49408;               // vocab_size
    int projection_dim = 0;          // text_projection's output width; 0 = none (CLIPTextModel)

    // Throws InvalidModel naming `source` when the numbers cannot describe a working model.
    void validate(const std::string& source) const;
};

// Parses a transformers config.json (a CLIPTextConfig, or a CLIPConfig with a "text_config").
// Keys it leaves out take transformers' CLIPTextConfig defaults. projection_dim is kept only when
// the architecture is CLIPTextModelWithProjection: plain CLIPTextModel configs carry the key too.
ClipTextConfig parse_clip_text_config(const std::string& json_text, const std::string& source);
ClipTextConfig load_clip_text_config(const std::string& path);  // reads the file; IO error if it cannot

// Attention heads of a CLIP text model of this width. Files do not record the head count, so a
// single-file checkpoint needs this rule: every real SD text encoder uses 64-wide heads (ViT-L/14
// 768/12, OpenCLIP ViT-H 1024/16, ViT-bigG 1280/20); the tiny test models (width < 256) use 4.
int clip_heads_for_hidden(int hidden);

}  // namespace kiln
