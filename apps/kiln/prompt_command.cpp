// `kiln prompt`.
#include "prompt_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "kiln/error.h"
#include "models/model.h"
#include "text/clip_tokenizer.h"
#include "text/prompt_attention.h"
#include "text/prompt_chunks.h"
#include "text/prompt_schedule.h"

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;  // keys in the order written

namespace kiln::cli {

namespace {

struct EncoderTokenizer {
    std::string name;
    ClipTokenizer tokenizer;
};

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
        std::vector<EncoderTokenizer> out{{"text_encoder", ClipTokenizer::from_folder((dir / "tokenizer").string())}};
        if (fs::is_directory(dir / "tokenizer_2", ec))
            out.push_back({"text_encoder_2", ClipTokenizer::from_folder((dir / "tokenizer_2").string())});
        return out;
    }
    const Architecture arch = detect_single_file_architecture(SafetensorsFile::open(model));
    ClipTokenizer clip = ClipTokenizer::builtin(), open_clip = ClipTokenizer::builtin();
    open_clip.set_pad_token("!");
    switch (arch) {
        case Architecture::SD1: return {{"text_encoder", clip}};
        case Architecture::SD2: return {{"text_encoder", open_clip}};
        case Architecture::SDXL: return {{"text_encoder", clip}, {"text_encoder_2", open_clip}};
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
    cmd->add_option("--steps", options.steps, "sampling steps, for prompt editing and alternation")
        ->capture_default_str()
        ->check(CLI::Range(1, 100000));
    return cmd;
}

int run_prompt(const PromptOptions& options) {
    // The prompt first: its errors need no tokenizer.
    const std::vector<WeightedText> parsed = parse_prompt_attention(options.text);
    const std::vector<ScheduledPrompt> schedule = prompt_schedule(options.text, options.steps);
    const std::vector<EncoderTokenizer> encoders = prompt_tokenizers(options.model);

    Json out;
    out["parsed"] = parsed_json(parsed);
    out["schedules"] = Json::array();
    for (const ScheduledPrompt& s : schedule) out["schedules"].push_back(Json::array({s.end_step, s.prompt}));
    // Each scheduled prompt is read for emphasis and cut into chunks on its own, as the webui encodes it.
    out["text_encoders"] = Json::array();
    for (const EncoderTokenizer& encoder : encoders) {
        Json e;
        e["name"] = encoder.name;
        e["pad_id"] = encoder.tokenizer.pad_id();
        e["schedules"] = Json::array();
        for (const ScheduledPrompt& s : schedule) {
            const ChunkedPrompt chunked = chunk_prompt(parse_prompt_attention(s.prompt), encoder.tokenizer);
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
