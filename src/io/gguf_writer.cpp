#include "io/gguf_writer.h"

#include <set>

#include "io/gguf.h"
#include "io/safetensors_header.h"  // quote_name
#include "io/temp_file.h"

namespace kiln {

namespace {

constexpr uint64_t kAlignment = 32;  // GGUF's default: no general.alignment key needed

void put(std::string& out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(char((v >> (8 * i)) & 0xffu));
}
void put_string(std::string& out, const std::string& s) {
    put(out, s.size(), 8);
    out += s;
}
uint64_t padded(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

void write_gguf(const std::string& path, const std::vector<GgufWriteSpec>& tensors,
                const std::function<void(size_t index, const GgufBytes& write)>& produce,
                const std::map<std::string, std::string>& metadata,
                const std::function<void(size_t done, size_t total)>& progress) {
    std::string header = "GGUF";
    put(header, 3, 4);
    put(header, tensors.size(), 8);
    put(header, metadata.size(), 8);
    for (const auto& [key, value] : metadata) {
        put_string(header, key);
        put(header, 8, 4);  // a string value
        put_string(header, value);
    }
    std::set<std::string> seen;
    std::vector<uint64_t> sizes;
    uint64_t offset = 0;
    for (const GgufWriteSpec& t : tensors) {
        const std::string what = path + ": tensor " + quote_name(t.name);
        require(!t.name.empty() && seen.insert(t.name).second, ErrorKind::InvalidArgument,
                what + (t.name.empty() ? ": an empty name" : " given twice"));
        require(t.shape.size() <= 4, ErrorKind::InvalidArgument, what + ": GGUF holds at most 4 dimensions");
        const int64_t block = dtype_block_values(t.dtype), inner = t.shape.empty() ? 1 : t.shape.back();
        require(block == 0 || inner % block == 0, ErrorKind::InvalidArgument,
                what + " cannot be " + dtype_name(t.dtype) + ": its innermost dimension " + std::to_string(inner) +
                    " is not whole blocks of " + std::to_string(block));
        put_string(header, t.name);
        put(header, t.shape.size(), 4);
        for (size_t d = t.shape.size(); d-- > 0;) put(header, uint64_t(t.shape[d]), 8);
        put(header, ggml_type_code(t.dtype), 4);
        put(header, offset, 8);
        sizes.push_back(uint64_t(dtype_storage_bytes(t.dtype, shape_numel(t.shape))));
        offset += padded(sizes.back());
    }
    header.resize(padded(header.size()), '\0');

    TempFile out(path);
    out.write(header.data(), header.size());
    const std::string zeros(kAlignment, '\0');
    for (size_t i = 0; i < tensors.size(); ++i) {
        uint64_t written = 0;
        produce(i, [&](const void* data, uint64_t size) {
            require(written + size <= sizes[i], ErrorKind::InvalidArgument,
                    path + ": more bytes than tensor " + quote_name(tensors[i].name) + " holds");
            out.write(data, size_t(size));
            written += size;
        });
        require(written == sizes[i], ErrorKind::InvalidArgument,
                path + ": tensor " + quote_name(tensors[i].name) + " got " + std::to_string(written) + " of its " +
                    std::to_string(sizes[i]) + " bytes");
        out.write(zeros.data(), size_t(padded(written) - written));
        if (progress) progress(i + 1, tensors.size());
    }
    out.commit();
}

}  // namespace kiln
