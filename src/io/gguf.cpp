#include "io/gguf.h"

#include <climits>
#include <cstring>
#include <optional>
#include <vector>

#include "core/dtype.h"
#include "kiln/error.h"

namespace kiln {

namespace {

// ggml's tensor type codes (docs/gguf.md, enum ggml_type), the ones kiln reads as DTypes.
struct TypeEntry {
    uint32_t code;
    const char* name;
    std::optional<DType> dtype;
};
const TypeEntry kTypes[] = {
    {0, "F32", DType::F32},        {1, "F16", DType::F16},        {2, "Q4_0", DType::Q4_0},
    {3, "Q4_1", DType::Q4_1},      {6, "Q5_0", DType::Q5_0},      {7, "Q5_1", DType::Q5_1},
    {8, "Q8_0", DType::Q8_0},      {9, "Q8_1", {}},               {10, "Q2_K", DType::Q2_K},
    {11, "Q3_K", DType::Q3_K},     {12, "Q4_K", DType::Q4_K},     {13, "Q5_K", DType::Q5_K},
    {14, "Q6_K", DType::Q6_K},     {15, "Q8_K", {}},              {16, "IQ2_XXS", {}},
    {17, "IQ2_XS", {}},            {18, "IQ3_XXS", {}},           {19, "IQ1_S", {}},
    {20, "IQ4_NL", {}},            {21, "IQ3_S", {}},             {22, "IQ2_S", {}},
    {23, "IQ4_XS", {}},            {24, "I8", DType::I8},         {25, "I16", DType::I16},
    {26, "I32", DType::I32},       {27, "I64", DType::I64},       {28, "F64", DType::F64},
    {29, "IQ1_M", {}},             {30, "BF16", DType::BF16},     {34, "TQ1_0", {}},
    {35, "TQ2_0", {}},             {39, "MXFP4", {}},
};

const TypeEntry* find_type(uint32_t code) {
    for (const TypeEntry& e : kTypes)
        if (e.code == code) return &e;
    return nullptr;
}

// Metadata value types (docs/gguf.md, enum gguf_metadata_value_type) and their sizes; 0 for string/array.
constexpr uint32_t kString = 8, kArray = 9, kBool = 7;
const char* const kValueTypeNames[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32", "float32",
                                       "bool",  "string", "array",  "uint64", "int64",  "float64"};
constexpr uint64_t kValueSizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
constexpr uint32_t kValueTypes = 13;
constexpr int kMaxArrayDepth = 8;   // nested arrays deeper than any writer makes: a damaged file
constexpr uint32_t kMaxDims = 4;    // GGML_MAX_DIMS

// Reads little-endian fields with every read checked against the end of the file.
class Cursor {
public:
    Cursor(const uint8_t* data, uint64_t size, const std::string& path) : data_(data), size_(size), path_(path) {}
    uint64_t pos() const { return pos_; }
    uint64_t left() const { return size_ - pos_; }

