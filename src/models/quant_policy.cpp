#include "models/quant_policy.h"

#include <cstdlib>
#include <cstring>

namespace kiln {

namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The layers that stay 16-bit by name (docs/QUANT.md, "Which layers stay 16-bit").
bool kept_by_name(const std::string& name) {
    return name.rfind("conv_in.", 0) == 0 || name.rfind("conv_out.", 0) == 0 ||  // UNet's (and the VAE decoder's
           contains(name, ".conv_in.") || contains(name, ".conv_out.") ||      // and encoder's) first/last
           contains(name, "time_embedding") || contains(name, "add_embedding") || contains(name, "embeddings.");
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
    return all || !kept_by_name(name);
}

}  // namespace kiln
