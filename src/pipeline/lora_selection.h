// Which LoRA files a generation merges: the prompt's "<lora:name:weight>" tags (AUTOMATIC1111's syntax), each
// found in a LoRA folder by file name or ss_output_name alias as the webui finds it, and files named directly
// (--lora FILE[:WEIGHT]). docs/LORA.md.
#pragma once
#include <string>
#include <vector>

#include "models/lora/lora_source.h"

namespace kiln {

// The LoRA tags of `prompt` (extra-network tags of kind lora or lyco), each resolved in `folder` and its
// subfolders as the webui's Lora extension resolves it (a .safetensors/.pt/.ckpt file's name, else a
// .safetensors file's ss_output_name; docs/LORA.md). The application's name is the tag's. InvalidArgument for a
// tag when `folder` is empty, IO when no file answers to the name, InvalidArgument for a malformed tag.
std::vector<LoraApplication> loras_from_prompt(const std::string& prompt, const std::string& folder);

// "FILE" (weight 1) or "FILE:WEIGHT" (the text after the last ':' when it is a number; a path may hold ':').
// The name is the file's stem. IO when the file does not exist.
LoraApplication lora_from_argument(const std::string& argument);

}  // namespace kiln
