#include "pipeline/lora_memory.h"

#include <map>

#include "io/safetensors.h"
#include "models/lora/lora_file.h"
#include "models/unet/unet_config.h"
#include "pipeline/memory_plan.h"

namespace kiln {

namespace {

using Where = std::pair<LoraComponent, std::string>;  // component, LoRA path

// Each module's change in values (the changed weight's), from the factors' shapes as read_lora_file reads them.
std::map<Where, int64_t> module_values(const std::string& path) {
    const SafetensorsFile file = SafetensorsFile::open(path);
    std::map<std::string, std::pair<LoraKeyParts, std::map<std::string, Shape>>> modules;
    for (const std::string& name : file.names())
        if (const std::optional<LoraKeyParts> k = lora_key_parts(name))
            modules[k->module].first = *k, modules[k->module].second[k->part] = file.info(name).shape;
    std::map<Where, int64_t> out;
    for (const auto& [name, m] : modules) {
        const auto& parts = m.second;
        auto has = [&](const std::string& p) { return parts.count(p) && !parts.at(p).empty(); };
        auto rows = [&](const std::string& p) { return parts.at(p)[0]; };
        auto cols = [&](const std::string& p) { return shape_numel(Shape(parts.at(p).begin() + 1, parts.at(p).end())); };
        int64_t r = 1, c = 1;
        if (has("down") && has("up")) r = rows("up"), c = cols("down");
        else if (has("hada_w1_a") && has("hada_w1_b")) r = rows("hada_w1_a"), c = cols("hada_w1_b");
        else
            for (const std::string w : {"lokr_w1", "lokr_w2"}) {  // kron(w1, w2), each whole or a product
                if (has(w)) r *= rows(w), c *= cols(w);
                else if (has(w + "_a") && has(w + "_b")) r *= rows(w + "_a"), c *= cols(w + "_b");
                else r = 0;  // refused at load
            }
        if (r > 0) out[{m.first.component, m.first.path}] = r * c;
    }
    return out;
}

std::string module_path(std::string name) {  // "a.b.weight" -> "a_b" (as LoRA files name modules)
    name.resize(name.size() > 7 ? name.size() - 7 : 0);
    for (char& c : name) c = c == '.' ? '_' : c;
    return name;
}

}  // namespace

std::string LoraMergeEstimate::describe() const {
    return "LoRA merges (from the files' headers): " + std::to_string(modules) + " weights, +" + format_mib(merged_bytes) +
           " of copies, -" + format_mib(text_pages) + " and -" + format_mib(unet_pages) + " of text and UNet pages";
}

LoraMergeEstimate estimate_lora_merge(const StableDiffusionModel& model, const std::vector<LoraApplication>& loras) {
    std::map<LoraComponent, std::map<std::string, std::pair<std::string, int64_t>>> views;  // path -> name, bytes
    auto add_views = [&](LoraComponent c, const WeightPages& pages, const UNetConfig* unet) {
        for (const WeightPages::Range& r : pages.ranges()) {
            views[c].emplace(module_path(r.name), std::pair(r.name, r.bytes));
            if (unet) views[c].emplace(module_path(unet_ldm_name(r.name, *unet, "")), std::pair(r.name, r.bytes));
        }
    };
    for (size_t i = 0; i < model.text_encoders.size(); ++i)
        add_views(i ? LoraComponent::TextEncoder2 : LoraComponent::TextEncoder, model.text_encoders[i].model.pages(), 0);
    if (model.unet) add_views(LoraComponent::UNet, model.unet->pages(), &model.unet->config());
    std::map<Where, std::pair<int64_t, int64_t>> merged;  // each weight once (by its view's name) -> values, view bytes
    for (const LoraApplication& lora : loras)
        for (const auto& [where, values] : module_values(lora.path)) {
            if (!views.count(where.first)) continue;  // a component the model lacks: skipped at load
            const auto v = views[where.first].find(where.second);
            if (v == views[where.first].end()) merged.emplace(where, std::pair(values, 0));
            else merged.emplace(Where(where.first, v->second.first), std::pair(values, v->second.second));
        }
    LoraMergeEstimate e;
    e.modules = static_cast<int>(merged.size());
    if (!model.device.is_cpu()) return e;
    int64_t view_values = 0, view_bytes = 0;  // the file's bytes a value, for the stacks (else 2: fp16)
    for (const auto& [key, m] : merged)
        if (m.second > 0) view_values += m.first, view_bytes += m.second;
    const double stored = view_values > 0 ? double(view_bytes) / double(view_values) : 2.0;
    for (const auto& [key, m] : merged) {
        if (m.second > 0) (key.first == LoraComponent::UNet ? e.unet_pages : e.text_pages) += m.second;
        e.merged_bytes += m.second > 0 ? 4 * m.first : static_cast<int64_t>(double(m.first) * (4.0 - stored));
    }
    return e;
}

}  // namespace kiln
