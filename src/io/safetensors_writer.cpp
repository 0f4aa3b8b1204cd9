// write_safetensors: builds the header, then streams each tensor through a bounded conversion
// buffer into a temporary file beside the target, which is renamed over the target at the end.

#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/dtype_convert.h"
#include "io/safetensors.h"
#include "io/temp_file.h"
#include "kiln/error.h"

namespace kiln {

namespace {

using nlohmann::json;

constexpr size_t kChunkElements = size_t{1} << 20;  // conversion buffer: 4 MB of F32 at most

void check_request(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors, DType dtype) {
    require(dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16, ErrorKind::Unsupported,
            path + ": cannot write " + dtype_name(dtype) + " tensors (only F32, F16 and BF16)");
    std::set<std::string> seen;
    for (const auto& [name, tensor] : tensors) {
        require(!name.empty(), ErrorKind::InvalidArgument, path + ": a tensor has an empty name");
        require(name != "__metadata__", ErrorKind::InvalidArgument,
                path + ": '__metadata__' is reserved and cannot name a tensor");
        require(seen.insert(name).second, ErrorKind::InvalidArgument,
                path + ": tensor " + quote_name(name) + " given twice");
    }
}

std::string build_header(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                         DType dtype, const std::map<std::string, std::string>& metadata) {
    json header = json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    uint64_t offset = 0;
    for (const auto& [name, tensor] : tensors) {
        uint64_t nbytes = static_cast<uint64_t>(tensor.numel()) * dtype_size(dtype);
        header[name] = {{"dtype", dtype_name(dtype)}, {"shape", tensor.shape()}, {"data_offsets", {offset, offset + nbytes}}};
        offset += nbytes;
    }
    std::string text;
    try {
        text = header.dump();
    } catch (const json::exception& e) {  // names or metadata that are not valid UTF-8
        fail(ErrorKind::InvalidArgument, path + ": cannot write header (" + one_line(e.what(), 300) + ")");
    }
    // Space padding (allowed trailing JSON whitespace) aligns the data area for readers that map it.
    text.append((8 - (8 + text.size()) % 8) % 8, ' ');
    return text;
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       DType dtype, const std::map<std::string, std::string>& metadata) {
    check_request(path, tensors, dtype);
    const std::string header = build_header(path, tensors, dtype, metadata);

    TempFile out(path);
    uint8_t length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
    out.write(length, 8);
    out.write(header.data(), header.size());

    const size_t width = dtype_size(dtype);
    std::vector<uint8_t> buffer;
    for (const auto& [name, tensor] : tensors) {
        const size_t n = static_cast<size_t>(tensor.numel());
        if (dtype == DType::F32) {  // already in file form
            if (n > 0) out.write(tensor.data(), n * 4);
            continue;
        }
        buffer.resize(std::min(n, kChunkElements) * width);
        for (size_t begin = 0; begin < n; begin += kChunkElements) {
            size_t count = std::min(kChunkElements, n - begin);
            encode_from_float(dtype, tensor.data() + begin, buffer.data(), count);
            out.write(buffer.data(), count * width);
        }
    }
    out.commit();
}

}  // namespace kiln
