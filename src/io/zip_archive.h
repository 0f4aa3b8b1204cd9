// The directory of a zip archive (PKWARE APPNOTE 6.3: end of central directory record, ZIP64 records,
// central directory, local headers), for reading PyTorch's .ckpt/.pt files in place: torch.save writes
// every entry uncompressed ("stored"), so an entry's bytes are a range of the file that can be mapped.
// Only what such files need is read: one disk, no encryption, stored entries. A compressed entry is
// refused when it is looked up, naming it and its method (torch never writes one; a re-zipped file would).
// CRCs are not checked: tensors are read lazily from the mapping, as safetensors ones are.
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace kiln {

struct ZipEntry {
    std::string name;
    uint16_t method = 0;       // 0 stored, 8 deflate, ...
    uint64_t data_offset = 0;  // of the entry's bytes, from the start of the file
    uint64_t size = 0;         // stored size (the uncompressed size for stored entries)
};

struct ZipDirectory {
    std::map<std::string, ZipEntry> entries;  // by name

    // The entry `name` as a stored byte range, or nullptr when there is none. A compressed entry:
    // Unsupported naming `path`, the entry and its method.
    const ZipEntry* stored(const std::string& name, const std::string& path) const;
};

// True when the bytes start with a zip local file header ("PK\3\4").
bool is_zip(const uint8_t* file, uint64_t size);

// Reads and validates the central directory of the `size` bytes at `file`: every entry's local header
// and data inside the file, names unique. Malformed or truncated: InvalidModel naming `path` and, where
// it applies, the entry. Multi-disk or encrypted archives: Unsupported.
ZipDirectory read_zip_directory(const uint8_t* file, uint64_t size, const std::string& path);

}  // namespace kiln
