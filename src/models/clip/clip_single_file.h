// CLIP text encoders inside single-file (original layout) checkpoints: the rename tables onto the
// transformers names ClipTextModel::load reads, and the config read off the tensors' shapes.
#pragma once
#include <map>
#include <optional>
#include <string>

#include "io/safetensors.h"
#include "models/clip/clip_config.h"
#include "models/weight_source.h"

namespace kiln {

struct ClipSingleFile {
    std::map<std::string, WeightMapping> table;  // internal (transformers) name -> tensor in the file
    ClipTextConfig config;
};

// Prefixes of the real checkpoints.
inline constexpr const char* kSd1ClipPrefix = "cond_stage_model.transformer.";          // HF layout
inline constexpr const char* kSdxlClipPrefix = "conditioner.embedders.0.transformer.";  // HF layout
inline constexpr const char* kSd2OpenClipPrefix = "cond_stage_model.model.";            // OpenCLIP layout
inline constexpr const char* kSdxlOpenClipPrefix = "conditioner.embedders.1.model.";    // OpenCLIP layout

// True when the file holds a text encoder in that layout under that prefix.
bool has_clip_hf_layout(const SafetensorsFile& file, const std::string& prefix);
bool has_openclip_layout(const SafetensorsFile& file, const std::string& prefix);

// A transformers CLIPTextModel stored under `prefix` (names prefix + "text_model.*"; very old files
// lack the "text_model." level). These are OpenAI CLIP ViT-L models: quick_gelu. The position_ids
// buffer is ignored; a text_projection.weight, if present, is mapped and sets projection_dim.
// Throws InvalidModel naming the file and tensor for anything under the prefix it cannot place.
ClipSingleFile clip_hf_layout(const SafetensorsFile& file, const std::string& prefix);

// An OpenCLIP text tower under `prefix`: token_embedding, positional_embedding,
// transformer.resblocks.N.{ln_1, attn.in_proj_* (fused q,k,v), attn.out_proj, ln_2, mlp.c_fc, mlp.c_proj},
// ln_final, text_projection (stored as x @ P), logit_scale (unused). gelu activations.
// As diffusers converts them: under kSd2OpenClipPrefix, SD 2.x conditions on the penultimate
// resblock through ln_final, so of ViT-H's 24 resblocks the last (resblocks.23) is dropped and the
// model has 23 layers, and the text_projection is unused; under any other prefix (SDXL) every
// resblock is kept and text_projection becomes the projection.
ClipSingleFile openclip_layout(const SafetensorsFile& file, const std::string& prefix);

// The inverses of the two tables above (kiln convert of a diffusers folder): the WeightMapping the table built from
// an original-layout file under `prefix` holds for the transformers tensor `internal` (the original tensor's name, and
// how the loader takes `internal` from it: q, k and v as row slices of in_proj, text_projection transposed), or nothing
// when that layout has no place for it.
std::optional<WeightMapping> clip_hf_original(const std::string& internal, const std::string& prefix);
std::optional<WeightMapping> openclip_original(const std::string& internal, const std::string& prefix);

}  // namespace kiln
