// Which weight matrices `--weights q8_0|q4_0|...|q6_K` quantizes when a model loads (docs/QUANT.md has the
// measurements behind the choice). The rest keep the precision their file stores them in.
#pragma once
#include <optional>
#include <string>

#include "core/tensor.h"

namespace kiln {

// `name` is the internal (diffusers) name of a linear or conv2d weight, or of an embedding table read by
// rows; `shape` its shape. Quantized: matrices whose rows are whole 32-value blocks, of at least
// kQuantMinValues values, other than the first and last convolutions of the UNet and the VAE (conv_in,
// conv_out: they touch the latents or pixels directly) and the embeddings (timestep, token, position).
// For measuring what the rules are worth: KILN_QUANT_ALL=1 in the environment lifts the name rules, and
// KILN_QUANT_KEEP=a,b keeps the matrices whose internal names contain a or b too.
bool quantize_matrix(const std::string& name, const Shape& shape);

// The block format `--weights want` gives the matrix: nothing when quantize_matrix keeps it as stored (and at
// 4 bits for the down/upsampling convolutions and the text encoder's layers too); else
// `want`, or for a k-quant (256-value blocks) whose rows are not whole 256-value blocks (SD's 320- and
// 640-channel layers) the 32-value format llama.cpp falls back to in the same case: q4_K -> q5_0,
// q5_K -> q5_1, q6_K -> q8_0. `innermost_blocks` asks that the innermost dimension be whole blocks too,
// as GGUF files (ggml) require: 3x3 and 1x1 convolutions then stay as stored (kiln convert).
std::optional<DType> quantized_dtype(const std::string& name, const Shape& shape, DType want,
                                     bool innermost_blocks = false);

inline constexpr int64_t kQuantMinValues = 4096;

}  // namespace kiln
