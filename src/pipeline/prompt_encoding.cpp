#include "pipeline/prompt_encoding.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kiln/error.h"
#include "runtime/profiler.h"
#include "text/prompt_attention.h"
#include "text/prompt_chunks.h"
#include "text/prompt_schedule.h"

namespace kiln {

PromptSyntax parse_prompt_syntax(const std::string& name) {
    if (name == "a1111") return PromptSyntax::A1111;
    if (name == "none" || name == "plain") return PromptSyntax::Plain;
    fail(ErrorKind::InvalidArgument, "unknown prompt syntax '" + name + "' (choose a1111 or none)");
}

EmphasisMode parse_emphasis_mode(const std::string& name) {
    if (name == "original") return EmphasisMode::Original;
    if (name == "no-norm") return EmphasisMode::NoNorm;
    if (name == "ignore") return EmphasisMode::Ignore;
    if (name == "none") return EmphasisMode::None;
    fail(ErrorKind::InvalidArgument, "unknown emphasis mode '" + name + "' (choose original, no-norm, ignore or none)");
}

const char* emphasis_mode_label(EmphasisMode mode) {
    switch (mode) {
        case EmphasisMode::Original: return "Original";
        case EmphasisMode::NoNorm: return "No norm";
        case EmphasisMode::Ignore: return "Ignore";
        case EmphasisMode::None: return "None";
    }
    return "Original";
}

void apply_emphasis(Tensor& z, const std::vector<double>& weights, EmphasisMode mode) {
    if (mode == EmphasisMode::Original) return apply_original_emphasis(z, weights);
    if (mode != EmphasisMode::NoNorm) return;
    const int64_t rows = z.numel() / z.dim(-1), width = z.dim(-1);
    require(static_cast<int64_t>(weights.size()) == rows, ErrorKind::InvalidArgument,
            "emphasis: " + std::to_string(weights.size()) + " weights for " + std::to_string(rows) + " tokens");
    float* v = z.data();
    for (int64_t r = 0; r < rows; ++r) {
        const float w = static_cast<float>(weights[static_cast<size_t>(r)]);  // torch.asarray: float32
        for (int64_t c = 0; c < width; ++c) v[r * width + c] *= w;
    }
}

void apply_original_emphasis(Tensor& z, const std::vector<double>& weights) {
    const int64_t rows = z.numel() / z.dim(-1), width = z.dim(-1);
    require(static_cast<int64_t>(weights.size()) == rows, ErrorKind::InvalidArgument,
            "emphasis: " + std::to_string(weights.size()) + " weights for " + std::to_string(rows) + " tokens");
    if (std::all_of(weights.begin(), weights.end(), [](double w) { return w == 1.0; })) return;
    float* v = z.data();
    const int64_t n = z.numel();
    auto mean = [&] {
        double sum = 0.0;
        for (int64_t i = 0; i < n; ++i) sum += v[i];
        return static_cast<float>(sum / static_cast<double>(n));
    };
    const float before = mean();
    // torch.asarray turns the Python floats into a float32 tensor: each weight is rounded to float first.
    for (int64_t r = 0; r < rows; ++r) {
        const float w = static_cast<float>(weights[static_cast<size_t>(r)]);
        for (int64_t c = 0; c < width; ++c) v[r * width + c] *= w;
    }
    const float ratio = before / mean();
    for (int64_t i = 0; i < n; ++i) v[i] *= ratio;
}

namespace {

// One prompt's texts (its schedule) and, per encoder, their chunks.
struct PromptTexts {
    std::vector<ScheduledPrompt> schedule;
    std::vector<std::vector<const Tensor*>> embedding_vectors;  // [encoder][embedding of the chunks' fixes]
    std::vector<const TextualInversion*> embeddings;            // the same embeddings
    std::vector<std::vector<std::vector<PromptChunk>>> chunks;  // [encoder][text][chunk]
    std::vector<int> chunk_count;                               // [encoder]: the most of any text
};

// diffusers' way: the whole text, start and end tokens, truncated to 77 and padded with the pad token.
PromptChunk plain_chunk(const std::string& text, const ClipTokenizer& tokenizer) {
    PromptChunk chunk;
    chunk.ids = tokenizer.encode_padded(text, tokenizer.pad_id());
    chunk.weights.assign(chunk.ids.size(), 1.0);
    return chunk;
}

// The webui's empty chunk: a start token, then end tokens (OpenCLIP: one end token, then its pad).
PromptChunk empty_chunk(const ClipTokenizer& tokenizer) {
    return chunk_prompt({WeightedText{"", 1.0}}, tokenizer).chunks.at(0);
}

// The embeddings every text encoder of the model can take (SDXL: clip_l to the first, clip_g to the second).
void usable_embeddings(const StableDiffusionModel& model, const PromptEncodingOptions& options, PromptTexts& p) {
    p.embedding_vectors.assign(model.text_encoders.size(), {});
    if (!options.embeddings || options.syntax != PromptSyntax::A1111) return;
    for (const TextualInversion& ti : *options.embeddings) {
        std::vector<const Tensor*> per_encoder;
        for (size_t e = 0; e < model.text_encoders.size(); ++e) {
            const std::string key = model.arch == Architecture::SDXL ? (e == 0 ? "clip_l" : "clip_g") : "";
            per_encoder.push_back(ti.vectors_for(key, model.text_encoders[e].model.config().hidden));
        }
        if (std::find(per_encoder.begin(), per_encoder.end(), nullptr) != per_encoder.end()) continue;
        p.embeddings.push_back(&ti);
        for (size_t e = 0; e < per_encoder.size(); ++e) p.embedding_vectors[e].push_back(per_encoder[e]);
    }
}

PromptTexts read_prompt(const std::string& prompt, const StableDiffusionModel& model,
                        const PromptEncodingOptions& options) {
    PromptTexts p;
    usable_embeddings(model, options, p);
    p.schedule = options.syntax == PromptSyntax::A1111 ? prompt_schedule(prompt, options.schedule_steps)
                                                       : std::vector<ScheduledPrompt>{{options.schedule_steps, prompt}};
    for (const TextEncoder& te : model.text_encoders) {
        std::vector<PromptEmbedding> embeddings;
        for (const TextualInversion* ti : p.embeddings)
            embeddings.push_back({embedding_name_ids(ti->name, te.tokenizer), ti->vectors});
        std::vector<std::vector<PromptChunk>> per_text;
        int most = 0;
        for (const ScheduledPrompt& s : p.schedule) {
            std::vector<PromptChunk> chunks;
            if (options.syntax == PromptSyntax::A1111) {
                // "None" reads no syntax at all: the whole text is one piece of weight 1 (tokenize_line).
                const std::vector<WeightedText> parsed = options.emphasis == EmphasisMode::None
                                                             ? std::vector<WeightedText>{{s.prompt, 1.0}}
                                                             : parse_prompt_attention(s.prompt);
                const bool weights_apply =
                    options.emphasis == EmphasisMode::Original || options.emphasis == EmphasisMode::NoNorm;
                for (const WeightedText& w : parsed)
                    if (weights_apply && !std::isfinite(w.weight))
                        fail(ErrorKind::InvalidArgument,
                             "the weight of \"" + w.text + "\" in the prompt is not a finite number");
                if (options.texts_with_brackets && s.prompt.find_first_of("([") != std::string::npos)
                    *options.texts_with_brackets = true;
                chunks = chunk_prompt(parsed, te.tokenizer, embeddings).chunks;
            } else {
                chunks.push_back(plain_chunk(s.prompt, te.tokenizer));
            }
            most = std::max(most, static_cast<int>(chunks.size()));
            per_text.push_back(std::move(chunks));
        }
        p.chunks.push_back(std::move(per_text));
        p.chunk_count.push_back(most);
    }
    // SDXL's tokenizers share a vocabulary; its contexts are joined side by side.
    for (int c : p.chunk_count)
        require(c == p.chunk_count.front(), ErrorKind::InvalidModel,
                "the text encoders' tokenizers cut the prompt into different numbers of chunks");
    return p;
}

// Rows [r0, r0 + count) of a [B, T, D] tensor.
Tensor rows_of(const Tensor& t, int64_t r0, int64_t count) {
    const int64_t per = t.numel() / t.dim(0);
    Shape s = t.shape();
    s[0] = count;
    return Tensor(s, std::vector<float>(t.data() + r0 * per, t.data() + (r0 + count) * per));
}

Tensor context_of(const StableDiffusionModel& model, const ClipTextOutput& out) {
    return model.arch == Architecture::SDXL ? out.penultimate : out.last_hidden_state;
}

void check_clip_skip(const StableDiffusionModel& model, int clip_skip) {
    for (const TextEncoder& te : model.text_encoders) {
        const int layers = te.model.config().layers;
        // SDXL reads hidden_states[-(skip + 1)], so one layer fewer is available there.
        const bool too_deep = model.arch == Architecture::SDXL ? clip_skip >= layers : clip_skip > layers;
        require(!too_deep, ErrorKind::InvalidArgument,
                "clip skip " + std::to_string(clip_skip) + " is too deep for the text encoder's " +
                    std::to_string(layers) + " layers");
    }
}

}  // namespace

std::vector<std::vector<ScheduledEncoding>> encode_prompt_schedules(const StableDiffusionModel& model,
                                                                    const std::vector<std::string>& prompts,
                                                                    const PromptEncodingOptions& options) {
    require(options.schedule_steps >= 1, ErrorKind::InvalidArgument, "the prompt schedule needs at least 1 step");
    require(options.clip_skip >= 1, ErrorKind::InvalidArgument, "clip skip must be at least 1");
    check_clip_skip(model, options.clip_skip);
    std::vector<PromptTexts> texts;
    {
        StageScope zone(Stage::Tokenize);
        for (const std::string& prompt : prompts) texts.push_back(read_prompt(prompt, model, options));
    }

    // Per prompt and encoder, the chunks' outputs: [texts, 77, D] each.
    const size_t encoders = model.text_encoders.size();
    std::vector<std::vector<std::vector<Tensor>>> outputs(prompts.size(), std::vector<std::vector<Tensor>>(encoders));
    std::vector<Tensor> pooled(prompts.size());  // the last encoder's, from the first chunk
    int most_chunks = 0;
    for (const PromptTexts& p : texts) most_chunks = std::max(most_chunks, p.chunk_count.front());

    StageScope zone(Stage::TextEncode);
    for (size_t e = 0; e < encoders; ++e) {
        const TextEncoder& te = model.text_encoders[e];
        const PromptChunk empty = empty_chunk(te.tokenizer);
        for (int k = 0; k < most_chunks; ++k) {
            // Chunk k of every text of every prompt that has one, in one batch through the encoder.
            std::vector<std::vector<int>> ids;
            std::vector<TokenVectors> vectors;  // the embeddings' fixes (textual inversion)
            std::vector<std::pair<size_t, size_t>> groups;  // prompt, first row
            for (size_t p = 0; p < texts.size(); ++p) {
                if (texts[p].chunk_count[e] <= k) continue;
                groups.emplace_back(p, ids.size());
                for (const std::vector<PromptChunk>& chunks : texts[p].chunks[e]) {
                    const PromptChunk& c = k < static_cast<int>(chunks.size()) ? chunks[static_cast<size_t>(k)] : empty;
                    for (const EmbeddingFix& fix : c.fixes) {
                        vectors.push_back({static_cast<int64_t>(ids.size()), fix.offset + 1,
                                           texts[p].embedding_vectors[e][static_cast<size_t>(fix.embedding)]});
                        const std::string& name = texts[p].embeddings[static_cast<size_t>(fix.embedding)]->name;
                        if (options.used_embeddings && std::find(options.used_embeddings->begin(),
                                                                 options.used_embeddings->end(), name) ==
                                                           options.used_embeddings->end())
                            options.used_embeddings->push_back(name);
                    }
                    ids.push_back(c.ids);
                }
            }
            const ClipTextOutput out = te.model.encode(ids, options.clip_skip, vectors);
            const Tensor z = context_of(model, out);
            for (const auto& [p, first] : groups) {
                const size_t count = texts[p].schedule.size();
                Tensor part = rows_of(z, static_cast<int64_t>(first), static_cast<int64_t>(count));
                std::vector<double> weights;
                for (const std::vector<PromptChunk>& chunks : texts[p].chunks[e]) {
                    const PromptChunk& c = k < static_cast<int>(chunks.size()) ? chunks[static_cast<size_t>(k)] : empty;
                    weights.insert(weights.end(), c.weights.begin(), c.weights.end());
                }
                apply_emphasis(part, weights, options.syntax == PromptSyntax::A1111 ? options.emphasis : EmphasisMode::Original);
                outputs[p][e].push_back(std::move(part));
                if (k == 0 && e + 1 == encoders && !out.pooled.empty())
                    pooled[p] = rows_of(out.pooled, static_cast<int64_t>(first), static_cast<int64_t>(count));
            }
        }
    }

    // Chunks along the tokens, encoders side by side.
    std::vector<std::vector<ScheduledEncoding>> result;
    for (size_t p = 0; p < texts.size(); ++p) {
        const int chunks = texts[p].chunk_count.front();
        int64_t width = 0;
        for (size_t e = 0; e < encoders; ++e) width += outputs[p][e].front().dim(-1);
        const int64_t tokens = outputs[p][0].front().dim(1);
        std::vector<ScheduledEncoding> schedule;
        for (size_t s = 0; s < texts[p].schedule.size(); ++s) {
            Tensor context(Shape{1, tokens * chunks, width});
            float* dst = context.data();
            for (int k = 0; k < chunks; ++k)
                for (int64_t t = 0; t < tokens; ++t) {
                    for (size_t e = 0; e < encoders; ++e) {
                        const Tensor& part = outputs[p][e][static_cast<size_t>(k)];
                        const int64_t d = part.dim(-1);
                        std::memcpy(dst, part.data() + (static_cast<int64_t>(s) * tokens + t) * d, sizeof(float) * d);
                        dst += d;
                    }
                }
            // The message is built only on failure: require()'s argument would be made for every value (~10 ms
            // of string building per SD 1.5 prompt, 7% of a 512x512 txt2img on an H200).
            const float* values = context.data();
            const bool finite = std::all_of(values, values + context.numel(), [](float v) { return std::isfinite(v); });
            if (!finite)
                fail(ErrorKind::InvalidArgument, "the prompt's weights make its conditioning infinite or NaN (a weight too large?): \"" +
                                                     texts[p].schedule[s].prompt + "\"");
            ScheduledEncoding enc;
            enc.end_step = texts[p].schedule[s].end_step;
            enc.context = std::move(context);
            if (!pooled[p].empty()) enc.pooled = rows_of(pooled[p], static_cast<int64_t>(s), 1);
            schedule.push_back(std::move(enc));
        }
        result.push_back(std::move(schedule));
    }
    return result;
}

}  // namespace kiln
