// Reads tests/data/rng/randn.{json,safetensors} and randn_digests.json: torch.randn references from torch 2.11
// (CPU and an NVIDIA H200). Streams of more than 1024 values keep their first 256 and, in the digests, their
// length and the FNV-1a 64-bit hash of their float32 bytes (tests/data/shrink_randn.py made them from the whole
// streams): same_as_reference checks a generated stream against both, so it is still bit for bit. A deliberately
// tiny safetensors reader (8-byte little-endian header length, JSON header, raw F32 data) so that these tests do
// not depend on src/io.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kiln::testing {

struct RandnCase {
    uint64_t seed;
    Shape shape;
    std::string key;
};

struct StreamDigest {
    size_t count;     // values in the whole stream
    uint64_t fnv1a64;  // of its float32 bytes, little-endian
};

struct RandnFixture {
    std::vector<RandnCase> cases;
    std::map<std::string, std::vector<float>> tensors;  // "cpu.<key>" / "cuda.<key>": whole, or the first 256
    std::map<std::string, StreamDigest> digests;       // the streams kept in part
};

inline uint64_t fnv1a64(const float* values, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    const auto* bytes = reinterpret_cast<const unsigned char*>(values);  // little-endian host assumed
    for (size_t i = 0; i < 4 * n; ++i) h = (h ^ bytes[i]) * 0x100000001b3ull;
    return h;
}

inline const RandnFixture& randn_fixture() {
    static const RandnFixture fixture = [] {
        RandnFixture f;
        const std::string dir = std::string(KILN_TEST_DATA) + "/rng/";
        std::ifstream js(dir + "randn.json");
        if (!js) throw std::runtime_error("cannot open " + dir + "randn.json");
        const auto doc = nlohmann::json::parse(js);
        for (const auto& c : doc.at("cases"))
            f.cases.push_back({c.at("seed").get<uint64_t>(), c.at("shape").get<Shape>(), c.at("key").get<std::string>()});

        std::ifstream st(dir + "randn.safetensors", std::ios::binary);
        if (!st) throw std::runtime_error("cannot open " + dir + "randn.safetensors");
        unsigned char len_bytes[8];
        st.read(reinterpret_cast<char*>(len_bytes), 8);
        uint64_t header_len = 0;
        for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
        std::string header(header_len, '\0');
        st.read(header.data(), static_cast<std::streamsize>(header_len));
        const std::vector<char> data((std::istreambuf_iterator<char>(st)), std::istreambuf_iterator<char>());
        const auto entries = nlohmann::json::parse(header);
        for (const auto& [name, info] : entries.items()) {
            if (name == "__metadata__") continue;
            if (info.at("dtype") != "F32") throw std::runtime_error(name + " is not F32");
            const auto begin = info.at("data_offsets").at(0).get<size_t>();
            const auto end = info.at("data_offsets").at(1).get<size_t>();
            if (end < begin || end > data.size() || (end - begin) % 4) throw std::runtime_error(name + ": bad offsets");
            std::vector<float> values((end - begin) / 4);
            std::memcpy(values.data(), data.data() + begin, end - begin);  // little-endian host assumed
            f.tensors[name] = std::move(values);
        }
        std::ifstream dj(dir + "randn_digests.json");
        if (!dj) throw std::runtime_error("cannot open " + dir + "randn_digests.json");
        const auto digests = nlohmann::json::parse(dj);  // kept: a range over a temporary's member would dangle
        for (const auto& [name, d] : digests.at("streams").items())
            f.digests[name] = {d.at("count").get<size_t>(), std::stoull(d.at("fnv1a64").get<std::string>(), nullptr, 16)};
        return f;
    }();
    return fixture;
}

inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

// Bit-for-bit comparison (distinguishes -0 from +0); reports the first few differences.
inline ::testing::AssertionResult bits_equal(const std::vector<float>& expected, const float* actual, size_t n) {
    if (expected.size() != n)
        return ::testing::AssertionFailure() << "size " << n << ", expected " << expected.size();
    size_t mismatches = 0;
    std::string first;
    for (size_t i = 0; i < n; ++i) {
        if (float_bits(expected[i]) == float_bits(actual[i])) continue;
        if (mismatches++ < 5)
            first += " [" + std::to_string(i) + "] " + std::to_string(actual[i]) + " vs " + std::to_string(expected[i]);
    }
    if (mismatches == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << mismatches << " of " << n << " values differ:" << first;
}

// The stream `name` of the fixture, bit for bit: its values where they are all kept, else its first values, its
// length and its digest.
inline ::testing::AssertionResult same_as_reference(const std::string& name, const float* actual, size_t n) {
    const RandnFixture& f = randn_fixture();
    const std::vector<float>& kept = f.tensors.at(name);
    const auto d = f.digests.find(name);
    if (d == f.digests.end()) return bits_equal(kept, actual, n);
    if (n != d->second.count) return ::testing::AssertionFailure() << "size " << n << ", expected " << d->second.count;
    if (auto head = bits_equal(kept, actual, kept.size()); !head) return head << " (among the first values)";
    if (fnv1a64(actual, n) != d->second.fnv1a64)
        return ::testing::AssertionFailure() << "the first " << kept.size() << " values match, later ones differ (digest)";
    return ::testing::AssertionSuccess();
}

}  // namespace kiln::testing
