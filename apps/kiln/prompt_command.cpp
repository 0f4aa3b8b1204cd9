// `kiln prompt`.
#include "prompt_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "kiln/error.h"
#include "models/model.h"
#include "text/clip_tokenizer.h"
#include "text/prompt_attention.h"
#include "text/prompt_chunks.h"
#include "text/prompt_schedule.h"
#include "text/composable_prompt.h"
#include "text/extra_networks.h"
#include "text/textual_inversion.h"
#include "text/token_counter.h"

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;  // keys in the order written

namespace kiln::cli {

namespace {

struct EncoderTokenizer {
    std::string name;
    ClipTokenizer tokenizer;
    std::string ti_key;  // SDXL's embedding part for this encoder ("clip_l", "clip_g"); "" otherwise
    int64_t width = -1;  // the encoder's width, where it can be read without loading weights; -1: unknown
};

// A diffusers folder's text encoder width (config.json's hidden_size), or -1.
int64_t config_width(const fs::path& config) {
    std::ifstream in(config);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    return j.is_object() && j.contains("hidden_size") && j["hidden_size"].is_number_integer() ? j["hidden_size"].get<int64_t>() : -1;
}

// A single file's text encoder width: its token embedding's columns, or -1.
int64_t file_width(const SafetensorsFile& file, const std::string& prefix) {
    for (const std::string& name : file.names())
        if (name.rfind(prefix, 0) == 0 && name.size() >= 22 && name.compare(name.size() - 22, 22, "token_embedding.weight") == 0 &&
            file.info(name).shape.size() == 2)
            return file.info(name).shape[1];
    return -1;
}

// The tokenizer of each text encoder, read without loading any weights: a diffusers folder's tokenizer/
// (and tokenizer_2/), or kiln's built-in vocabulary with the pad token the loader gives a single file's
// encoders (OpenCLIP pads with "!").
std::vector<EncoderTokenizer> prompt_tokenizers(const std::string& model) {
    if (model.empty()) return {{"builtin", ClipTokenizer::builtin()}};
    std::error_code ec;
    if (fs::is_directory(model, ec)) {
        require(fs::exists(fs::path(model) / "model_index.json"), ErrorKind::InvalidModel,
                model + " is a folder but not a diffusers model (no model_index.json)");
        const fs::path dir(model);
        std::vector<EncoderTokenizer> out{{"text_encoder", ClipTokenizer::from_folder((dir / "tokenizer").string()), "",
                                           config_width(dir / "text_encoder" / "config.json")}};
        if (fs::is_directory(dir / "tokenizer_2", ec)) {
            out.front().ti_key = "clip_l";
            out.push_back({"text_encoder_2", ClipTokenizer::from_folder((dir / "tokenizer_2").string()), "clip_g",
                           config_width(dir / "text_encoder_2" / "config.json")});
        }
        return out;
    }
    const SafetensorsFile file = SafetensorsFile::open(model);
    const Architecture arch = detect_single_file_architecture(file);
    ClipTokenizer clip = ClipTokenizer::builtin(), open_clip = ClipTokenizer::builtin();
    open_clip.set_pad_token("!");
    switch (arch) {
        case Architecture::SD1: return {{"text_encoder", clip, "", file_width(file, "cond_stage_model.")}};
        case Architecture::SD2: return {{"text_encoder", open_clip, "", file_width(file, "cond_stage_model.")}};
        case Architecture::SDXL:
            return {{"text_encoder", clip, "clip_l", file_width(file, "conditioner.embedders.0.")},
                    {"text_encoder_2", open_clip, "clip_g", file_width(file, "conditioner.embedders.1.")}};
    }
    return {};
}

// JSON has no infinity or NaN: those weights are written as the strings Python's repr gives.
Json weight_json(double w) {
    if (std::isnan(w)) return "nan";
    if (std::isinf(w)) return w > 0 ? "inf" : "-inf";
    return w;
}

// Indented JSON, but an array or object of plain values on one line: a chunk's 77 ids stay one line.
void write_json(std::string& out, const Json& j, int indent) {
    const bool flat =
        !j.is_structured() || std::none_of(j.begin(), j.end(), [](const Json& v) { return v.is_structured(); });
    if (flat) {
        out += j.dump(-1, ' ', false, Json::error_handler_t::replace);
        return;
    }
    const std::string pad(static_cast<size_t>(indent + 2), ' ');
    out += j.is_object() ? "{\n" : "[\n";
    size_t k = 0;
    for (auto it = j.begin(); it != j.end(); ++it, ++k) {
        out += pad;
        if (j.is_object()) out += Json(it.key()).dump() + ": ";
        write_json(out, *it, indent + 2);
        out += k + 1 < j.size() ? ",\n" : "\n";
    }
    out += std::string(static_cast<size_t>(indent), ' ') + (j.is_object() ? "}" : "]");
}

Json parsed_json(const std::vector<WeightedText>& parsed) {
    Json out = Json::array();
    for (const WeightedText& e : parsed) out.push_back(Json::array({e.text, weight_json(e.weight)}));
    return out;
}

}  // namespace

CLI::App* add_prompt_command(CLI::App& app, PromptOptions& options) {
    CLI::App* cmd = app.add_subcommand(
        "prompt", "show how AUTOMATIC1111 reads a prompt: emphasis weights, per-step prompts, 75-token chunks (JSON)");
    cmd->add_option("text", options.text, "the prompt")->required();
    cmd->add_option("-m,--model", options.model,
                    "use this checkpoint's tokenizers (.safetensors file or diffusers folder; "
                    "default: kiln's built-in CLIP vocabulary)");
    cmd->add_option("--embeddings-dir", options.embeddings_dir,
                    "textual-inversion embeddings the prompt may name (their vectors count as tokens)");
    cmd->add_option("--steps", options.steps, "sampling steps, for prompt editing and alternation")
        ->capture_default_str()
        ->check(CLI::Range(1, 100000));
    return cmd;
}

namespace {

// Each encoder's embeddings as the prompt sees them: those that fit every encoder whose width is known (as
// generation uses them: prompt_encoding.cpp), or all of them when no width is known (no model given).
std::vector<std::vector<PromptEmbedding>> prompt_embeddings(const std::vector<EncoderTokenizer>& encoders,
                                                            const std::vector<TextualInversion>& loaded) {
    std::vector<std::vector<PromptEmbedding>> out(encoders.size());
    for (const TextualInversion& ti : loaded) {
        bool fits = true;
        for (const EncoderTokenizer& e : encoders) fits = fits && (e.width < 0 || ti.vectors_for(e.ti_key, e.width));
        if (!fits) continue;
        for (size_t e = 0; e < encoders.size(); ++e)
            out[e].push_back({embedding_name_ids(ti.name, encoders[e].tokenizer), ti.vectors});
    }
    return out;
}

}  // namespace

int run_prompt(const PromptOptions& options) {
    // The prompt first: its errors need no tokenizer.
    const std::vector<WeightedText> parsed = parse_prompt_attention(options.text);
    const std::vector<ScheduledPrompt> schedule = prompt_schedule(options.text, options.steps);
    const std::vector<EncoderTokenizer> encoders = prompt_tokenizers(options.model);
    const std::vector<TextualInversion> loaded =
        options.embeddings_dir.empty() ? std::vector<TextualInversion>{}
                                       : load_embeddings_dir(options.embeddings_dir, [](const std::string& line) {
                                             std::fprintf(stderr, "kiln: %s\n", line.c_str());
                                         });
    const std::vector<std::vector<PromptEmbedding>> embeddings = prompt_embeddings(encoders, loaded);

    Json out;
    out["parsed"] = parsed_json(parsed);
    out["schedules"] = Json::array();
    for (const ScheduledPrompt& s : schedule) out["schedules"].push_back(Json::array({s.end_step, s.prompt}));
    // What generation encodes: the prompt without its extra-network tags, split at AND, each part's schedule.
    out["and_parts"] = Json::array();
    for (const ComposablePart& part : split_composable_prompt(remove_extra_network_tags(options.text).prompt)) {
        Json p;
        p["text"] = part.text;
        p["weight"] = weight_json(part.weight);
        p["schedules"] = Json::array();
        for (const ScheduledPrompt& s : prompt_schedule(part.text, options.steps))
            p["schedules"].push_back(Json::array({s.end_step, s.prompt}));
        out["and_parts"].push_back(p);
    }
    // The count under the webui's prompt box (its first encoder's tokenizer).
    const TokenCount counter = count_prompt_tokens(options.text, options.steps, encoders.front().tokenizer, embeddings.front());
    out["token_count"] = counter.token_count;
    out["target"] = counter.target;
    // Each scheduled prompt is read for emphasis and cut into chunks on its own, as the webui encodes it.
    out["text_encoders"] = Json::array();
    for (size_t i = 0; i < encoders.size(); ++i) {
        const EncoderTokenizer& encoder = encoders[i];
        Json e;
        e["name"] = encoder.name;
        e["pad_id"] = encoder.tokenizer.pad_id();
        e["schedules"] = Json::array();
        for (const ScheduledPrompt& s : schedule) {
            const ChunkedPrompt chunked = chunk_prompt(parse_prompt_attention(s.prompt), encoder.tokenizer, embeddings[i]);
            Json entry;
            entry["end_step"] = s.end_step;
            entry["token_count"] = chunked.token_count;  // the webui shows "token_count/target"
            entry["target"] = chunked.target();
            entry["chunks"] = Json::array();
            for (const PromptChunk& chunk : chunked.chunks) {
                Json weights = Json::array();
                for (double w : chunk.weights) weights.push_back(weight_json(w));
                entry["chunks"].push_back(Json{{"tokens", chunk.tokens}, {"ids", chunk.ids}, {"weights", weights}});
            }
            e["schedules"].push_back(entry);
        }
        out["text_encoders"].push_back(e);
    }
    std::string text;
    write_json(text, out, 0);
    text += "\n";
    std::fputs(text.c_str(), stdout);
    return 0;
}

}  // namespace kiln::cli
