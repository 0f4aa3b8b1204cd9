// A file written under a temporary name beside its target and renamed over it at the end (commit), so
// readers never see half a file and a file still mapped elsewhere keeps its old contents (its inode).
// Unless committed, the temporary file is removed. Errors are IO errors naming the target.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "kiln/error.h"

namespace kiln {

class TempFile {
public:
    explicit TempFile(const std::string& target) : target_(target) {
        // pid + counter is unique among live processes; the clock makes a clash with a dead process's
        // leftover unlikely, and O_EXCL makes any clash safe.
        static std::atomic<unsigned> counter{0};
        const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
        for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
            temp_ = target + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
                    std::to_string(stamp);
            fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);  // the umask decides
            if (fd_ < 0 && errno != EEXIST) fail_io("cannot create temporary file " + temp_);
        }
        if (fd_ < 0) fail_io("cannot create a temporary file");
    }
    ~TempFile() {
        if (fd_ >= 0) ::close(fd_);
        if (!committed_) ::unlink(temp_.c_str());
    }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;

    void write(const void* data, size_t n) {
        for (const char* p = static_cast<const char*>(data); n > 0;) {
            const ssize_t w = ::write(fd_, p, n);
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) fail_io("cannot write");
            p += w;
            n -= static_cast<size_t>(w);
        }
    }
    // Flushed to disk before the rename, so that a crash leaves either the old file or the new one.
    void commit() {
        if (::fsync(fd_) != 0) fail_io("cannot flush");
        const int rc = ::close(fd_);
        fd_ = -1;
        if (rc != 0) fail_io("cannot close");
        if (::rename(temp_.c_str(), target_.c_str()) != 0) fail_io("cannot replace with " + temp_);
        committed_ = true;
    }

private:
    [[noreturn]] void fail_io(const std::string& what) const {
        fail(ErrorKind::IO, target_ + ": " + what + ": " + std::strerror(errno));
    }
    std::string target_, temp_;
    int fd_ = -1;
    bool committed_ = false;
};

}  // namespace kiln
