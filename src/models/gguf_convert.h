// `kiln convert`: a checkpoint written as GGUF with quantized (or float-converted) matrices, which kiln and
// stable-diffusion.cpp both load. As sd.cpp's own converter does, every tensor is named as in the original layout
// (model.diffusion_model.*, first_stage_model.*, cond_stage_model.*, ...) and no metadata is written. A single file
// keeps its names; a diffusers folder is written under the names its single-file equivalent has
// (models/diffusers_as_original.h: q, k, v fused back into OpenCLIP's in_proj, text_projection transposed back, the
// VAE attention's linears as 1x1 convs), so that both give the same file. Quantized: the matrices `--weights`
// quantizes at load (models/quant_policy.h, given the name the loader's rename tables give the tensor) as far as GGUF
// can hold them: ggml blocks run along the innermost dimension, so 3x3 and 1x1 convolutions stay as stored, as in
// sd.cpp's files. Their blocks are those `--weights` makes (Tensor::converted), so a converted file loaded with
// `--weights W` computes what the original loaded with it computes. Tensors already in blocks (a GGUF input) are
// copied as they are; float targets (f32, f16, bf16) convert every floating tensor of rank >= 2 the loader reads.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/gguf_writer.h"
#include "io/safetensors.h"

namespace kiln {

struct ConvertEntry {
    GgufWriteSpec out;                          // the original layout's name, its shape, the dtype written
    std::shared_ptr<const SafetensorsFile> file;  // the input file holding its parts
    std::vector<std::string> parts;             // the tensor, or q, k, v stacked along the rows (a diffusers folder)
    DType stored = DType::F32;                  // the parts' dtype
    bool transpose = false;                     // stored transposed (a diffusers folder's OpenCLIP text_projection)
};

struct ConvertPlan {
    std::vector<std::string> inputs;     // the files read (never written)
    std::string folder;                  // a diffusers folder read (nothing is written inside it); empty for a file
    std::vector<ConvertEntry> entries;   // every tensor, in the order of their names
    std::map<DType, int64_t> converted;  // tensors converted, by the dtype they get
};

// `input`: a single file kiln loads (safetensors or GGUF) or a diffusers folder; `weights`: F32, F16, BF16 or a block
// format. InvalidModel for what the loader would refuse (a folder: also a tensor with no original name); Unsupported
// for a tensor GGUF cannot hold.
ConvertPlan plan_gguf_conversion(const std::string& input, DType weights);

// InvalidArgument when `output` is an input file (also through a link) or inside the input folder: those are never
// written. A NaN or
// infinite value in a matrix being quantized: InvalidModel naming it. No file is left behind on error.
void write_gguf_conversion(const ConvertPlan& plan, const std::string& output,
                           const std::function<void(size_t done, size_t total)>& progress = nullptr);

}  // namespace kiln
