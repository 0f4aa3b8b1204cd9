// A whole file memory-mapped read-only (MAP_PRIVATE), so that tensors are read on demand by the
// page cache instead of being copied up front, and the user's file can never be written through it.
#pragma once
#include <cstdint>
#include <string>

namespace kiln {

class MappedFile {
public:
    MappedFile() = default;
    // Throws kiln::Error (IO) naming the path when the file cannot be opened, is not a regular file
    // or cannot be mapped. An empty file gives a valid object with size() == 0 and data() == nullptr.
    static MappedFile open(const std::string& path);

    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    ~MappedFile();

    const uint8_t* data() const { return data_; }
    uint64_t size() const { return size_; }

    // Tells the kernel this process is done with the pages of [offset, offset + length) for now:
    // they leave its resident set (a loader that copied a tensor out need not hold the file's pages
    // too) and are read again from the page cache if touched. Out-of-range parts are ignored.
    void drop_pages(uint64_t offset, uint64_t length) const noexcept;

private:
    void release() noexcept;

    const uint8_t* data_ = nullptr;
    uint64_t size_ = 0;
};

}  // namespace kiln
