// Hand-built GGUF bytes for the io tests, field by field, so that malformed files can be made precisely.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::test {

inline std::string le(uint64_t v, int bytes) {
    std::string s(size_t(bytes), '\0');
    for (int i = 0; i < bytes; ++i) s[size_t(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
    return s;
}
inline std::string gguf_str(const std::string& s) { return le(s.size(), 8) + s; }

struct GgufTensorSpec {
    std::string name;
    std::vector<uint64_t> ne;  // innermost first, as the file stores them
    uint32_t type;
    uint64_t offset;           // relative to the data section
};

// A GGUF file: header, the given metadata entries (already encoded: key, type, value), tensor infos, padding to
// `alignment`, then `data`.
inline std::string gguf_bytes(const std::vector<std::string>& kvs, const std::vector<GgufTensorSpec>& tensors,
                              const std::string& data, uint32_t version = 3, uint64_t alignment = 32) {
    std::string out = "GGUF" + le(version, 4) + le(tensors.size(), 8) + le(kvs.size(), 8);
    for (const std::string& kv : kvs) out += kv;
    for (const GgufTensorSpec& t : tensors) {
        out += gguf_str(t.name) + le(t.ne.size(), 4);
        for (uint64_t d : t.ne) out += le(d, 8);
        out += le(t.type, 4) + le(t.offset, 8);
    }
    out += std::string((alignment - out.size() % alignment) % alignment, '\0');
    return out + data;
}

// Metadata entries.
inline std::string kv_u32(const std::string& key, uint32_t v) { return gguf_str(key) + le(4, 4) + le(v, 4); }
inline std::string kv_string(const std::string& key, const std::string& v) {
    return gguf_str(key) + le(8, 4) + gguf_str(v);
}

}  // namespace kiln::test
