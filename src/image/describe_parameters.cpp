// `kiln info IMAGE.png`: what generation parameters a PNG carries, from whichever tool wrote them.
#include <nlohmann/json.hpp>

#include "image/infotext.h"
#include "image/png.h"
#include "kiln/error.h"

namespace kiln {
namespace {

using Json = nlohmann::ordered_json;  // keeps the nodes in the order the file lists them

// Continuation lines of multi-line values are indented under their label.
void add_field(std::string& out, const std::string& label, const std::string& value) {
    out += label + ": ";
    for (char c : value) {
        out += c;
        if (c == '\n') out += "  ";
    }
    out += '\n';
}

std::string describe_infotext(const std::string& text) {
    const GenerationParameters p = parse_infotext(text);
    std::string source = "AUTOMATIC1111-style parameters";
    for (const auto& [key, value] : p.params) {
        if (key != "Version") continue;
        if (value.find("stable-diffusion.cpp") != std::string::npos) source = "stable-diffusion.cpp parameters";
        else if (value.starts_with("kiln")) source = "kiln parameters";
    }
    std::string out;
    add_field(out, "Source", source);
    add_field(out, "Prompt", p.prompt);
    if (!p.negative_prompt.empty()) add_field(out, "Negative prompt", p.negative_prompt);
    for (const auto& [key, value] : p.params) add_field(out, key, value);
    if (p.params.empty()) out += "(no settings line found after the prompt)\n";
    return out;
}

// Scalars as text; links to other nodes ([node id, output index]) and anything else by kind.
// Deliberately no dump() of arbitrary values: it recurses, and the JSON comes from the file.
std::string scalar_text(const Json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number() || v.is_boolean()) return v.dump();
    if (v.is_array() && v.size() == 2 && (v[0].is_string() || v[0].is_number()))
        return "(from node " + scalar_text(v[0]) + ")";
    return "(not a plain value)";
}

std::string node_id_text(const std::string& id) { return id.empty() ? "" : " [" + id + "]"; }

// API-format graph (`prompt` chunk): {"id": {"class_type": ..., "inputs": {...}}, ...}
bool describe_comfy_prompt(const Json& graph, std::string& out) {
    if (!graph.is_object()) return false;
    bool any = false;
    for (const auto& [id, node] : graph.items()) {
        if (!node.is_object() || !node.contains("class_type") || !node["class_type"].is_string()) continue;
        const std::string type = node["class_type"].get<std::string>();
        static const Json kNoInputs = Json::object();
        // References, not copies: copying a deeply nested value from a hostile file would recurse.
        const Json& inputs = node.contains("inputs") && node["inputs"].is_object() ? node["inputs"] : kNoInputs;
        if (type.starts_with("CLIPTextEncode")) {
            for (const char* name : {"text", "text_g", "text_l"})
                if (inputs.contains(name)) add_field(out, "Text" + node_id_text(id) + " " + type + "." + name, scalar_text(inputs[name]));
            any = true;
        } else if (type == "KSampler" || type == "KSamplerAdvanced") {
            std::string settings;
            for (const char* name : {"seed", "noise_seed", "steps", "cfg", "sampler_name", "scheduler", "denoise"}) {
                if (!inputs.contains(name)) continue;
                if (!settings.empty()) settings += ", ";
                settings += std::string(name) + " " + scalar_text(inputs[name]);
            }
            add_field(out, type + node_id_text(id), settings);
            any = true;
        }
    }
    return any;
}

// UI-format graph (`workflow` chunk): {"nodes": [{"id", "type", "widgets_values": [...]}, ...]}.
// Widget values are positional; KSampler's are seed, control_after_generate, steps, cfg,
// sampler_name, scheduler, denoise (its input order in ComfyUI plus the frontend's seed control).
bool describe_comfy_workflow(const Json& workflow, std::string& out) {
    if (!workflow.is_object() || !workflow.contains("nodes") || !workflow["nodes"].is_array()) return false;
    bool any = false;
    for (const Json& node : workflow["nodes"]) {
        if (!node.is_object() || !node.contains("type") || !node["type"].is_string()) continue;
        const std::string type = node["type"].get<std::string>();
        static const Json kNoWidgets = Json::array();
        const Json& widgets =
            node.contains("widgets_values") && node["widgets_values"].is_array() ? node["widgets_values"] : kNoWidgets;
        const std::string id = node.contains("id") ? scalar_text(node["id"]) : "";
        if (type == "CLIPTextEncode" && !widgets.empty() && widgets[0].is_string()) {
            add_field(out, "Text" + node_id_text(id) + " " + type + ".text", widgets[0].get<std::string>());
            any = true;
        } else if (type == "KSampler" && widgets.size() >= 5) {
            add_field(out, type + node_id_text(id),
                      "seed " + scalar_text(widgets[0]) + ", steps " + scalar_text(widgets[2]) + ", cfg " +
                          scalar_text(widgets[3]) + ", sampler_name " + scalar_text(widgets[4]));
            any = true;
        }
    }
    return any;
}

std::string describe_comfyui(const std::string* prompt_json, const std::string* workflow_json) {
    std::string out;
    add_field(out, "Source", "ComfyUI workflow");
    const auto parse = [&](const std::string* text, const char* chunk) {
        if (!text) return Json();
        Json parsed = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
        if (parsed.is_discarded()) out += std::string("(the ") + chunk + " chunk is not valid JSON)\n";
        return parsed;
    };
    const Json prompt = parse(prompt_json, "prompt");
    const Json workflow = parse(workflow_json, "workflow");
    // The API-format graph holds the values actually used; the UI graph is the fallback.
    if (!describe_comfy_prompt(prompt, out) && !describe_comfy_workflow(workflow, out))
        out += "(no CLIPTextEncode or KSampler nodes found)\n";
    return out;
}

}  // namespace

std::string describe_png_parameters(const std::string& png_path) {
    const TextChunks chunks = read_png_text(png_path);
    const auto find = [&](const std::string& keyword) -> const std::string* {
        for (const auto& [key, text] : chunks)
            if (key == keyword) return &text;
        return nullptr;
    };
    if (const std::string* parameters = find("parameters")) return describe_infotext(*parameters);
    const std::string* prompt = find("prompt");
    const std::string* workflow = find("workflow");
    if (prompt || workflow) return describe_comfyui(prompt, workflow);
    fail(ErrorKind::InvalidArgument, "no generation parameters in " + png_path);
}

}  // namespace kiln
