// The CLIP text transformer of every SD family, computed as transformers' CLIPTextModel and
// CLIPTextModelWithProjection compute it (pre-LN blocks, causal self-attention, final layer norm).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "models/clip/clip_config.h"
#include "models/weight_source.h"

namespace kiln {

// What the pipelines take from a text encoder. hidden_states[i] below is transformers' list:
// [0] the embeddings, [i] the output of layer i, so hidden_states[-1] is the last layer's output.
struct ClipTextOutput {
    // final_layer_norm(hidden_states[-skip]), [B,77,hidden]. skip = 1 is transformers'
    // last_hidden_state (SD 1.x/2.x context); skip = 2 is SD 1.x "clip skip 2" (diffusers clip_skip=1).
    Tensor last_hidden_state;
    // hidden_states[-(skip + 1)] without the final norm, [B,77,hidden]. skip = 1 is hidden_states[-2],
    // SDXL's context; skip = 2 is SDXL's diffusers clip_skip=1 (hidden_states[-3]).
    Tensor penultimate;
    // The full model's final-norm state at each row's EOS token (argmax of the ids, EOS being the
    // largest id), through text_projection when the model has one: [B, projection_dim or hidden].
    // Independent of skip, as in diffusers' SDXL encode_prompt.
    Tensor pooled;
};

// Vectors that take the place of row `row`'s token embeddings from `position` on (textual inversion: the
// webui's EmbeddingsWithFixes), as many rows of `vectors` ([n, hidden], float32) as fit before the row ends;
// the position embeddings are added to them as to token embeddings.
struct TokenVectors {
    int64_t row = 0;
    int64_t position = 0;
    const Tensor* vectors = nullptr;
};

class ClipTextModel {
public:
    // Reads every tensor by its diffusers/transformers name (text_model.*, text_projection.weight),
    // checking shapes against `config`; a missing, misshapen or unexpected tensor is InvalidModel.
    static ClipTextModel load(const WeightSource& source, const ClipTextConfig& config);

    const ClipTextConfig& config() const { return config_; }
    // The weights' pages in the mapped file (empty unless they are views of it: on the CPU).
    const WeightPages& pages() const { return pages_; }
    // The weights' device storage (empty on the CPU), which a --vram budget moves off the device and back.
    const DeviceWeights& device_weights() const { return device_weights_; }

    // ids: B rows of token ids, each 1..max_positions long (all rows the same length, normally 77).
    // skip (>= 1, <= layers) picks hidden_states[-skip] as above. Bad ids or skip: InvalidArgument.
    ClipTextOutput encode(const std::vector<std::vector<int>>& ids, int skip = 1,
                          const std::vector<TokenVectors>& replace = {}) const;
    ClipTextOutput encode(const std::vector<int>& ids, int skip = 1) const;  // one row, B = 1

private:
    WeightPages pages_;
    DeviceWeights device_weights_;
    struct Layer {
        Tensor ln1_w, ln1_b, q_w, q_b, k_w, k_b, v_w, v_b, out_w, out_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
    };
    Tensor run_layer(const Layer& layer, const Tensor& x) const;

    ClipTextConfig config_;
    // "clip text encoder N ": the start of its recorded calls' keys.
    std::string recording_key_prefix() const { return "clip text encoder " + std::to_string(serial_) + " "; }
    uint64_t serial_ = 0;  // keys this model's recorded call (Backend::run_recorded), with its weights' address
    Tensor token_embedding_, position_embedding_, final_ln_w_, final_ln_b_, projection_;
    std::vector<Layer> layers_;
};

}  // namespace kiln
