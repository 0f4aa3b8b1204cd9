// The generation-parameters text ("infotext") that AUTOMATIC1111's WebUI writes into the PNG
// `parameters` chunk, which other tools read and write too. Layout and reading rules:
// docs: /work/shared/A1111-PARAMETERS.md (mirrors create_infotext / parse_generation_parameters).
#pragma once
#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln {

struct GenerationParameters {
    std::string prompt, negative_prompt;
    // Key/value pairs in order of appearance, values unquoted ("Size" stays "512x768").
    std::vector<std::pair<std::string, std::string>> params;
};

// prompt, "Negative prompt: ..." (only when non-empty), then the "Key: value, ..." line; the whole
// text stripped. Values containing ',', '\n' or ':' are written as JSON strings (non-ASCII kept);
// a value equal to its key is written as the bare key, as the WebUI does. Throws
// kiln::Error(InvalidArgument) for an empty key or one containing ',', ':' or a newline.
std::string format_infotext(const GenerationParameters& parameters);

// Reads text written by the WebUI, kiln, stable-diffusion.cpp and similar tools: the last line is
// the parameter line when the WebUI's key/value pattern matches it at least 3 times, otherwise it
// belongs to the prompt. Prompt and negative-prompt lines are stripped; quoted values are decoded
// as JSON (kept verbatim if that fails). As in the WebUI, a key with an empty value is skipped and
// a repeated key keeps its first position with the last value. Never throws on any input.
GenerationParameters parse_infotext(const std::string& text);

// Numbers as Python's str() prints them: integers plainly ("7"), doubles as repr ("7.5", "7.0",
// "0.7", "1e-05"). Integers and doubles print differently, so pass the type the value has.
std::string format_number(int64_t value);
std::string format_number(double value);
template <std::integral T>
std::string format_number(T value) {
    if constexpr (std::is_unsigned_v<T>) return std::to_string(static_cast<unsigned long long>(value));
    else return format_number(static_cast<int64_t>(value));
}

// For `kiln info IMAGE.png`: a human-readable, multi-line description of the generation parameters
// stored in a PNG: the A1111/kiln/stable-diffusion.cpp `parameters` text (prompt, negative prompt,
// one "key: value" line each), or a ComfyUI workflow (`prompt`/`workflow` JSON chunks: the
// CLIPTextEncode texts and KSampler settings). Throws kiln::Error(InvalidArgument) "no generation
// parameters in FILE" when the PNG has none, and the errors of read_png_text for unreadable files.
std::string describe_png_parameters(const std::string& png_path);

}  // namespace kiln
