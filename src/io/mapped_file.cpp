#include "io/mapped_file.h"

#include <algorithm>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "kiln/error.h"

namespace kiln {

namespace {

// Closes the descriptor on every path out of open(); the mapping outlives it.
struct FdGuard {
    int fd;
    ~FdGuard() {
        if (fd >= 0) ::close(fd);
    }
};

[[noreturn]] void fail_errno(const std::string& path, const char* what) {
    fail(ErrorKind::IO, path + ": " + what + ": " + std::strerror(errno));
}

}  // namespace

MappedFile MappedFile::open(const std::string& path) {
    int fd;
    do {
        // O_NONBLOCK: opening a FIFO must not wait for a writer (kiln would hang before the
        // regular-file check below); it does not change how a regular file is read or mapped.
        fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) fail_errno(path, "cannot open");
    FdGuard guard{fd};

    struct stat st;
    if (::fstat(fd, &st) != 0) fail_errno(path, "cannot stat");
    require(S_ISREG(st.st_mode), ErrorKind::IO, path + ": not a regular file");

    MappedFile file;
    file.size_ = static_cast<uint64_t>(st.st_size);
    if (file.size_ == 0) return file;  // mmap rejects a zero length; callers see an empty file
    require(file.size_ <= SIZE_MAX, ErrorKind::IO, path + ": file too large to map");
    void* p = ::mmap(nullptr, static_cast<size_t>(file.size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) fail_errno(path, "cannot memory-map");
    file.data_ = static_cast<const uint8_t*>(p);
    // Not counted in the memory accounting: a mapping is address space, and its pages are the page
    // cache's. What tensors read in place counts (MemoryCategory::MappedFile, io/mapped_tensor.h).
    return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
    if (this != &other) {
        release();
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

MappedFile::~MappedFile() { release(); }

void MappedFile::drop_pages(uint64_t offset, uint64_t length) const noexcept {
    if (!data_ || offset >= size_ || length == 0) return;
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t begin = offset / page * page;
    const uint64_t end = std::min(size_, offset + std::min(length, size_ - offset));
    // Pages a neighbouring tensor shares are dropped too; it faults them back in from the page cache.
    ::madvise(const_cast<uint8_t*>(data_) + begin, static_cast<size_t>(end - begin), MADV_DONTNEED);
}

void MappedFile::release() noexcept {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
    data_ = nullptr;
    size_ = 0;
}

}  // namespace kiln
