#include "pipeline/lora_selection.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "io/safetensors.h"
#include "kiln/error.h"
#include "text/extra_networks.h"
#include "text/python_float.h"
#include "text/unicode.h"

namespace fs = std::filesystem;

namespace kiln {

namespace {

// Python's str.lower().
std::string lower(const std::string& text) {
    std::u32string out;
    for (char32_t c : unicode::decode_utf8(text)) unicode::append_lowercase(out, c);
    return unicode::encode_utf8(out);
}

// The webui's natural_sort_key (modules/util.py): runs of ASCII digits compare as numbers, the text between
// them lowercased; a list that is a prefix of another sorts first.
bool natural_less(const std::string& a, const std::string& b) {
    auto split = [](const std::string& s) {
        std::vector<std::pair<bool, std::string>> parts{{false, ""}};  // (is a number, text) alternating
        for (char c : s) {
            const bool digit = c >= '0' && c <= '9';
            if (digit != parts.back().first) parts.push_back({digit, ""});
            parts.back().second.push_back(c);
        }
        for (auto& [number, text] : parts)
            if (!number) text = lower(text);
        return parts;
    };
    const auto x = split(a), y = split(b);
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
        if (x[i].first) {  // equal positions hold the same kind: the split alternates from a text part
            const std::string p = x[i].second.substr(std::min(x[i].second.find_first_not_of('0'), x[i].second.size() - 1));
            const std::string q = y[i].second.substr(std::min(y[i].second.find_first_not_of('0'), y[i].second.size() - 1));
            if (p.size() != q.size()) return p.size() < q.size();
            if (p != q) return p < q;
        } else if (x[i].second != y[i].second) {
            return x[i].second < y[i].second;
        }
    }
    return x.size() < y.size();
}

// The network files of a LoRA folder in the order the webui lists them (modules/util.py walk_files: every
// folder, the folder itself first, sorted by natural_sort_key of its path, each one's files likewise; .pt,
// .ckpt and .safetensors; hidden folders too, the default of "list_hidden_files").
std::vector<fs::path> network_files(const std::string& folder) {
    std::map<std::string, std::vector<std::string>> files_by_dir;
    files_by_dir[fs::path(folder).string()];
    std::error_code ec;
    const auto options = fs::directory_options::skip_permission_denied | fs::directory_options::follow_directory_symlink;
    for (auto it = fs::recursive_directory_iterator(folder, options, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
        std::error_code e;
        if (it->is_directory(e)) files_by_dir[it->path().string()];
        if (!it->is_regular_file(e)) continue;
        const std::string ext = lower(it->path().extension().string());
        if (ext == ".pt" || ext == ".ckpt" || ext == ".safetensors")
            files_by_dir[it->path().parent_path().string()].push_back(it->path().filename().string());
    }
    std::vector<std::string> dirs;
    for (const auto& entry : files_by_dir) dirs.push_back(entry.first);
    std::stable_sort(dirs.begin(), dirs.end(), natural_less);
    std::vector<fs::path> out;
    for (const std::string& dir : dirs) {
        std::vector<std::string> files = files_by_dir[dir];
        std::stable_sort(files.begin(), files.end(), natural_less);
        for (const std::string& f : files) out.push_back(fs::path(dir) / f);
    }
    return out;
}

// The alias the webui gives a network file: its safetensors metadata's ss_output_name, else its name.
std::string alias_of(const fs::path& file) {
    if (lower(file.extension().string()) != ".safetensors") return file.stem().string();
    try {
        const SafetensorsFile opened = SafetensorsFile::open(file.string());  // metadata() refers into it
        const std::map<std::string, std::string>& meta = opened.metadata();
        const auto it = meta.find("ss_output_name");
        if (it != meta.end()) return it->second;
    } catch (const Error&) {
        // Unreadable here: the name alone, and the loader names the problem if the file is used.
    }
    return file.stem().string();
}

// The file a tag's name means, as the webui's Lora extension finds it (extensions-builtin/Lora/networks.py:
// list_available_networks, load_networks). Every file is registered under its name (the stem; a later file
// of the same name replaces an earlier one) and under its alias; an alias met again, in any case, becomes
// "forbidden" ("none" is from the start), and a forbidden name is looked up by file name only.
std::string find_lora_file(const std::string& folder, const std::string& name) {
    const std::vector<fs::path> files = network_files(folder);
    std::string by_name;
    for (const fs::path& f : files)
        if (f.stem().string() == name) by_name = f.string();
    // A file of that name wins whatever the aliases are: were the name also another file's alias, it would be
    // forbidden and looked up by name.
    if (!by_name.empty()) return by_name;
    std::map<std::string, std::string> aliases;
    std::set<std::string> forbidden{"none", "Addams"};  // the webui's "Addams" never matches a lowercased name
    for (const fs::path& f : files) {
        const std::string alias = alias_of(f);
        if (aliases.count(alias)) forbidden.insert(lower(alias));
        aliases[f.stem().string()] = f.string();
        aliases[alias] = f.string();
    }
    const auto it = aliases.find(name);
    require(!forbidden.count(lower(name)) && it != aliases.end(), ErrorKind::IO,
            "no LoRA named '" + name + "' in " + folder +
                (forbidden.count(lower(name)) ? " (several files have that alias, so AUTOMATIC1111 looks it up by file name only)"
                                              : " (no NAME.safetensors, .pt or .ckpt there or in a subfolder, and no file with that ss_output_name)"));
    return it->second;
}

}  // namespace

std::vector<LoraApplication> loras_from_prompt(const std::string& prompt, const std::string& folder) {
    std::vector<LoraApplication> out;
    for (const ExtraNetworkTag& tag : remove_extra_network_tags(prompt).tags) {
        if (!is_lora_tag(tag)) continue;
        const LoraTag t = parse_lora_tag(tag);
        require(!folder.empty(), ErrorKind::InvalidArgument,
                tag.text + " names a LoRA, but no LoRA folder was given (--lora-dir DIR, where DIR holds " + t.name +
                    ".safetensors)");
        require(fs::is_directory(folder), ErrorKind::IO, "LoRA folder " + folder + " does not exist");
        out.push_back({find_lora_file(folder, t.name), t.name, t.te_multiplier, t.unet_multiplier});
    }
    return out;
}

LoraApplication lora_from_argument(const std::string& argument) {
    std::string path = argument;
    double weight = 1.0;
    const size_t colon = argument.rfind(':');
    if (colon != std::string::npos) {
        const std::optional<double> w = python::parse_float(std::string_view(argument).substr(colon + 1));
        if (w) {
            require(std::isfinite(*w), ErrorKind::InvalidArgument, "--lora " + argument + ": the weight is not finite");
            path = argument.substr(0, colon);
            weight = *w;
        }
    }
    require(fs::is_regular_file(path), ErrorKind::IO, "--lora: no such file: " + path);
    return {path, fs::path(path).stem().string(), weight, weight};
}

}  // namespace kiln
