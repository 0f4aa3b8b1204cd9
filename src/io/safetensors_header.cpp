#include "io/safetensors_header.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "kiln/error.h"

namespace kiln {

using nlohmann::json;

std::string one_line(std::string_view text, size_t max_chars) {
    std::string out;
    for (size_t i = 0; i < text.size() && i < max_chars; ++i) {
        unsigned char c = static_cast<unsigned char>(text[i]);
        if (c < 0x20 || c == 0x7f) {
            static const char* hex = "0123456789abcdef";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        } else {
            out += static_cast<char>(c);
        }
    }
    if (text.size() > max_chars) out += "...";
    return out;
}

std::string quote_name(std::string_view name) {
    std::string out = "'";  // appended piecewise: "'" + std::string trips a GCC 12 -Wrestrict false positive
    out += one_line(name, 200);
    out += '\'';
    return out;
}

namespace {

constexpr const char* kMetadataKey = "__metadata__";

[[noreturn]] void fail_file(const std::string& path, const std::string& problem) {
    fail(ErrorKind::InvalidModel, path + ": " + problem);
}

[[noreturn]] void fail_tensor(const std::string& path, const std::string& name, const std::string& problem) {
    fail(ErrorKind::InvalidModel, path + ": tensor " + quote_name(name) + ": " + problem);
}

// A JSON number that is a non-negative integer representable as uint64 (nlohmann stores
// non-negative integer literals as unsigned; negatives, fractions and exponents as other kinds).
bool as_count(const json& j, uint64_t& out) {
    if (j.is_number_unsigned()) {
        out = j.get<uint64_t>();
        return true;
    }
    if (j.is_number_integer() && j.get<int64_t>() >= 0) {
        out = static_cast<uint64_t>(j.get<int64_t>());
        return true;
    }
    return false;
}

json parse_header_json(const char* begin, const char* end, const std::string& path) {
    // nlohmann silently keeps the last of duplicate keys; a file naming a tensor twice is corrupt,
    // so duplicates of top-level keys are caught while parsing.
    std::set<std::string> seen;
    std::string duplicate;
    auto watch_keys = [&](int depth, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::key && depth == 1 && duplicate.empty()) {
            const std::string& key = parsed.get_ref<const std::string&>();
            if (!seen.insert(key).second) duplicate = key;
        }
        return true;
    };
    json header;
    try {
        header = json::parse(begin, end, watch_keys);
    } catch (const json::exception& e) {
        // nlohmann's messages are one line and say where parsing stopped.
        fail_file(path, "header is not valid JSON (" + one_line(e.what(), 300) + ")");
    }
    require(header.is_object(), ErrorKind::InvalidModel,
            path + ": header is not a JSON object (got " + header.type_name() + ")");
    if (!duplicate.empty()) fail_tensor(path, duplicate, "named twice in the header");
    return header;
}

std::map<std::string, std::string> parse_metadata(const json& j, const std::string& path) {
    require(j.is_object(), ErrorKind::InvalidModel,
            path + ": __metadata__ is not an object of strings (got " + j.type_name() + ")");
    std::map<std::string, std::string> metadata;
    for (const auto& [key, value] : j.items()) {
        require(value.is_string(), ErrorKind::InvalidModel,
                path + ": __metadata__ entry " + quote_name(key) + " is not a string (got " + value.type_name() + ")");
        metadata.emplace(key, value.get<std::string>());
    }
    return metadata;
}

Shape parse_shape(const json& entry, const std::string& name, const std::string& path) {
    auto it = entry.find("shape");
    if (it == entry.end()) fail_tensor(path, name, "has no shape");
    if (!it->is_array()) fail_tensor(path, name, "shape is not an array");
    Shape shape;
    shape.reserve(it->size());
    for (const json& d : *it) {
        uint64_t v;
        if (!as_count(d, v) || v > static_cast<uint64_t>(INT64_MAX))
            fail_tensor(path, name, "shape " + it->dump() + " is not an array of non-negative integers");
        shape.push_back(static_cast<int64_t>(v));
    }
    // Multiply in the order shape_numel() does, so that a shape accepted here can never overflow later.
    int64_t numel = 1;
    for (int64_t d : shape)
        if (__builtin_mul_overflow(numel, d, &numel))
            fail_tensor(path, name, "shape " + shape_str(shape) + " has too many elements");
    return shape;
}

TensorInfo parse_tensor(const std::string& name, const json& entry, uint64_t data_start, uint64_t data_size,
                        const std::string& path) {
    if (!entry.is_object()) fail_tensor(path, name, std::string("entry is not an object (got ") + entry.type_name() + ")");

    auto dt = entry.find("dtype");
    if (dt == entry.end()) fail_tensor(path, name, "has no dtype");
    if (!dt->is_string()) fail_tensor(path, name, "dtype is not a string");
    std::optional<DType> dtype = dtype_from_name(dt->get_ref<const std::string&>());
    if (!dtype) fail_tensor(path, name, "unknown dtype " + quote_name(dt->get_ref<const std::string&>()));

    Shape shape = parse_shape(entry, name, path);

    auto offsets = entry.find("data_offsets");
    if (offsets == entry.end()) fail_tensor(path, name, "has no data_offsets");
    uint64_t begin = 0, end = 0;
    if (!offsets->is_array() || offsets->size() != 2 || !as_count((*offsets)[0], begin) ||
        !as_count((*offsets)[1], end))
        fail_tensor(path, name, "data_offsets " + offsets->dump() + " is not two non-negative integers");
    if (begin > end)
        fail_tensor(path, name,
                    "data_offsets begin " + std::to_string(begin) + " is after end " + std::to_string(end));
    if (end > data_size)
        fail_tensor(path, name,
                    "data_offsets end " + std::to_string(end) + " is beyond the data area of " +
                        std::to_string(data_size) + " bytes (file truncated?)");

    uint64_t numel = static_cast<uint64_t>(shape_numel(shape));
    uint64_t expected;
    if (__builtin_mul_overflow(numel, dtype_size(*dtype), &expected) || expected != end - begin)
        fail_tensor(path, name,
                    std::to_string(end - begin) + " bytes of data but shape " + shape_str(shape) + " of " +
                        dtype_name(*dtype) + " needs " + std::to_string(numel) + " x " +
                        std::to_string(dtype_size(*dtype)));

    return TensorInfo{name, *dtype, std::move(shape), data_start + begin, end - begin};
}

}  // namespace

