// Helpers shared by the io tests: a self-cleaning temp directory and hand-built safetensors bytes,
// so that malformed files can be made precisely.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "kiln/error.h"

namespace kiln::test {

class TempDir {
public:
    TempDir() {
        std::random_device entropy;
        path_ = std::filesystem::temp_directory_path() /
                ("kiln_io_test_" + std::to_string(entropy()) + "_" + std::to_string(entropy()));
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    std::string file(const std::string& name) const { return (path_ / name).string(); }
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << path;
}

inline std::string le64(uint64_t v) {
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    return s;
}

// A safetensors file: the header's length, the header text as given, then the data bytes.
inline std::string safetensors_bytes(const std::string& header, const std::string& data) {
    return le64(header.size()) + header + data;
}

// Runs fn and returns the kiln::Error it throws; fails the test if it throws nothing or another type.
template <typename Fn>
Error expect_error(Fn fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e;
    } catch (const std::exception& e) {
        ADD_FAILURE() << "expected kiln::Error, got std::exception: " << e.what();
        return Error(ErrorKind::IO, "wrong exception");
    }
    ADD_FAILURE() << "expected kiln::Error, nothing was thrown";
    return Error(ErrorKind::IO, "no exception");
}

}  // namespace kiln::test
