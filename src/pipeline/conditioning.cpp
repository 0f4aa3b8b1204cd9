#include "pipeline/conditioning.h"

#include <algorithm>

#include "kiln/error.h"
#include "runtime/profiler.h"

namespace kiln {

namespace {

// Rows of a [B, ...] tensor, concatenated along the batch.
Tensor concat_batch(const Tensor& a, const Tensor& b) {
    Shape s = a.shape();
    s[0] += b.dim(0);
    std::vector<float> v(a.values());
    v.insert(v.end(), b.values().begin(), b.values().end());
    return Tensor(s, std::move(v));
}

// Features of two [B, L, Da] and [B, L, Db] tensors side by side: [B, L, Da + Db].
Tensor concat_features(const Tensor& a, const Tensor& b) {
    const int64_t rows = a.numel() / a.dim(-1), da = a.dim(-1), db = b.dim(-1);
    Shape s = a.shape();
    s.back() = da + db;
    Tensor out(s);
    for (int64_t r = 0; r < rows; ++r) {
        std::copy_n(a.data() + r * da, da, out.data() + r * (da + db));
        std::copy_n(b.data() + r * db, db, out.data() + r * (da + db) + da);
    }
    return out;
}

std::vector<std::vector<int>> tokenize(const TextEncoder& te, const std::vector<std::string>& texts) {
    StageScope zone(Stage::Tokenize);
    std::vector<std::vector<int>> ids;
    for (const std::string& text : texts) ids.push_back(te.tokenizer.encode_padded(text, te.tokenizer.pad_id()));
    return ids;
}

struct Encoded {
    Tensor context, pooled;  // [B, 77, D] and [B, pooled] for B prompts, in their order
};

// Prompts through the model's text encoder(s), as diffusers' encode_prompt: SD 1.x/2.x take the
// final-normed last layer (clip skip: an earlier layer, normed); SDXL takes each encoder's
// penultimate layer un-normed, side by side, and the second encoder's projected pooled output.
// All prompts go through each encoder as one batch: one pass of its layers (on a GPU, one set of kernel
// launches for the negative and the positive prompt rather than two).
Encoded encode(const StableDiffusionModel& model, const std::vector<std::string>& texts, int clip_skip) {
    Encoded e;
    if (model.arch != Architecture::SDXL) {
        const TextEncoder& te = model.text_encoders.at(0);
        require(clip_skip <= te.model.config().layers, ErrorKind::InvalidArgument,
                "clip skip " + std::to_string(clip_skip) + " is deeper than the text encoder's " +
                    std::to_string(te.model.config().layers) + " layers");
        const std::vector<std::vector<int>> ids = tokenize(te, texts);
        StageScope zone(Stage::TextEncode);
        e.context = te.model.encode(ids, clip_skip).last_hidden_state;
        return e;
    }
    for (const TextEncoder& te : model.text_encoders) {
        require(clip_skip < te.model.config().layers, ErrorKind::InvalidArgument,
                "clip skip " + std::to_string(clip_skip) + " is too deep for the text encoders");
        const std::vector<std::vector<int>> ids = tokenize(te, texts);
        StageScope zone(Stage::TextEncode);
        ClipTextOutput out = te.model.encode(ids, clip_skip);
        e.context = e.context.empty() ? std::move(out.penultimate) : concat_features(e.context, out.penultimate);
        e.pooled = std::move(out.pooled);  // the last encoder's
    }
    return e;
}

}  // namespace

Conditioning encode_conditioning(const StableDiffusionModel& model, const std::string& prompt,
                                 const std::optional<std::string>& negative, bool with_negative, int clip_skip,
                                 int width, int height) {
    Conditioning c;
    if (with_negative && !(model.force_zeros_for_empty_prompt && !negative)) {
        Encoded both = encode(model, {negative.value_or(""), prompt}, clip_skip);  // [negative, positive]
        c.context = std::move(both.context);
        c.text_embeds = std::move(both.pooled);
    } else if (with_negative) {
        // SDXL pipelines condition on zeros when no negative prompt is given at all.
        Encoded pos = encode(model, {prompt}, clip_skip);
        c.context = concat_batch(Tensor(pos.context.shape()), pos.context);
        if (!pos.pooled.empty()) c.text_embeds = concat_batch(Tensor(pos.pooled.shape()), pos.pooled);
    } else {
        Encoded pos = encode(model, {prompt}, clip_skip);
        c.context = std::move(pos.context);
        c.text_embeds = std::move(pos.pooled);
    }
    if (model.arch == Architecture::SDXL) {
        // original size, crop top-left, target size, as (height, width) pairs.
        const int64_t batch = c.context.dim(0);
        const float h = static_cast<float>(height), w = static_cast<float>(width);
        std::vector<float> ids;
        for (int64_t b = 0; b < batch; ++b) ids.insert(ids.end(), {h, w, 0.0f, 0.0f, h, w});
        c.time_ids = Tensor({batch, 6}, std::move(ids));
    } else {
        c.text_embeds = Tensor();
    }
    return c;
}

}  // namespace kiln
