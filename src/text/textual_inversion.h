// Textual-inversion embeddings as AUTOMATIC1111 reads them (modules/textual_inversion/textual_inversion.py):
// one file per embedding in a folder (.pt/.bin/.ckpt through kiln's safe pickle reader, or .safetensors),
// named by its file name without the extension, holding one of
//   'string_to_param': {'*': [n, dim]}     the webui's own files (one entry; a ParameterDict in old ones),
//   'clip_l': [n, 768], 'clip_g': [n, 1280] SDXL embeddings, one part per text encoder,
//   a single tensor under any key        'emb_params' (.safetensors), diffusers' {'<token>': [n, dim]};
//                                         a [dim] tensor is one vector.
// Where the prompt names an embedding, its n vectors replace n token embeddings (prompt_chunks.h places them).
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kiln {

struct TextualInversion {
    std::string name;  // the file name without its extension: the word the prompt uses
    std::string path;
    int vectors = 0;
    // [vectors, dim] float32 per part: "clip_l" and "clip_g" for SDXL files, "" for single-encoder ones.
    std::map<std::string, Tensor> parts;
    // The vectors for a text encoder of `width` channels: SDXL's part named `sdxl_key` ("clip_l" or "clip_g")
    // where the file has parts, else the single part; nullptr when the embedding does not fit that encoder
    // (the webui then skips it, and its name is read as words).
    const Tensor* vectors_for(const std::string& sdxl_key, int64_t width) const;
};

// One embedding file. InvalidModel naming the file when it has none of the layouts above (several terms,
// no tensor, a tensor of more than two dimensions, or more than 75 vectors, which no prompt chunk holds).
TextualInversion load_textual_inversion(const std::string& path);

// Every .pt, .bin, .ckpt and .safetensors file directly in `dir`, sorted by name. A file that cannot be read
// as an embedding is skipped with a line to `notice`, as the webui skips it with a message. A missing
// folder: IO error.
std::vector<TextualInversion> load_embeddings_dir(const std::string& dir,
                                                  const std::function<void(const std::string&)>& notice = {});

}  // namespace kiln
