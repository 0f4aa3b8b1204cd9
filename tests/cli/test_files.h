// Files for the command-line tests: a temporary folder per test, byte-level reading/writing, a
// snapshot to prove a user's file was left alone, and a raw safetensors editor that rewrites a
// copy of a fixture's header (the library's reader would refuse the broken files these tests need).
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

namespace kiln::test {

namespace fs = std::filesystem;

inline std::string read_bytes(const fs::path& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

inline void write_bytes(const fs::path& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(f.good()) << "cannot write " << path;
}

// A folder under the system's temporary directory, removed with everything in it at the end.
class TempDir {
public:
    TempDir() {
        std::string pattern = (fs::temp_directory_path() / "kiln-test-XXXXXX").string();
        if (mkdtemp(pattern.data())) path_ = pattern;
    }
    ~TempDir() {
        std::error_code ec;
        if (!path_.empty()) fs::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    const fs::path& path() const { return path_; }
    std::string file(const std::string& name) const { return (path_ / name).string(); }

private:
    fs::path path_;
};

// What a file is at one moment: its bytes and modification time. kiln must never write to the
// files it is given (models, init images), not even when it rejects them.
struct FileSnapshot {
    std::string bytes;
    fs::file_time_type mtime;

    static FileSnapshot of(const fs::path& path) { return {read_bytes(path), fs::last_write_time(path)}; }
    bool operator==(const FileSnapshot&) const = default;
};

// A safetensors file split into its parts: the JSON header and the data area its offsets refer to.
struct RawSafetensors {
    nlohmann::ordered_json header;
    std::string data;

    static RawSafetensors read(const fs::path& path) {
        const std::string bytes = read_bytes(path);
        uint64_t n = 0;
        for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes.at(i));
        RawSafetensors raw;
        raw.header = nlohmann::ordered_json::parse(bytes.substr(8, n));
        raw.data = bytes.substr(8 + n);
        return raw;
    }

    std::string bytes() const {
        const std::string text = header.dump();
        std::string out(8, '\0');
        uint64_t n = text.size();
        for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
        return out + text + data;
    }

    void write(const fs::path& path) const { write_bytes(path, bytes()); }

    uint64_t nbytes(const std::string& name) const {
        const auto& offsets = header.at(name).at("data_offsets");
        return offsets[1].get<uint64_t>() - offsets[0].get<uint64_t>();
    }
};

}  // namespace kiln::test
