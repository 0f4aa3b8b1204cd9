#include "io/torch_checkpoint.h"

#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "io/torch_pickle.h"
#include "io/zip_archive.h"
#include "kiln/error.h"

namespace kiln {

namespace {

// PROTO 2, LONG1 of 10 bytes: 0x1950a86a20f9469cfc6c, torch.serialization's MAGIC_NUMBER, little-endian.
constexpr uint8_t kLegacyStart[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
constexpr int64_t kLegacyProtocolVersion = 1001;

using Kind = PickleValue::Kind;

// Where each storage's bytes lie, by key.
struct StorageBytes {
    uint64_t offset = 0;
    uint64_t nbytes = 0;
};

// The dict whose tensors are the weights: "state_dict" inside the top-level dict when it has one.
uint32_t weights_dict(const PickleData& data, const std::string& path) {
    const PickleValue& root = data.at(data.root);
    require(root.kind == Kind::Dict, ErrorKind::InvalidModel,
            path + ": holds a " + pickle_kind_name(root.kind) + ", not a dict of tensors");
    for (size_t i = 0; i + 1 < root.items.size(); i += 2) {
        const PickleValue& key = data.at(root.items[i]);
        if (key.kind == Kind::String && key.text == "state_dict" && data.at(root.items[i + 1]).kind == Kind::Dict)
            return root.items[i + 1];
    }
    return data.root;
}

bool contiguous(const PickleValue& t) {
    int64_t expected = 1;
    for (size_t d = t.shape.size(); d-- > 0;) {
        if (t.shape[d] == 0) return true;
        if (t.shape[d] != 1 && t.strides[d] != expected) return false;
        expected *= t.shape[d];
    }
    return true;
}

// Tensors of a dict and of the dicts inside it (named "outer.inner", as textual-inversion files'
// 'string_to_param': {'*': tensor} becomes "string_to_param.*"), by key; other values are skipped.
// Each dict is read once (a pickle can nest a dict in itself, or share one many times).
void collect_tensors(const PickleData& data, uint32_t dict, const std::string& prefix, int depth,
                     std::map<std::string, uint32_t>& out, std::set<uint32_t>& seen) {
    if (!seen.insert(dict).second) return;
    const PickleValue& d = data.at(dict);
    for (size_t i = 0; i + 1 < d.items.size(); i += 2) {
        const PickleValue& key = data.at(d.items[i]);
        if (key.kind != Kind::String) continue;
        const PickleValue::Kind kind = data.at(d.items[i + 1]).kind;
        if (kind == Kind::Tensor) out.insert_or_assign(prefix + key.text, d.items[i + 1]);  // the last of a repeated key, as Python
        if (kind == Kind::Dict && depth < 4) collect_tensors(data, d.items[i + 1], prefix + key.text + ".", depth + 1, out, seen);
    }
}

// The tensors of the weights dict, placed in their storages' bytes.
SafetensorsLayout tensors_of(const PickleData& data, const std::map<std::string, StorageBytes>& storages,
                             const std::string& path) {
    SafetensorsLayout layout;
    std::map<std::string, DType> storage_dtype;
    std::map<std::string, uint32_t> tensors;
    std::set<uint32_t> seen;
    collect_tensors(data, weights_dict(data, path), "", 0, tensors, seen);
    for (const auto& [name, index] : tensors) {
        const PickleValue& t = data.at(index);
        const std::string where = path + ": tensor " + quote_name(name);
        const PickleValue& storage = data.at(t.storage);
        auto [known, fresh] = storage_dtype.emplace(storage.text, storage.dtype);
        require(fresh || known->second == storage.dtype, ErrorKind::InvalidModel,
                where + " reads storage " + quote_name(storage.text) + " as another dtype than an earlier tensor");
        auto it = storages.find(storage.text);
        require(it != storages.end(), ErrorKind::InvalidModel, where + "'s storage " + quote_name(storage.text) + " is missing");
        const uint64_t elem = dtype_size(storage.dtype);
        require(storage.storage_numel <= std::numeric_limits<uint64_t>::max() / elem &&
                    storage.storage_numel * elem == it->second.nbytes,
                ErrorKind::InvalidModel,
                where + "'s storage " + quote_name(storage.text) + " holds " + std::to_string(it->second.nbytes) +
                    " bytes, not the " + std::to_string(storage.storage_numel) + " elements its header says");
        uint64_t numel = 1;
        for (int64_t d : t.shape) {
            require(d >= 0, ErrorKind::InvalidModel, where + " has a negative size");
            require(d == 0 || numel <= storage.storage_numel / static_cast<uint64_t>(d), ErrorKind::InvalidModel,
                    where + " is larger than its storage");
            numel *= static_cast<uint64_t>(d);
        }
        require(t.storage_offset >= 0 && static_cast<uint64_t>(t.storage_offset) <= storage.storage_numel &&
                    numel <= storage.storage_numel - static_cast<uint64_t>(t.storage_offset),
                ErrorKind::InvalidModel, where + " lies outside its storage");
        require(contiguous(t), ErrorKind::Unsupported,
                where + " is a strided (non-contiguous) view, which kiln does not read; save it with .contiguous()");
        TensorInfo info;
        info.name = name;
        info.dtype = storage.dtype;
        info.shape = Shape(t.shape.begin(), t.shape.end());
        info.offset = it->second.offset + static_cast<uint64_t>(t.storage_offset) * elem;
        info.nbytes = numel * elem;
        layout.tensors.emplace(name, std::move(info));
    }
    return layout;
}

SafetensorsLayout zip_layout(const uint8_t* file, uint64_t size, const std::string& path) {
    const ZipDirectory zip = read_zip_directory(file, size, path);
    std::string dir;
    for (const auto& [name, entry] : zip.entries) {
        const size_t slash = name.find('/');
        if (slash != std::string::npos && name.compare(slash, std::string::npos, "/data.pkl") == 0) {
            require(dir.empty(), ErrorKind::InvalidModel, path + ": holds more than one data.pkl");
            dir = name.substr(0, slash);
        }
    }
    require(!dir.empty(), ErrorKind::InvalidModel,
            path + ": a zip archive without <name>/data.pkl, so not a PyTorch checkpoint");
    if (const ZipEntry* order = zip.stored(dir + "/byteorder", path)) {
        const std::string text(reinterpret_cast<const char*>(file + order->data_offset), order->size);
        require(text == "little", ErrorKind::Unsupported, path + ": a checkpoint saved with byte order " + quote_name(text));
    }
    const ZipEntry* pkl = zip.stored(dir + "/data.pkl", path);
    const PickleData data = read_torch_pickle(file + pkl->data_offset, pkl->size, path + ": " + pkl->name);
    std::map<std::string, StorageBytes> storages;
    const std::string prefix = dir + "/data/";
    for (const auto& [name, entry] : zip.entries) {
        if (name.compare(0, prefix.size(), prefix) != 0) continue;
        const ZipEntry* stored = zip.stored(name, path);
        storages[name.substr(prefix.size())] = {stored->data_offset, stored->size};
    }
    return tensors_of(data, storages, path);
}

int64_t int_value(const PickleData& p, const std::string& path, const char* what) {
    const PickleValue& v = p.at(p.root);
    require(v.kind == Kind::Int, ErrorKind::InvalidModel, path + ": the legacy format's " + what + " is not an integer");
    return v.integer;
}

SafetensorsLayout legacy_layout(const uint8_t* file, uint64_t size, const std::string& path) {
    const std::string what = path + " (legacy PyTorch format)";
    uint64_t at = 0;
    auto next = [&](const char* part) {
        PickleData p = read_torch_pickle(file + at, size - at, what + ", " + part);
        at += p.end;
        return p;
    };
    next("magic number");  // is_legacy_torch_checkpoint checked its bytes
    require(int_value(next("protocol version"), path, "protocol version") == kLegacyProtocolVersion,
            ErrorKind::Unsupported, what + ": an unknown protocol version");
    const PickleData info = next("system info");
    const PickleValue& sys = info.at(info.root);
    require(sys.kind == Kind::Dict, ErrorKind::InvalidModel, what + ": the system info is not a dict");
    for (size_t i = 0; i + 1 < sys.items.size(); i += 2) {
        const PickleValue& k = info.at(sys.items[i]);
        const PickleValue& v = info.at(sys.items[i + 1]);
        if (k.kind == Kind::String && k.text == "little_endian")
            require(v.kind == Kind::Bool && v.integer == 1, ErrorKind::Unsupported, what + ": saved big-endian");
    }
    const PickleData data = next("object");
    const PickleData keys = next("storage keys");
    const PickleValue& list = keys.at(keys.root);
    require(list.kind == Kind::List, ErrorKind::InvalidModel, what + ": the storage keys are not a list");
    // Element sizes come from the storages the object names; each storage is (int64 count, count elements).
    std::map<std::string, DType> dtype_of;
    for (const PickleValue& v : data.values)
        if (v.kind == Kind::Storage) dtype_of.emplace(v.text, v.dtype);
    std::map<std::string, StorageBytes> storages;
    for (uint32_t k : list.items) {
        const PickleValue& key = keys.at(k);
        require(key.kind == Kind::String, ErrorKind::InvalidModel, what + ": a storage key is not text");
        auto d = dtype_of.find(key.text);
        require(d != dtype_of.end(), ErrorKind::InvalidModel, what + ": storage " + quote_name(key.text) + " is not used");
        require(size - at >= 8, ErrorKind::InvalidModel, what + ": ends inside storage " + quote_name(key.text));
        uint64_t count = 0;
        for (int i = 7; i >= 0; --i) count = (count << 8) | file[at + i];
        at += 8;
        const uint64_t elem = dtype_size(d->second);
        require(count <= (size - at) / elem, ErrorKind::InvalidModel, what + ": storage " + quote_name(key.text) + " runs past the end");
        require(storages.emplace(key.text, StorageBytes{at, count * elem}).second, ErrorKind::InvalidModel,
                what + ": storage " + quote_name(key.text) + " is listed twice");
        at += count * elem;
    }
    return tensors_of(data, storages, what);
}

}  // namespace

bool is_legacy_torch_checkpoint(const uint8_t* file, uint64_t size) {
    return size >= sizeof kLegacyStart && std::memcmp(file, kLegacyStart, sizeof kLegacyStart) == 0;
}

SafetensorsLayout parse_torch_checkpoint_layout(const uint8_t* file, uint64_t size, const std::string& path) {
    if (is_legacy_torch_checkpoint(file, size)) return legacy_layout(file, size, path);
    return zip_layout(file, size, path);
}

}  // namespace kiln
