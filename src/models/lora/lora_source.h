// LoRA merged into a component's weights as they are read: W' = W + multiplier x scale x delta, computed and
// kept in float32, as diffusers' fuse_lora on its float32 pipeline (then quantized, converted by --weights or
// moved to a GPU as any weight is). The merged weight is a tensor of its own: the mapped file is never written.
// docs/LORA.md.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/lora/lora_file.h"
#include "models/weight_source.h"

namespace kiln {

// One LoRA file as a generation asks for it: "<lora:name:te:unet>" in a prompt, or --lora FILE:WEIGHT.
struct LoraApplication {
    std::string path;             // the .safetensors file
    std::string name;             // as the prompt names it (PNG parameters, messages)
    double te_multiplier = 1.0;   // applied to the text encoders' modules
    double unet_multiplier = 1.0; // and to the UNet's (A1111: the second number, else the first)
};

// A read LoRA file with what it is applied with.
struct LoadedLora {
    LoraApplication application;
    LoraFile file;
    std::vector<bool> matched;  // per module: whether a component of the model took it
};

// The changes for one component's weights, by the component's internal tensor name.
struct LoraChange {
    const LoraModule* module;
    double factor;  // multiplier x scale
    std::string lora_name;
};

// Finds, for every module of `loras` meant for `component`, the tensor of `source` it changes: the
// internal name with '_' for '.' (A1111's rule), or the alias `other_name` gives for an internal name (the
// UNet's original LDM names, "input_blocks_1_1_proj_in"). Marks what matched in each LoadedLora.
std::map<std::string, std::vector<LoraChange>> match_lora_modules(
    const WeightSource& source, LoraComponent component, std::vector<LoadedLora>& loras,
    const std::function<std::string(const std::string&)>& other_name = nullptr);

// `inner` with `changes` merged into the tensors they name. Shares inner's settings (weights_dtype, device).
class LoraSource : public WeightSource {
public:
    LoraSource(const WeightSource& inner, std::map<std::string, std::vector<LoraChange>> changes);
    bool has(const std::string& name) const override { return inner_.has(name); }
    Tensor load(const std::string& name) const override;
    Tensor load_expecting(const std::string& name, const Shape& expected) const override;
    Tensor load_matrix(const std::string& name, const Shape* expected) const override;
    Tensor load_matrix_copied(const std::string& name, const Shape* expected) const override;
    std::vector<std::string> names() const override { return inner_.names(); }
    std::string describe() const override { return inner_.describe(); }
    std::string display_name(const std::string& name) const override { return inner_.display_name(name); }
    bool views_are_file_pages() const override { return inner_.views_are_file_pages(); }

private:
    Tensor merged(const std::string& name, Tensor base) const;

    const WeightSource& inner_;
    std::map<std::string, std::vector<LoraChange>> changes_;
};

}  // namespace kiln
