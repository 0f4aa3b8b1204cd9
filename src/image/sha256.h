// SHA-256 of files: the checkpoint hash that AUTOMATIC1111 writes as "Model hash".
#pragma once
#include <string>

namespace kiln {

// Lowercase hex SHA-256 of the file's bytes, read in fixed-size blocks (checkpoints are gigabytes).
// Throws kiln::Error(IO) naming the file when it cannot be opened or read.
std::string sha256_file_hex(const std::string& path);

// The first 10 hex digits of sha256_file_hex: A1111's "Model hash" (its "short hash").
std::string model_hash(const std::string& path);

// AUTOMATIC1111's hash of a LoRA .safetensors file ("Lora hashes" in its parameters): kohya's "addnet" hash,
// the SHA-256 of the bytes after the header (8-byte length + JSON), so that editing the metadata keeps it;
// its first 12 hex digits (modules/hashes.py addnet_hash_safetensors, extensions-builtin/Lora/network.py).
std::string lora_hash(const std::string& path);

}  // namespace kiln
