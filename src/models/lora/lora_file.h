// A LoRA file as users get them (civitai-style sharing): low-rank changes to a model's linear and
// convolution weights, in the naming of kohya's scripts / AUTOMATIC1111 ("lora_unet_..._to_q.lora_down.weight")
// or of diffusers / PEFT ("unet.....to_q.lora_A.weight"). LyCORIS' LoHa and LoKr are read too. Each module
// becomes a weight change for one model tensor (docs/LORA.md).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kiln {

enum class LoraComponent {
    UNet,
    TextEncoder,   // SD 1.x/2.x's text encoder, SDXL's first ("lora_te_", "lora_te1_", "text_encoder.")
    TextEncoder2,  // SDXL's second ("lora_te2_", "text_encoder_2.")
};

enum class LoraKind {
    LoRA,  // up @ down (LoCon: a k x k down convolution and a 1x1 up)
    LoHa,  // (w1_a @ w1_b) * (w2_a @ w2_b), elementwise
    LoKr,  // kron(w1, w2), each given whole or as a product of two factors
};

struct LoraModule {
    std::string key;  // the module as the file names it, for messages ("lora_unet_..._to_q")
    LoraComponent component = LoraComponent::UNet;
    // The module's path inside its component with '_' for '.', as A1111 matches it
    // ("down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q").
    std::string path;
    LoraKind kind = LoraKind::LoRA;
    std::map<std::string, Tensor> tensors;  // float32, by part: "down", "up", "w1_a", "lokr_w1", ...
    double scale = 1.0;                     // alpha / rank; 1 without alpha
    int64_t out_features = 0;               // rows of the target weight
    int64_t in_numel = 0;                   // its values per row (in x kh x kw)
};

struct LoraFile {
    std::string path;
    std::vector<LoraModule> modules;
    std::vector<std::string> unknown_keys;  // tensors under no prefix kiln knows (reported, as A1111 skips them)
};

// Where a LoRA file's tensor belongs, from its name: nothing under no prefix kiln knows.
struct LoraKeyParts {
    LoraComponent component;
    std::string module;  // the file's name of the module (for messages)
    std::string path;    // '_' for '.'
    std::string part;    // normalised: "down", "up", "alpha", "hada_w1_a", "lokr_w1", ... or as written
};
std::optional<LoraKeyParts> lora_key_parts(const std::string& key);

// Reads and checks a LoRA file: shapes that agree (rank, up against down), floating-point tensors without
// NaN or infinity, every module complete. InvalidModel naming the tensor otherwise; Unsupported naming the
// format for LyCORIS kinds kiln does not apply (IA3, OFT, full "diff", DoRA, Tucker-factored convolutions).
LoraFile read_lora_file(const std::string& path);

// The module's change to its target weight before scale and multiplier: up @ down for LoRA, as a
// [out_features, in_numel] float32 matrix (reshape it to the weight's shape).
Tensor lora_delta(const LoraModule& module);

}  // namespace kiln
