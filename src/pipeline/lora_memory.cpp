#include "pipeline/lora_memory.h"

#include <map>
#include <set>

#include "io/safetensors.h"
#include "models/lora/lora_file.h"
#include "models/unet/unet_config.h"
#include "pipeline/memory_plan.h"

namespace kiln {

namespace {

// A module of a LoRA file as its header gives it: where it goes, and the values of the change it makes (those of
// the weight it changes: the merge refuses any other size).
struct ModuleHeader {
    LoraComponent component;
    std::string path;
    int64_t values = 0;
};

int64_t values_from(const Shape& s, size_t first) {
    int64_t n = 1;
    for (size_t i = first; i < s.size(); ++i) n *= s[i];
    return n;
}

// The change's [rows, values per row], as lora_file.cpp's make_module reads the parts (0 rows: a module the
// header cannot size, which read_lora_file refuses at load).
std::pair<int64_t, int64_t> change_shape(const std::map<std::string, Shape>& parts) {
    auto has = [&](const std::string& p) { return parts.count(p) > 0 && !parts.at(p).empty(); };
    auto rows = [&](const std::string& p) { return parts.at(p)[0]; };
    auto cols = [&](const std::string& p) { return values_from(parts.at(p), 1); };
    if (has("down") && has("up")) return {rows("up"), cols("down")};
    if (has("hada_w1_a") && has("hada_w1_b")) return {rows("hada_w1_a"), cols("hada_w1_b")};
    int64_t r = 1, c = 1;
    for (const std::string w : {"lokr_w1", "lokr_w2"}) {
        if (has(w)) r *= rows(w), c *= cols(w);
        else if (has(w + "_a") && has(w + "_b")) r *= rows(w + "_a"), c *= cols(w + "_b");
        else return {0, 0};
    }
    return {r, c};
}

std::vector<ModuleHeader> module_headers(const std::string& path) {
    const SafetensorsFile file = SafetensorsFile::open(path);
    std::map<std::string, std::pair<LoraKeyParts, std::map<std::string, Shape>>> modules;  // by the file's name
    for (const std::string& name : file.names())
        if (const std::optional<LoraKeyParts> k = lora_key_parts(name)) {
            auto& m = modules[k->module];
            m.first = *k;
            m.second[k->part] = file.info(name).shape;
        }
    std::vector<ModuleHeader> out;
    for (const auto& [name, m] : modules) {
        const auto [rows, cols] = change_shape(m.second);
        if (rows > 0) out.push_back({m.first.component, m.first.path, rows * cols});
    }
    return out;
}

std::string underscored_module(std::string name) {
    const std::string suffix = ".weight";
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
        return "";
    name.resize(name.size() - suffix.size());
    for (char& c : name)
        if (c == '.') c = '_';
    return name;
}

// A component's weights that are views of the mapped file, by module path as LoRA files write it (the UNet's also
// by its original LDM name), with their pages' bytes.
struct Views {
    std::map<std::string, std::pair<std::string, int64_t>> by_path;  // path -> (weight name, bytes)
    void add(const WeightPages& pages, const UNetConfig* unet) {
        for (const WeightPages::Range& r : pages.ranges()) {
            const std::string path = underscored_module(r.name);
            if (path.empty()) continue;
            by_path.emplace(path, std::pair(r.name, r.bytes));
            if (unet)
                if (const std::string alias = underscored_module(unet_ldm_name(r.name, *unet, "")); !alias.empty())
                    by_path.emplace(alias, std::pair(r.name, r.bytes));
        }
    }
};

}  // namespace

std::string LoraMergeEstimate::describe() const {
    return "LoRA merges (from the files' headers): " + std::to_string(modules) + " weights merged, " +
           format_mib(merged_bytes) + " of float32 copies held throughout, in place of " +
           format_mib(text_pages) + " of the text encoders' and " + format_mib(unet_pages) +
           " of the UNet's mapped weights";
}

LoraMergeEstimate estimate_lora_merge(const StableDiffusionModel& model, const std::vector<LoraApplication>& loras) {
    LoraMergeEstimate e;
    if (loras.empty()) return e;
    const bool cpu = model.device.is_cpu();
    std::map<LoraComponent, Views> views;
    std::set<LoraComponent> present;  // the components the model has
    for (size_t i = 0; i < model.text_encoders.size() && i < 2; ++i) {
        const LoraComponent c = i == 0 ? LoraComponent::TextEncoder : LoraComponent::TextEncoder2;
        present.insert(c);
        views[c].add(model.text_encoders[i].model.pages(), nullptr);
    }
    if (model.unet) {
        present.insert(LoraComponent::UNet);
        views[LoraComponent::UNet].add(model.unet->pages(), &model.unet->config());
    }
    // Each weight once, by the view's name where it is one (two namings of a module are one weight), else by path.
    struct Merged {
        LoraComponent component;
        int64_t values;
        int64_t view_bytes;  // 0: not a view
    };
    std::map<std::pair<LoraComponent, std::string>, Merged> merged;
    for (const LoraApplication& lora : loras)
        for (const ModuleHeader& m : module_headers(lora.path)) {
            if (!present.count(m.component)) continue;  // SDXL's second encoder on another model: skipped at load
            const auto& by_path = views[m.component].by_path;
            const auto view = by_path.find(m.path);
            const std::string key = view != by_path.end() ? view->second.first : m.path;
            merged.emplace(std::pair(m.component, key),
                           Merged{m.component, m.values, view != by_path.end() ? view->second.second : 0});
        }
    e.modules = static_cast<int>(merged.size());
    if (!cpu) return e;
    // The file's bytes a value, for the stacked matrices: as the views among the merged weights have them (a
    // checkpoint stores its matrices in one precision), else 2 (the 16-bit files users mostly have).
    int64_t view_values = 0, view_bytes = 0;
    for (const auto& [key, m] : merged)
        if (m.view_bytes > 0) view_values += m.values, view_bytes += m.view_bytes;
    const double stored = view_values > 0 ? double(view_bytes) / double(view_values) : 2.0;
    for (const auto& [key, m] : merged) {
        if (m.view_bytes > 0) {
            e.merged_bytes += 4 * m.values;
            (m.component == LoraComponent::UNet ? e.unet_pages : e.text_pages) += m.view_bytes;
        } else {
            e.merged_bytes += static_cast<int64_t>(double(m.values) * (4.0 - stored));
        }
    }
    return e;
}

}  // namespace kiln
