#include "models/lora/lora_source.h"

#include <cmath>

#include "kiln/error.h"

namespace kiln {

namespace {

std::string underscored(std::string s) {
    for (char& c : s)
        if (c == '.') c = '_';
    return s;
}

bool strip_suffix(std::string& s, const std::string& suffix) {
    if (s.size() < suffix.size() || s.compare(s.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
    s.resize(s.size() - suffix.size());
    return true;
}

}  // namespace

std::map<std::string, std::vector<LoraChange>> match_lora_modules(
    const WeightSource& source, LoraComponent component, std::vector<LoadedLora>& loras,
    const std::function<std::string(const std::string&)>& other_name) {
    if (loras.empty()) return {};
    // Every weight's module path as A1111 writes it ('_' for '.'), and its LDM alias where there is one.
    std::map<std::string, std::string> by_path;
    for (const std::string& name : source.names()) {
        std::string module = name;
        if (!strip_suffix(module, ".weight")) continue;
        by_path.emplace(underscored(module), name);
        if (other_name) {
            std::string alias = other_name(name);
            if (!alias.empty() && strip_suffix(alias, ".weight")) by_path.emplace(underscored(alias), name);
        }
    }
    std::map<std::string, std::vector<LoraChange>> changes;
    for (LoadedLora& lora : loras) {
        const double multiplier =
            component == LoraComponent::UNet ? lora.application.unet_multiplier : lora.application.te_multiplier;
        for (size_t i = 0; i < lora.file.modules.size(); ++i) {
            const LoraModule& m = lora.file.modules[i];
            if (m.component != component) continue;
            auto it = by_path.find(m.path);
            if (it == by_path.end()) continue;
            lora.matched[i] = true;
            changes[it->second].push_back({&m, multiplier * m.scale, lora.application.name});
        }
    }
    return changes;
}

LoraSource::LoraSource(const WeightSource& inner, std::map<std::string, std::vector<LoraChange>> changes)
    : inner_(inner), changes_(std::move(changes)) {
    weights_dtype = inner.weights_dtype;
    device = inner.device;
    device_dtype = inner.device_dtype;
    offload_weights = inner.offload_weights;
}

Tensor LoraSource::merged(const std::string& name, Tensor base) const {
    require(!is_block_quantized(base.dtype()), ErrorKind::Unsupported,
            "LoRA on " + inner_.display_name(name) + " in " + inner_.describe() + ", which the file stores as " +
                dtype_name(base.dtype()) + " blocks: kiln merges LoRA into fp16/fp32 weights only (use the "
                "unquantized checkpoint, with --weights q8_0 to quantize after the merge)");
    Tensor w = base.to_f32();
    float* p = w.data();
    for (const LoraChange& c : changes_.at(name)) {
        const LoraModule& m = *c.module;
        require(w.rank() >= 1 && w.dim(0) == m.out_features && w.numel() == m.out_features * m.in_numel,
                ErrorKind::InvalidModel,
                "LoRA '" + c.lora_name + "': module '" + m.key + "' makes a change of " + std::to_string(m.out_features) +
                    " x " + std::to_string(m.in_numel) + " values, but " + inner_.display_name(name) + " has shape " +
                    shape_str(w.shape()) + " (a LoRA for another model?)");
        const Tensor d = lora_delta(m);
        const float factor = static_cast<float>(c.factor);
        const float* dp = d.data();
        for (int64_t i = 0; i < w.numel(); ++i) p[i] += factor * dp[i];
    }
    for (int64_t i = 0; i < w.numel(); ++i)
        if (!std::isfinite(p[i]))  // (the message built only then: this loop sees every weight)
            fail(ErrorKind::InvalidArgument, "LoRA makes " + inner_.display_name(name) + " infinite (a weight too large?)");
    // Kept in float32 whatever the file's precision: diffusers (and kiln, whose 16-bit weights compute exactly
    // as their float32 copies) merge into float32 weights, and rounding the merged weight back to fp16 moved the
    // fixtures' latents by up to 4e-4 of their scale. --weights still converts it afterwards (WeightReader).
    return w;
}

Tensor LoraSource::load(const std::string& name) const {
    return changes_.count(name) ? merged(name, inner_.load(name)) : inner_.load(name);
}
Tensor LoraSource::load_expecting(const std::string& name, const Shape& expected) const {
    return changes_.count(name) ? merged(name, inner_.load_expecting(name, expected)) : inner_.load_expecting(name, expected);
}
// A changed matrix is read as a copy (never a view of the file, which stays as it is) and merged into.
Tensor LoraSource::load_matrix(const std::string& name, const Shape* expected) const {
    return changes_.count(name) ? merged(name, inner_.load_matrix_copied(name, expected)) : inner_.load_matrix(name, expected);
}
Tensor LoraSource::load_matrix_copied(const std::string& name, const Shape* expected) const {
    return changes_.count(name) ? merged(name, inner_.load_matrix_copied(name, expected))
                                : inner_.load_matrix_copied(name, expected);
}

}  // namespace kiln
