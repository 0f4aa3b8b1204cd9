#include "backends/vulkan/product_choices.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "backends/vulkan/spirv_table.h"

namespace kiln::vulkan {

namespace {
constexpr const char* kFormat = "kiln-vulkan-product-choices 1";
// Larger than any real file (a few hundred shapes of about 50 bytes): a bigger one is not ours.
constexpr std::uintmax_t kMaxFileBytes = 1 << 20;

// FNV-1a over every embedded kernel's name and SPIR-V: a kiln build whose kernels differ times its shapes again.
uint64_t kernels_hash() {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](const void* data, size_t n) {
        const auto* p = static_cast<const unsigned char*>(data);
        for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
    };
    for (const SpirvKernel& k : spirv_kernels()) {
        mix(k.name, std::strlen(k.name) + 1);
        mix(k.words, size_t(k.count) * sizeof(uint32_t));
    }
    return h;
}

bool plain_token(const std::string& s) {
    if (s.empty() || s.size() > 200) return false;
    for (char c : s)
        if (c <= ' ' || c > '~') return false;
    return true;
}
}  // namespace

std::string ProductChoices::header() {
    static const std::string h = [] {
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(kernels_hash()));
        return std::string(kFormat) + " " + hex;
    }();
    return h;
}

std::map<std::string, std::string> ProductChoices::parse(const std::string& text) {
    std::istringstream in(text);
    std::string line;
    if (!std::getline(in, line) || line != header()) return {};
    std::map<std::string, std::string> choices;
    while (std::getline(in, line)) {
        // "<key> <build>": the key is everything before the last space.
        const size_t space = line.rfind(' ');
        if (space == std::string::npos) return {};
        const std::string key = line.substr(0, space), build = line.substr(space + 1);
        if (key.empty() || key.size() > 400 || !plain_token(build)) return {};
        for (char c : key)
            if (c < ' ' || c > '~') return {};
        choices[key] = build;
    }
    return choices;
}

void ProductChoices::load() {
    loaded_ = true;
    if (file_.empty()) return;
    std::error_code ec;
    const std::uintmax_t size = std::filesystem::file_size(file_, ec);
    if (ec || size > kMaxFileBytes) return;
    std::ifstream f(file_, std::ios::binary);
    if (!f) return;
    std::ostringstream text;
    text << f.rdbuf();
    for (auto& [key, build] : parse(text.str())) choices_.emplace(key, build);  // recorded ones stay
}

std::optional<std::string> ProductChoices::find(const std::string& key) {
    if (!loaded_) load();
    const auto it = choices_.find(key);
    if (it == choices_.end()) return std::nullopt;
    return it->second;
}

void ProductChoices::record(const std::string& key, const std::string& build) {
    if (!loaded_) load();
    auto [it, added] = choices_.emplace(key, build);
    if (!added && it->second == build) return;
    it->second = build;
    dirty_ = true;
}

void ProductChoices::clear() {
    loaded_ = true;
    choices_.clear();
}

void ProductChoices::save() noexcept {
    if (!dirty_ || file_.empty()) return;
    dirty_ = false;
    try {
        std::error_code ec;
        std::filesystem::create_directories(std::filesystem::path(file_).parent_path(), ec);
        // Written beside and renamed over: two kiln processes never see half a file.
        const std::string tmp = file_ + ".tmp" + std::to_string(reinterpret_cast<uintptr_t>(this));
        {
            std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
            if (!out) return;
            out << header() << '\n';
            for (const auto& [key, build] : choices_) out << key << ' ' << build << '\n';
            if (!out) return;
        }
        std::filesystem::rename(tmp, file_, ec);
        if (ec) std::filesystem::remove(tmp, ec);
    } catch (...) {
        // An unwritable file only costs the next process its timings.
    }
}

}  // namespace kiln::vulkan