    [[noreturn]] void truncated(const std::string& what) const {
        fail(ErrorKind::InvalidModel, path_ + ": truncated GGUF file: " + what + " at byte " + std::to_string(pos_) +
                                          " runs past its end (" + std::to_string(size_) + " bytes)");
    }
    const uint8_t* take(uint64_t n, const std::string& what) {
        if (n > left()) truncated(what);
        const uint8_t* p = data_ + pos_;
        pos_ += n;
        return p;
    }
    uint64_t uint(int bytes, const std::string& what) {
        const uint8_t* p = take(uint64_t(bytes), what);
        uint64_t v = 0;
        for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
        return v;
    }
    uint32_t u32(const std::string& what) { return uint32_t(uint(4, what)); }
    uint64_t u64(const std::string& what) { return uint(8, what); }
    std::string string(const std::string& what) {
        const uint64_t n = u64(what + " length");
        const uint8_t* p = take(n, what);
        return std::string(reinterpret_cast<const char*>(p), size_t(n));
    }

private:
    const uint8_t* data_;
    uint64_t size_, pos_ = 0;
    const std::string& path_;
};

[[noreturn]] void fail_file(const std::string& path, const std::string& problem) {
    fail(ErrorKind::InvalidModel, path + ": " + problem);
}

std::string scalar_text(uint32_t type, const uint8_t* p, GgufValue& out) {
    uint64_t raw = 0;
    for (int i = int(kValueSizes[type]) - 1; i >= 0; --i) raw = (raw << 8) | p[i];
    switch (type) {
        case 0: case 2: case 4: case 10: out.is_unsigned = true; out.number = raw; return std::to_string(raw);
        case 1: return std::to_string(int8_t(raw));
        case 3: return std::to_string(int16_t(raw));
        case 5: return std::to_string(int32_t(raw));
        case 11: return std::to_string(int64_t(raw));
        case 6: {
            float f;
            const uint32_t bits = uint32_t(raw);
            std::memcpy(&f, &bits, 4);
            return std::to_string(f);
        }
        case 12: {
            double d;
            std::memcpy(&d, &raw, 8);
            return std::to_string(d);
        }
    }
    return "";
}

// Reads (and checks) one value of `type`; fills `out` at the top level only.
void read_value(Cursor& c, uint32_t type, const std::string& key, int depth, GgufValue* out, const std::string& path) {
    if (type >= kValueTypes)
        fail_file(path, "metadata " + quote_name(key) + " has unknown value type " + std::to_string(type));
    if (type == kString) {
        std::string s = c.string("metadata " + quote_name(key) + " string");
        if (out) out->text = std::move(s);
        return;
    }
    if (type == kArray) {
        if (depth >= kMaxArrayDepth)
            fail_file(path, "metadata " + quote_name(key) + " nests arrays more than " + std::to_string(kMaxArrayDepth) +
                                " deep");
        const uint32_t elem = c.u32("metadata " + quote_name(key) + " array type");
        const uint64_t count = c.u64("metadata " + quote_name(key) + " array length");
        if (elem >= kValueTypes)
            fail_file(path, "metadata " + quote_name(key) + " is an array of unknown value type " + std::to_string(elem));
        // Every element takes at least one byte (strings 8, arrays 12): a count beyond the bytes left is a
        // damaged file, found before looping over it.
        const uint64_t least = elem == kString ? 8 : elem == kArray ? 12 : kValueSizes[elem];
        if (count > c.left() / least) c.truncated("metadata " + quote_name(key) + " array of " + std::to_string(count));
        if (kValueSizes[elem] != 0 && elem != kBool) {
            c.take(count * kValueSizes[elem], "metadata " + quote_name(key) + " array");
        } else {
            for (uint64_t i = 0; i < count; ++i) read_value(c, elem, key, depth + 1, nullptr, path);
        }
        if (out) {
            out->count = count;
            out->text = "[" + std::to_string(count) + " x " + kValueTypeNames[elem] + "]";
        }
        return;
    }
    const uint8_t* p = c.take(kValueSizes[type], "metadata " + quote_name(key) + " value");
    if (type == kBool && *p > 1)
        fail_file(path, "metadata " + quote_name(key) + " is a bool of value " + std::to_string(*p) + " (0 or 1 allowed)");
    if (out) {
        GgufValue v;
        v.type = type;
        v.text = type == kBool ? (*p ? "true" : "false") : scalar_text(type, p, v);
        *out = std::move(v);
        out->type = type;
    }
}

}  // namespace

bool is_gguf(const uint8_t* file, uint64_t size) { return size >= 4 && std::memcmp(file, "GGUF", 4) == 0; }

std::string ggml_type_name(uint32_t type) {
    const TypeEntry* e = find_type(type);
    return e ? e->name : "type " + std::to_string(type);
}

uint32_t ggml_type_code(DType dtype) {
    for (const TypeEntry& e : kTypes)
        if (e.dtype == dtype) return e.code;
    fail(ErrorKind::Unsupported, std::string("GGUF has no type for ") + dtype_name(dtype) + " tensors");
}

GgufLayout parse_gguf_layout(const uint8_t* file, uint64_t size, const std::string& path) {
    require(is_gguf(file, size), ErrorKind::InvalidModel, path + ": not a GGUF file (no 'GGUF' magic)");
    Cursor c(file, size, path);
    c.take(4, "magic");
    GgufLayout layout;
    layout.version = c.u32("version");
    // A big-endian file's version reads byte-swapped here (3 becomes 0x03000000).
    if (layout.version >= 0x10000u)
        fail(ErrorKind::Unsupported, path + ": a big-endian GGUF file (version field " + std::to_string(layout.version) +
                                         "); kiln reads little-endian GGUF");
    if (layout.version == 1)
        fail(ErrorKind::Unsupported, path + ": GGUF version 1 (32-bit counts) is not read; convert it again");
    require(layout.version == 2 || layout.version == 3, ErrorKind::Unsupported,
            path + ": GGUF version " + std::to_string(layout.version) + " (kiln reads versions 2 and 3)");
    const uint64_t tensor_count = c.u64("tensor count"), kv_count = c.u64("metadata count");
    // Each metadata entry takes at least 13 bytes (key length, type, a one-byte value) and each tensor info
    // 24 (name length, n_dims, type, offset): counts beyond the file are damage, not a reason to loop.
    if (kv_count > c.left() / 13) c.truncated(std::to_string(kv_count) + " metadata entries");
    if (tensor_count > c.left() / 24) c.truncated(std::to_string(tensor_count) + " tensor infos");

    for (uint64_t i = 0; i < kv_count; ++i) {
        std::string key = c.string("metadata key");
        if (key.empty()) fail_file(path, "metadata entry " + std::to_string(i) + " has an empty key");
        if (layout.metadata.count(key)) fail_file(path, "metadata " + quote_name(key) + " appears twice");
        const uint32_t type = c.u32("metadata " + quote_name(key) + " type");
        GgufValue value;
        read_value(c, type, key, 0, &value, path);
        value.type = type;
        layout.metadata.emplace(std::move(key), std::move(value));
    }
    if (auto it = layout.metadata.find("general.alignment"); it != layout.metadata.end()) {
        const GgufValue& a = it->second;
        if (a.type != 4) fail_file(path, "general.alignment must be a uint32, is of type " + std::to_string(a.type));
        if (a.number == 0 || (a.number & (a.number - 1)) != 0)
            fail_file(path, "general.alignment " + a.text + " is not a power of two");
        layout.alignment = a.number;
    }

    struct Raw {
        std::string name;
        Shape shape;
        DType dtype;
        uint64_t offset, nbytes;
    };
    std::vector<Raw> raws;
    for (uint64_t i = 0; i < tensor_count; ++i) {
        std::string name = c.string("tensor name");
        if (name.empty()) fail_file(path, "tensor info " + std::to_string(i) + " has an empty name");
        if (layout.tensors.count(name)) fail_file(path, "tensor " + quote_name(name) + " appears twice");
        const std::string what = "tensor " + quote_name(name);
        const uint32_t n_dims = c.u32(what + " rank");
        if (n_dims > kMaxDims)
            fail_file(path, what + " has " + std::to_string(n_dims) + " dimensions (at most " + std::to_string(kMaxDims) + ")");
        Shape shape(n_dims);
        uint64_t numel = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            const uint64_t ne = c.u64(what + " dimension");
            if (ne > uint64_t(INT64_MAX) || __builtin_mul_overflow(numel, ne, &numel) || numel > uint64_t(INT64_MAX))
                fail_file(path, what + " has a shape too large to exist");
            shape[n_dims - 1 - d] = int64_t(ne);  // GGUF lists the innermost dimension first
        }
        const uint32_t type = c.u32(what + " type");
        const uint64_t offset = c.u64(what + " offset");
        const TypeEntry* entry = find_type(type);
        if (!entry)
            fail(ErrorKind::Unsupported, path + ": " + what + " has ggml type " + std::to_string(type) +
                                             ", which kiln does not know");
        if (!entry->dtype)
            fail(ErrorKind::Unsupported, path + ": " + what + " is " + entry->name + " (ggml type " +
                                             std::to_string(type) + "); kiln reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K");
        const DType dtype = *entry->dtype;
        uint64_t nbytes;
        if (is_block_quantized(dtype)) {
            // ggml quantizes along the innermost dimension, in whole blocks.
            const uint64_t inner = n_dims ? uint64_t(shape.back()) : 1, block = uint64_t(dtype_block_values(dtype));
            if (inner % block != 0)
                fail_file(path, what + " is " + entry->name + " but its innermost dimension " + std::to_string(inner) +
                                    " is not a multiple of the " + std::to_string(block) + "-value block");
            nbytes = numel / block * dtype_block_bytes(dtype);
        } else if (__builtin_mul_overflow(numel, uint64_t(dtype_size(dtype)), &nbytes)) {
            fail_file(path, what + " has a shape too large to exist");
        }
        if (offset % layout.alignment != 0)
            fail_file(path, what + " data offset " + std::to_string(offset) + " is not a multiple of the alignment " +
                                std::to_string(layout.alignment));
        raws.push_back(Raw{name, std::move(shape), dtype, offset, nbytes});
        layout.tensors.emplace(std::move(name), TensorInfo{});
    }

    // The data section starts at the next multiple of the alignment.
    const uint64_t end_of_infos = c.pos();
    const uint64_t pad = (layout.alignment - end_of_infos % layout.alignment) % layout.alignment;
    layout.data_offset = end_of_infos + pad;
    if (!raws.empty() && layout.data_offset > size)
        fail_file(path, "truncated GGUF file: the data section would start at byte " + std::to_string(layout.data_offset) +
                            ", past its end (" + std::to_string(size) + " bytes)");
    const uint64_t data_size = layout.data_offset <= size ? size - layout.data_offset : 0;
    for (Raw& r : raws) {
        if (r.offset > data_size || r.nbytes > data_size - r.offset)
            fail_file(path, "truncated GGUF file: tensor " + quote_name(r.name) + " needs bytes [" +
                                std::to_string(r.offset) + ", " + std::to_string(r.offset) + " + " +
                                std::to_string(r.nbytes) + ") of a data section of " + std::to_string(data_size));
        layout.tensors[r.name] = TensorInfo{r.name, r.dtype, std::move(r.shape), layout.data_offset + r.offset, r.nbytes};
    }
    check_no_overlaps(layout.tensors, path);
    return layout;
}

}  // namespace kiln
