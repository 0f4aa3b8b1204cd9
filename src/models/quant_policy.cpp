#include "models/quant_policy.h"

#include <cstdlib>
#include <cstring>
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

}  // namespace

bool quantize_matrix(const std::string& name, const Shape& shape) {
    if (shape.empty() || shape[0] <= 0) return false;
    const int64_t numel = shape_numel(shape);
    if ((numel / shape[0]) % 32 != 0 || numel < kQuantMinValues) return false;
    static const bool all = [] {
        const char* v = std::getenv("KILN_QUANT_ALL");
        return v && std::strcmp(v, "1") == 0;
    }();
    return (all || !kept_by_name(name)) && !kept_by_request(name);
}

}  // namespace kiln
