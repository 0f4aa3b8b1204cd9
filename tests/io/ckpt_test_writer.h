// A test-side writer of PyTorch zip checkpoints, laid out as torch.save lays them out (checked against
// torch.load(weights_only=True) once, and against the reader on torch's own fixtures in ckpt_fixture_test):
// "<dir>/data.pkl" (protocol 2: a dict of _rebuild_tensor_v2 calls on persistent-id storages), then
// "<dir>/data/<i>" per tensor, each entry stored and its data 64-byte aligned, and a central directory.
// With zip64, every size and offset goes through ZIP64 fields and records, as torch writes files over 4 GiB.
// Tests use it for checkpoints too large to commit (whole fixture models) and for hand-made bad ones.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "io/safetensors.h"

namespace kiln::test {

struct CkptTensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::string bytes;  // the storage: numel * element size bytes
};

struct CkptOptions {
    // The dict of tensors goes under this key of the top-level dict: "state_dict" as training checkpoints have it
    // (with a 'global_step' beside it), "string_to_param" as AUTOMATIC1111's embeddings; "" for the bare dict.
    std::string nest = "state_dict";
    bool zip64 = false;
    std::string dir = "archive";
};

inline std::string ckpt_le(uint64_t v, int n) {
    std::string s(n, '\0');
    for (int i = 0; i < n; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    return s;
}

// Every tensor of a safetensors file, as it stores them.
inline std::vector<CkptTensor> ckpt_tensors(const SafetensorsFile& f) {
    std::vector<CkptTensor> out;
    for (const std::string& name : f.names()) {
        const TensorInfo& ti = f.info(name);
        out.push_back({name, ti.dtype, ti.shape, std::string(reinterpret_cast<const char*>(f.raw(name)), ti.nbytes)});
    }
    return out;
}

inline const char* ckpt_storage_class(DType d) {
    switch (d) {
        case DType::F64: return "DoubleStorage";
        case DType::F32: return "FloatStorage";
        case DType::F16: return "HalfStorage";
        case DType::BF16: return "BFloat16Storage";
        case DType::I64: return "LongStorage";
        case DType::I32: return "IntStorage";
        case DType::I16: return "ShortStorage";
        case DType::I8: return "CharStorage";
        case DType::U8: return "ByteStorage";
        default: return "BoolStorage";
    }
}

// Pickle pieces (protocol 2).
inline std::string pk_str(const std::string& s) { std::string out = "X";  // appended piecewise: "X" + std::string trips a GCC 12 -Wrestrict false positive
    out += ckpt_le(s.size(), 4);
    out += s;
    return out; }
inline std::string pk_int(int64_t v) {
    if (v >= 0 && v < (int64_t{1} << 31)) return std::string("J").append(ckpt_le(static_cast<uint64_t>(v), 4));
    return std::string("\x8a\x08", 2) + ckpt_le(static_cast<uint64_t>(v), 8);
}
inline std::string pk_int_tuple(const std::vector<int64_t>& v) {
    std::string s = "(";
    for (int64_t x : v) s += pk_int(x);
    return s + "t";
}

// The data.pkl of a dict {name: tensor} (under the key `nest` of an outer dict unless empty), each tensor a
// contiguous view of its own storage "i".
inline std::string ckpt_pickle(const std::vector<CkptTensor>& tensors, const std::string& nest) {
    std::string p = "\x80\x02";
    if (!nest.empty()) p.append("}(").append(pk_str(nest));
    p += "ccollections\nOrderedDict\n)R(";
    for (size_t i = 0; i < tensors.size(); ++i) {
        const CkptTensor& t = tensors[i];
        int64_t numel = 1;
        for (int64_t d : t.shape) numel *= d;
        std::vector<int64_t> stride(t.shape.size(), 1);
        for (size_t d = t.shape.size(); d-- > 1;) stride[d - 1] = stride[d] * t.shape[d];
        p.append(pk_str(t.name)).append("ctorch._utils\n_rebuild_tensor_v2\n(");
        p.append("(").append(pk_str("storage")).append("ctorch\n").append(ckpt_storage_class(t.dtype)).append("\n");
        p.append(pk_str(std::to_string(i))).append(pk_str("cpu")).append(pk_int(numel)).append("tQ");
        p.append(pk_int(0)).append(pk_int_tuple(t.shape)).append(pk_int_tuple(stride));
        p.append("\x89" "ccollections\nOrderedDict\n)R" "tR");
    }
    p += "u";
    if (!nest.empty()) p.append(pk_str("global_step")).append(pk_int(1)).append("u");
    return p + ".";
}

// A zip archive of the given entries, each stored, data 64-byte aligned as torch aligns it.
inline std::string ckpt_zip(const std::vector<std::pair<std::string, std::string>>& entries, bool zip64) {
    std::string out, central;
    for (const auto& [name, data] : entries) {
        const uint64_t local = out.size();
        // Local header, then an extra field padding the data to a multiple of 64 (id 0xFFFF, as PyTorch's "FB" pad).
        const uint64_t base = local + 30 + name.size() + (zip64 ? 20 : 0) + 4;
        const uint64_t pad = (64 - base % 64) % 64;
        std::string extra;
        if (zip64) extra += ckpt_le(1, 2) + ckpt_le(16, 2) + ckpt_le(data.size(), 8) + ckpt_le(data.size(), 8);
        extra += ckpt_le(0xffff, 2) + ckpt_le(pad, 2) + std::string(pad, 'Z');
        const uint64_t size32 = zip64 ? 0xffffffff : data.size();
        out += ckpt_le(0x04034b50, 4) + ckpt_le(zip64 ? 45 : 20, 2) + ckpt_le(0, 2) + ckpt_le(0, 2) + ckpt_le(0, 4) +
               ckpt_le(0, 4) + ckpt_le(size32, 4) + ckpt_le(size32, 4) + ckpt_le(name.size(), 2) +
               ckpt_le(extra.size(), 2) + name + extra + data;
        std::string cextra;
        if (zip64) cextra = ckpt_le(1, 2) + ckpt_le(24, 2) + ckpt_le(data.size(), 8) + ckpt_le(data.size(), 8) + ckpt_le(local, 8);
        central += ckpt_le(0x02014b50, 4) + ckpt_le(zip64 ? 45 : 20, 2) + ckpt_le(zip64 ? 45 : 20, 2) + ckpt_le(0, 2) +
                   ckpt_le(0, 2) + ckpt_le(0, 4) + ckpt_le(0, 4) + ckpt_le(size32, 4) + ckpt_le(size32, 4) +
                   ckpt_le(name.size(), 2) + ckpt_le(cextra.size(), 2) + ckpt_le(0, 2) + ckpt_le(0, 2) + ckpt_le(0, 2) +
                   ckpt_le(0, 4) + ckpt_le(zip64 ? 0xffffffff : local, 4) + name + cextra;
    }
    const uint64_t dir_at = out.size();
    out += central;
    if (zip64) {
        const uint64_t record_at = out.size();
        out += ckpt_le(0x06064b50, 4) + ckpt_le(44, 8) + ckpt_le(45, 2) + ckpt_le(45, 2) + ckpt_le(0, 4) + ckpt_le(0, 4) +
               ckpt_le(entries.size(), 8) + ckpt_le(entries.size(), 8) + ckpt_le(central.size(), 8) + ckpt_le(dir_at, 8);
        out += ckpt_le(0x07064b50, 4) + ckpt_le(0, 4) + ckpt_le(record_at, 8) + ckpt_le(1, 4);
    }
    out += ckpt_le(0x06054b50, 4) + ckpt_le(0, 2) + ckpt_le(0, 2) + ckpt_le(zip64 ? 0xffff : entries.size(), 2) +
           ckpt_le(zip64 ? 0xffff : entries.size(), 2) + ckpt_le(zip64 ? 0xffffffff : central.size(), 4) +
           ckpt_le(zip64 ? 0xffffffff : dir_at, 4) + ckpt_le(0, 2);
    return out;
}

inline std::string ckpt_bytes(const std::vector<CkptTensor>& tensors, const CkptOptions& options = {}) {
    std::vector<std::pair<std::string, std::string>> entries;
    entries.emplace_back(options.dir + "/data.pkl", ckpt_pickle(tensors, options.nest));
    entries.emplace_back(options.dir + "/byteorder", "little");
    for (size_t i = 0; i < tensors.size(); ++i)
        entries.emplace_back(options.dir + "/data/" + std::to_string(i), tensors[i].bytes);
    entries.emplace_back(options.dir + "/version", "3\n");
    return ckpt_zip(entries, options.zip64);
}

}  // namespace kiln::test
