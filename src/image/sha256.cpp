#include "image/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "kiln/error.h"

namespace kiln {

namespace {

// SHA-256 of the file's bytes, or of those after its safetensors header.
std::string sha256_hex_from(const std::string& path, bool skip_safetensors_header) {
    std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), std::fclose);
    require(file != nullptr, ErrorKind::IO, "cannot open " + path + " to hash it: " + std::strerror(errno));
    if (skip_safetensors_header) {
        unsigned char n[8];
        require(std::fread(n, 1, 8, file.get()) == 8, ErrorKind::InvalidModel, path + " is too short for a safetensors file");
        uint64_t length = 0;
        for (int i = 7; i >= 0; --i) length = length << 8 | n[i];
        require(length < (uint64_t(1) << 40) && std::fseek(file.get(), long(8 + length), SEEK_SET) == 0,
                ErrorKind::InvalidModel, path + ": its header length does not fit the file");
    }
    std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    require(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1, ErrorKind::OutOfMemory,
            "cannot set up SHA-256 for " + path);
    std::vector<unsigned char> buffer(size_t(1) << 20);
    size_t n = 0;
    while ((n = std::fread(buffer.data(), 1, buffer.size(), file.get())) > 0)
        require(EVP_DigestUpdate(ctx.get(), buffer.data(), n) == 1, ErrorKind::IO, "SHA-256 failed on " + path);
    require(!std::ferror(file.get()), ErrorKind::IO, "cannot read " + path + " to hash it: " + std::strerror(errno));
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    require(EVP_DigestFinal_ex(ctx.get(), digest, &length) == 1, ErrorKind::IO, "SHA-256 failed on " + path);
    static const char* const kHex = "0123456789abcdef";
    std::string hex;
    for (unsigned int i = 0; i < length; ++i) {
        hex += kHex[digest[i] >> 4];
        hex += kHex[digest[i] & 15];
    }
    return hex;
}

}  // namespace

std::string sha256_file_hex(const std::string& path) { return sha256_hex_from(path, false); }

std::string model_hash(const std::string& path) { return sha256_file_hex(path).substr(0, 10); }

std::string lora_hash(const std::string& path) { return sha256_hex_from(path, true).substr(0, 12); }

}  // namespace kiln
