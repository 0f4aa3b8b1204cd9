// `kiln convert`: a single-file checkpoint written as GGUF with quantized (or float-converted) matrices, which
// kiln and stable-diffusion.cpp both load. As sd.cpp's own converter does, every tensor keeps its name (the
// original layout's model.diffusion_model.*, first_stage_model.*, cond_stage_model.*, ...) and no metadata
// is written. Quantized: the matrices `--weights` quantizes at load (models/quant_policy.h, given the name
// the loader's rename tables give the tensor) as far as GGUF can hold them: ggml blocks run along the
// innermost dimension, so 3x3 and 1x1 convolutions stay as stored, as in sd.cpp's files. Their blocks are
// those `--weights` makes (Tensor::converted), so a converted file loaded with `--weights W` computes what
// the original loaded with it computes. Tensors already in blocks (a GGUF input) are copied as they are;
// float targets (f32, f16, bf16) convert every floating tensor of rank >= 2 the loader reads.
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
    std::string source_name;
    GgufWriteSpec out;
};

struct ConvertPlan {
    std::shared_ptr<const SafetensorsFile> file;
    std::vector<ConvertEntry> entries;   // every tensor of the file, in the order of its names
    std::map<DType, int64_t> converted;  // tensors converted, by the dtype they get
};

// `input`: a single file kiln loads (safetensors or GGUF); `weights`: F32, F16, BF16 or a block format.
// InvalidModel for what the loader would refuse; Unsupported for a folder or a tensor GGUF cannot hold.
ConvertPlan plan_gguf_conversion(const std::string& input, DType weights);

// InvalidArgument when `output` is the input file (also through a link): it is never written. A NaN or
// infinite value in a matrix being quantized: InvalidModel naming it. No file is left behind on error.
void write_gguf_conversion(const ConvertPlan& plan, const std::string& output,
                           const std::function<void(size_t done, size_t total)>& progress = nullptr);

}  // namespace kiln