void check_no_overlaps(const std::map<std::string, TensorInfo>& tensors, const std::string& path) {
    std::vector<const TensorInfo*> by_offset;
    for (const auto& [name, info] : tensors)
        if (info.nbytes > 0) by_offset.push_back(&info);  // an empty range shares no byte with anything
    std::sort(by_offset.begin(), by_offset.end(),
              [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
        const TensorInfo& prev = *by_offset[i - 1];
        const TensorInfo& cur = *by_offset[i];
        if (cur.offset < prev.offset + prev.nbytes)
            fail(ErrorKind::InvalidModel, path + ": tensors " + quote_name(prev.name) + " and " +
                                              quote_name(cur.name) + " have overlapping data");
    }
}

SafetensorsLayout parse_safetensors_layout(const uint8_t* file, uint64_t size, const std::string& path) {
    require(size >= 8, ErrorKind::InvalidModel,
            path + ": not a safetensors file (only " + std::to_string(size) + " bytes, shorter than the 8-byte header length)");
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file[i];  // little-endian on any host
    require(header_len > 0, ErrorKind::InvalidModel, path + ": header length is 0");
    require(header_len <= kMaxSafetensorsHeaderBytes, ErrorKind::InvalidModel,
            path + ": header length " + std::to_string(header_len) + " is absurd (more than " +
                std::to_string(kMaxSafetensorsHeaderBytes) + " bytes); not a safetensors file?");
    require(header_len <= size - 8, ErrorKind::InvalidModel,
            path + ": header length " + std::to_string(header_len) + " is larger than the file (" +
                std::to_string(size) + " bytes)");

    const char* text = reinterpret_cast<const char*>(file + 8);
    json header = parse_header_json(text, text + header_len, path);

    const uint64_t data_start = 8 + header_len;
    const uint64_t data_size = size - data_start;
    SafetensorsLayout layout;
    for (const auto& [name, entry] : header.items()) {
        if (name == kMetadataKey) {
            layout.metadata = parse_metadata(entry, path);
            continue;
        }
        layout.tensors.emplace(name, parse_tensor(name, entry, data_start, data_size, path));
    }
    check_no_overlaps(layout.tensors, path);
    return layout;
}

}  // namespace kiln
