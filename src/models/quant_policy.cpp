#include "models/quant_policy.h"

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The layers that stay 16-bit by name (docs/QUANT.md, "Which layers stay 16-bit").
bool kept_by_name(const std::string& name) {
    return name.rfind("conv_in.", 0) == 0 || name.rfind("conv_out.", 0) == 0 ||  // UNet's (and the VAE decoder's
           contains(name, ".conv_in.") || contains(name, ".conv_out.") ||      // and encoder's) first/last
           contains(name, "time_embedding") || contains(name, "add_embedding") || contains(name, "embeddings.");
}

// KILN_QUANT_KEEP=a,b: also keep the matrices whose names contain a or b (for measuring which layers matter).
bool kept_by_request(const std::string& name) {
    static const std::vector<std::string> parts = [] {
        std::vector<std::string> out;
        const char* v = std::getenv("KILN_QUANT_KEEP");
        std::string s = v ? v : "";
        for (size_t at = 0; at <= s.size();) {
            const size_t comma = std::min(s.find(',', at), s.size());
            if (comma > at) out.push_back(s.substr(at, comma - at));
            at = comma + 1;
        }
        return out;
    }();
    for (const std::string& p : parts)
        if (name.find(p) != std::string::npos) return true;
    return false;
}

// KILN_QUANT_FALLBACK=q4_0|q4_1|q5_0|q5_1|q8_0: another 32-value format for the k-quants' fallback (for
// measuring the choice).
std::optional<DType> fallback_override() {
    static const std::optional<DType> v = []() -> std::optional<DType> {
        const char* e = std::getenv("KILN_QUANT_FALLBACK");
        const std::string s = e ? e : "";
        if (s == "q4_0") return DType::Q4_0;
        if (s == "q4_1") return DType::Q4_1;
        if (s == "q5_0") return DType::Q5_0;
        if (s == "q5_1") return DType::Q5_1;
        if (s == "q8_0") return DType::Q8_0;
        return std::nullopt;
    }();
    return v;
}

bool quant_all() {
    static const bool all = [] {
        const char* v = std::getenv("KILN_QUANT_ALL");
        return v && std::strcmp(v, "1") == 0;
    }();
    return all;
}

}  // namespace

bool quantize_matrix(const std::string& name, const Shape& shape) {
    if (shape.empty() || shape[0] <= 0) return false;
    const int64_t numel = shape_numel(shape);
    if ((numel / shape[0]) % 32 != 0 || numel < kQuantMinValues) return false;
    return (quant_all() || !kept_by_name(name)) && !kept_by_request(name);
}

std::optional<DType> quantized_dtype(const std::string& name, const Shape& shape, DType want, bool innermost_blocks) {
    if (!is_block_quantized(want) || !quantize_matrix(name, shape)) return std::nullopt;
    // At 4 bits or fewer the down/upsampling convolutions and the text encoder's layers stay 16-bit too
    // (docs/QUANT.md).
    const bool four_bits = want == DType::Q4_0 || want == DType::Q4_1 || want == DType::Q4_K || want == DType::Q3_K ||
                           want == DType::Q2_K;
    if (four_bits && !quant_all() && (contains(name, "samplers.") || name.rfind("text_model.", 0) == 0)) return std::nullopt;
    const int64_t row = shape_numel(shape) / shape[0], inner = shape.back();
    auto fits = [&](DType t) {
        const int64_t b = dtype_block_values(t);
        return row % b == 0 && (!innermost_blocks || inner % b == 0);
    };
    if (fits(want)) return want;
    const DType fallback = want == DType::Q4_K   ? fallback_override().value_or(DType::Q5_0)
                           : want == DType::Q5_K ? fallback_override().value_or(DType::Q5_1)
                           : want == DType::Q6_K ? fallback_override().value_or(DType::Q8_0)
                           : want == DType::Q3_K || want == DType::Q2_K ? fallback_override().value_or(DType::Q4_0)
                                                 : want;
    if (fallback != want && fits(fallback)) return fallback;
    return std::nullopt;
}

}  // namespace kiln
