// SHA-256 of files: the checkpoint hash that AUTOMATIC1111 writes as "Model hash".
#pragma once
#include <string>

namespace kiln {

// Lowercase hex SHA-256 of the file's bytes, read in fixed-size blocks (checkpoints are gigabytes).
// Throws kiln::Error(IO) naming the file when it cannot be opened or read.
std::string sha256_file_hex(const std::string& path);

// The first 10 hex digits of sha256_file_hex: A1111's "Model hash" (its "short hash").
std::string model_hash(const std::string& path);

}  // namespace kiln
