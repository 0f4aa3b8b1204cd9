#include "io/zip_archive.h"

#include <algorithm>

#include "io/safetensors_header.h"  // quote_name
#include "kiln/error.h"

namespace kiln {

namespace {

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64EndOfDirectory = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint64_t kEndRecordBytes = 22;
constexpr uint64_t kMaxCommentBytes = 0xffff;

// Little-endian reads at a position the caller has bounds-checked.
uint64_t le(const uint8_t* p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

[[noreturn]] void bad(const std::string& path, const std::string& what) {
    fail(ErrorKind::InvalidModel, path + ": not a valid zip archive (" + what + ")");
}

// The end of central directory record: the last one whose comment length reaches the end of the file.
uint64_t find_end_record(const uint8_t* file, uint64_t size, const std::string& path) {
    if (size < kEndRecordBytes) bad(path, "too short for an end of central directory record");
    const uint64_t lowest = size - kEndRecordBytes - std::min(size - kEndRecordBytes, kMaxCommentBytes);
    for (uint64_t at = size - kEndRecordBytes + 1; at-- > lowest;) {
        if (le(file + at, 4) == kEndOfDirectory && at + kEndRecordBytes + le(file + at + 20, 2) == size) return at;
    }
    bad(path, "no end of central directory record");
}

struct DirectoryPlace {
    uint64_t entries = 0;
    uint64_t offset = 0;
    uint64_t bytes = 0;
};

DirectoryPlace directory_place(const uint8_t* file, uint64_t size, const std::string& path) {
    const uint64_t end = find_end_record(file, size, path);
    const uint8_t* e = file + end;
    DirectoryPlace place{le(e + 10, 2), le(e + 16, 4), le(e + 12, 4)};
    const bool disks = le(e + 4, 2) != 0 || le(e + 6, 2) != 0;
    const bool zip64 = le(e + 10, 2) == 0xffff || le(e + 12, 4) == 0xffffffff || le(e + 16, 4) == 0xffffffff;
    if (zip64 || (disks && le(e + 4, 2) == 0xffff)) {
        require(end >= 20 && le(e - 20, 4) == kZip64Locator, ErrorKind::InvalidModel,
                path + ": not a valid zip archive (ZIP64 values without a ZIP64 locator)");
        const uint8_t* loc = e - 20;
        require(le(loc + 4, 4) == 0 && le(loc + 16, 4) <= 1, ErrorKind::Unsupported,
                path + ": zip archives split over several disks are not supported");
        const uint64_t at = le(loc + 8, 8);
        if (at > end - 20 || end - 20 - at < 56 || le(file + at, 4) != kZip64EndOfDirectory)
            bad(path, "ZIP64 end of central directory record out of place");
        const uint8_t* z = file + at;
        require(le(z + 16, 4) == 0 && le(z + 20, 4) == 0, ErrorKind::Unsupported,
                path + ": zip archives split over several disks are not supported");
        place = {le(z + 32, 8), le(z + 48, 8), le(z + 40, 8)};
    } else {
        require(!disks, ErrorKind::Unsupported, path + ": zip archives split over several disks are not supported");
    }
    if (place.offset > size || place.bytes > size - place.offset) bad(path, "central directory outside the file");
    // Each central header takes at least 46 bytes: a count beyond that is corrupt (and bounds the loop).
    if (place.entries > place.bytes / 46) bad(path, "more entries than the central directory can hold");
    return place;
}

// Sizes and offset from a ZIP64 extended information field, for the 32-bit fields that are saturated.
void read_zip64_extra(const uint8_t* extra, uint64_t length, uint64_t& usize, uint64_t& csize, uint64_t& local,
                      const std::string& path, const std::string& name) {
    const bool want_u = usize == 0xffffffff, want_c = csize == 0xffffffff, want_l = local == 0xffffffff;
    uint64_t at = 0;
    while (at + 4 <= length) {
        const uint64_t id = le(extra + at, 2), n = le(extra + at + 2, 2);
        if (at + 4 + n > length) break;
        if (id == 0x0001) {
            const uint8_t* f = extra + at + 4;
            uint64_t pos = 0;
            auto take = [&](uint64_t& v) {
                if (pos + 8 > n) bad(path, "entry " + quote_name(name) + " has a short ZIP64 field");
                v = le(f + pos, 8);
                pos += 8;
            };
            if (want_u) take(usize);
            if (want_c) take(csize);
            if (want_l) take(local);
            return;
        }
        at += 4 + n;
    }
    if (want_u || want_c || want_l) bad(path, "entry " + quote_name(name) + " lacks its ZIP64 field");
}

}  // namespace

bool is_zip(const uint8_t* file, uint64_t size) { return size >= 4 && le(file, 4) == kLocalHeader; }

const ZipEntry* ZipDirectory::stored(const std::string& name, const std::string& path) const {
    auto it = entries.find(name);
    if (it == entries.end()) return nullptr;
    require(it->second.method == 0, ErrorKind::Unsupported,
            path + ": zip entry " + quote_name(name) + " is compressed (method " + std::to_string(it->second.method) +
                "); kiln reads stored (uncompressed) entries, as torch.save writes them");
    return &it->second;
}

ZipDirectory read_zip_directory(const uint8_t* file, uint64_t size, const std::string& path) {
    const DirectoryPlace place = directory_place(file, size, path);
    ZipDirectory dir;
    uint64_t at = place.offset;
    const uint64_t end = place.offset + place.bytes;
    for (uint64_t i = 0; i < place.entries; ++i) {
        if (end - at < 46 || le(file + at, 4) != kCentralHeader) bad(path, "central directory entry " + std::to_string(i));
        const uint8_t* h = file + at;
        const uint64_t flags = le(h + 8, 2), method = le(h + 10, 2);
        uint64_t csize = le(h + 20, 4), usize = le(h + 24, 4);
        const uint64_t name_len = le(h + 28, 2), extra_len = le(h + 30, 2), comment_len = le(h + 32, 2);
        uint64_t local = le(h + 42, 4);
        if (46 + name_len + extra_len + comment_len > end - at) bad(path, "central directory entry " + std::to_string(i));
        const std::string name(reinterpret_cast<const char*>(h + 46), name_len);
        read_zip64_extra(h + 46 + name_len, extra_len, usize, csize, local, path, name);
        at += 46 + name_len + extra_len + comment_len;

        require((flags & 1) == 0, ErrorKind::Unsupported, path + ": zip entry " + quote_name(name) + " is encrypted");
        if (local > size || size - local < 30 || le(file + local, 4) != kLocalHeader)
            bad(path, "entry " + quote_name(name) + " has no local header where the directory says");
        const uint64_t local_name = le(file + local + 26, 2), local_extra = le(file + local + 28, 2);
        if (local_name != name_len || size - local - 30 < local_name + local_extra ||
            !std::equal(name.begin(), name.end(), file + local + 30))
            bad(path, "entry " + quote_name(name) + "'s local header does not match the directory");
        const uint64_t data = local + 30 + local_name + local_extra;
        if (csize > size - data) bad(path, "entry " + quote_name(name) + " runs past the end of the file");
        if (method == 0 && csize != usize) bad(path, "stored entry " + quote_name(name) + " has two different sizes");
        ZipEntry entry{name, static_cast<uint16_t>(method), data, csize};
        if (!dir.entries.emplace(name, std::move(entry)).second) bad(path, "entry " + quote_name(name) + " appears twice");
    }
    return dir;
}

}  // namespace kiln
