// Which LoRA files a generation merges: the prompt's "<lora:name:weight>" tags (AUTOMATIC1111's syntax), each
// found as name.safetensors in a LoRA folder, and files named directly (--lora FILE[:WEIGHT]). docs/LORA.md.
#pragma once
#include <string>
#include <vector>

#include "models/lora/lora_source.h"

namespace kiln {

// The LoRA tags of `prompt` (extra-network tags of kind lora or lyco), each resolved to `folder`/NAME.safetensors
// (or a file of that name in a subfolder, as the webui searches its folder). InvalidArgument for a tag when
// `folder` is empty, IO when no such file exists, InvalidArgument for a malformed tag.
std::vector<LoraApplication> loras_from_prompt(const std::string& prompt, const std::string& folder);

// "FILE" (weight 1) or "FILE:WEIGHT" (the text after the last ':' when it is a number; a path may hold ':').
// The name is the file's stem. IO when the file does not exist.
LoraApplication lora_from_argument(const std::string& argument);

}  // namespace kiln
