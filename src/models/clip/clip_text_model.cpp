#include "models/clip/clip_text_model.h"

#include <algorithm>
#include <cstring>

#include "core/backend.h"
#include "kiln/error.h"
#include "models/model.h"
#include "ops/ops.h"

namespace kiln {

ClipTextModel ClipTextModel::load(const WeightSource& source, const ClipTextConfig& config) {
    config.validate(source.describe());
    const int64_t h = config.hidden, inner = config.intermediate;
    WeightReader r(source);
    ClipTextModel m;
    m.config_ = config;
    m.serial_ = next_model_serial();
    // The largest text-encoder tensor (49408 rows): kept in the file's precision, rows converted on lookup.
    // Read by rows on the host, whatever device the layers are on.
    m.token_embedding_ = r.get_matrix_host("text_model.embeddings.token_embedding.weight", {config.vocab, h});
    m.position_embedding_ =
        r.get_host("text_model.embeddings.position_embedding.weight", {config.max_positions, h});
    for (int i = 0; i < config.layers; ++i) {
        const std::string p = "text_model.encoder.layers." + std::to_string(i) + ".";
        Layer l;
        l.ln1_w = r.get(p + "layer_norm1.weight", {h});
        l.ln1_b = r.get(p + "layer_norm1.bias", {h});
        l.q_w = r.get_matrix(p + "self_attn.q_proj.weight", {h, h});
        l.q_b = r.get(p + "self_attn.q_proj.bias", {h});
        l.k_w = r.get_matrix(p + "self_attn.k_proj.weight", {h, h});
        l.k_b = r.get(p + "self_attn.k_proj.bias", {h});
        l.v_w = r.get_matrix(p + "self_attn.v_proj.weight", {h, h});
        l.v_b = r.get(p + "self_attn.v_proj.bias", {h});
        l.out_w = r.get_matrix(p + "self_attn.out_proj.weight", {h, h});
        l.out_b = r.get(p + "self_attn.out_proj.bias", {h});
        l.ln2_w = r.get(p + "layer_norm2.weight", {h});
        l.ln2_b = r.get(p + "layer_norm2.bias", {h});
        l.fc1_w = r.get_matrix(p + "mlp.fc1.weight", {inner, h});
        l.fc1_b = r.get(p + "mlp.fc1.bias", {inner});
        l.fc2_w = r.get_matrix(p + "mlp.fc2.weight", {h, inner});
        l.fc2_b = r.get(p + "mlp.fc2.bias", {h});
        m.layers_.push_back(std::move(l));
    }
    m.final_ln_w_ = r.get("text_model.final_layer_norm.weight", {h});
    m.final_ln_b_ = r.get("text_model.final_layer_norm.bias", {h});
    if (config.projection_dim > 0) m.projection_ = r.get("text_projection.weight", {config.projection_dim, h});
    // position_ids is a buffer older exports carry; a plain CLIPTextModel ignores a projection it has
    // no use for, as transformers does when loading a CLIPTextModelWithProjection file.
    r.check_all_used([&](const std::string& name) {
        return name == "text_model.embeddings.position_ids" ||
               (config.projection_dim == 0 && name == "text_projection.weight");
    });
    m.pages_ = r.take_pages();
    m.device_weights_ = r.take_device_weights();
    m.device_weights_.set_recording_prefix(m.recording_key_prefix());
    return m;
}

Tensor ClipTextModel::run_layer(const Layer& l, const Tensor& x) const {
    Tensor out = x;
    {
        Tensor h = ops::layer_norm(x, l.ln1_w, l.ln1_b, config_.eps);
        Tensor q = ops::linear(h, l.q_w, &l.q_b);
        Tensor k = ops::linear(h, l.k_w, &l.k_b);
        Tensor v = ops::linear(h, l.v_w, &l.v_b);
        ops::linear_add_(out, ops::attention(q, k, v, config_.heads, /*causal=*/true), l.out_w, &l.out_b);
    }
    Tensor h = ops::linear(ops::layer_norm(out, l.ln2_w, l.ln2_b, config_.eps), l.fc1_w, &l.fc1_b);
    if (config_.act == "gelu")
        ops::gelu_(h);
    else
        ops::quick_gelu_(h);
    ops::linear_add_(out, h, l.fc2_w, &l.fc2_b);
    return out;
}

ClipTextOutput ClipTextModel::encode(const std::vector<int>& ids, int skip) const {
    return encode(std::vector<std::vector<int>>{ids}, skip);
}

ClipTextOutput ClipTextModel::encode(const std::vector<std::vector<int>>& ids, int skip,
                                     const std::vector<TokenVectors>& replace) const {
    const int64_t batch = static_cast<int64_t>(ids.size());
    require(batch > 0, ErrorKind::InvalidArgument, "CLIP text encoder: no token rows given");
    const int64_t len = static_cast<int64_t>(ids[0].size());
    require(len > 0 && len <= config_.max_positions, ErrorKind::InvalidArgument,
            "CLIP text encoder: a row of " + std::to_string(len) + " tokens; it takes 1 to " +
                std::to_string(config_.max_positions));
    require(skip >= 1 && skip <= config_.layers, ErrorKind::InvalidArgument,
            "CLIP text encoder: clip skip " + std::to_string(skip) + " is out of range 1.." +
                std::to_string(config_.layers) + " for a " + std::to_string(config_.layers) + "-layer model");
    const int64_t h = config_.hidden;

    Tensor x({batch, len, h});
    std::vector<int64_t> eos(batch, 0);
    for (int64_t b = 0; b < batch; ++b) {
        require(static_cast<int64_t>(ids[b].size()) == len, ErrorKind::InvalidArgument,
                "CLIP text encoder: token rows differ in length (" + std::to_string(ids[b].size()) + " vs " +
                    std::to_string(len) + ")");
        for (int64_t t = 0; t < len; ++t) {
            const int id = ids[b][t];
            require(id >= 0 && id < config_.vocab, ErrorKind::InvalidArgument,
                    "CLIP text encoder: token id " + std::to_string(id) + " at row " + std::to_string(b) +
                        ", position " + std::to_string(t) + " is outside the vocabulary of " +
                        std::to_string(config_.vocab));
            float* dst = x.data() + (b * len + t) * h;
            token_embedding_.row_to_f32(id, dst);
            const float* pos = position_embedding_.data() + t * h;
            for (int64_t c = 0; c < h; ++c) dst[c] += pos[c];
            if (id > ids[b][eos[b]]) eos[b] = t;  // first position of the largest id, as torch.argmax
        }
    }

    for (const TokenVectors& r : replace) {
        require(r.vectors && r.vectors->rank() == 2 && r.vectors->dim(1) == h && r.row >= 0 && r.row < batch &&
                    r.position >= 0 && r.position < len,
                ErrorKind::InvalidArgument, "CLIP text encoder: token vectors that do not fit its rows");
        const int64_t n = std::min(r.vectors->dim(0), len - r.position);
        for (int64_t i = 0; i < n; ++i) {
            const int64_t t = r.position + i;
            float* dst = x.data() + (r.row * len + t) * h;
            const float* v = r.vectors->data() + i * h;
            const float* pos = position_embedding_.data() + t * h;
            for (int64_t c = 0; c < h; ++c) dst[c] = v[c] + pos[c];
        }
    }

    x = ops::on_device_of(std::move(x), final_ln_w_);  // the layers run where their weights are

    // hidden_states[i] for i = 0..layers; keep only the two the caller asked for.
    const int keep_last = config_.layers + 1 - skip, keep_pen = config_.layers - skip;
    // The layers and the final norm as one function of the embeddings, returning hidden_states[keep_pen],
    // final_norm(hidden_states[keep_last]) where skip > 1, and final_norm(hidden_states[-1]) one after the
    // other in a [1, parts * batch * len * hidden, 1, 1] tensor: on a GPU one recorded call (a CUDA graph
    // from a shape's second encoding on), as SD 1.5's encoder queued its ~120 ops eagerly in 2 ms on an
    // H200's host, several times the GPU's time for them.
    const Shape flat{1, batch * len * h, 1, 1};
    const Backend::RecordedFn layers = [&](const std::vector<const Tensor*>& in) {
        Tensor state = *in[0];
        Tensor parts;
        // Taken by value: a part kept while the layers go on is a copy, one made for the purpose moves in.
        auto keep = [&](Tensor t) {
            Tensor f = std::move(t).reshaped(flat);
            parts = parts.empty() ? std::move(f) : ops::concat_channels(parts, f);
        };
        if (keep_pen == 0) keep(state);
        Tensor last;
        for (int i = 0; i < config_.layers; ++i) {
            state = run_layer(layers_[i], state);
            if (i + 1 == keep_pen) keep(state);
            if (i + 1 == keep_last && skip > 1) last = ops::layer_norm(state, final_ln_w_, final_ln_b_, config_.eps);
        }
        if (skip > 1) keep(std::move(last));
        keep(ops::layer_norm(state, final_ln_w_, final_ln_b_, config_.eps));
        return parts;
    };
    // A dry run (core/dry_run.h) records nothing, and offloaded weights give no address for the key: eager there.
    const bool recordable = x.on_device() && x.backend().allocations_are_real();
    Tensor stacked = recordable ? x.backend().run_recorded(
                                      recording_key_prefix() + "at " +
                                          std::to_string(reinterpret_cast<uintptr_t>(final_ln_w_.device_data())) +
                                          " skip " + std::to_string(skip) + " " + shape_str(x.shape()),
                                      {&x}, layers)
                                : layers({&x});
    if (stacked.on_device()) stacked = stacked.to_host();
    const int64_t part = batch * len * h;
    auto part_at = [&](int index) {
        const float* begin = stacked.data() + index * part;
        return Tensor({batch, len, h}, std::vector<float>(begin, begin + part));
    };
    ClipTextOutput out;
    out.penultimate = part_at(0);
    if (skip > 1) out.last_hidden_state = part_at(1);
    Tensor final_state = part_at(skip > 1 ? 2 : 1);

    Tensor pooled({batch, h});
    for (int64_t b = 0; b < batch; ++b)
        std::memcpy(pooled.data() + b * h, final_state.data() + (b * len + eos[b]) * h, sizeof(float) * h);
    out.pooled = config_.projection_dim > 0
                     ? ops::linear(ops::on_device_of(std::move(pooled), projection_), projection_, nullptr).to_host()
                     : std::move(pooled);
    if (skip == 1) out.last_hidden_state = std::move(final_state);
    return out;
}

}  // namespace kiln
