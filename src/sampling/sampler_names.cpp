#include "sampling/sampler_names.h"

#include <cctype>
#include <map>
#include <vector>

#include "kiln/error.h"
#include "sampling/scheduler_config.h"

namespace kiln {
namespace {

// Lowercase, with '_' and '-' read as spaces and runs of spaces collapsed.
std::string normalized(const std::string& s) {
    std::string out;
    for (char ch : s) {
        char c = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        if (c == '_' || c == '-' || std::isspace(static_cast<unsigned char>(c))) c = ' ';
        if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
        out += c;
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
}

struct Entry {
    const char* kiln;
    const char* a1111;  // AUTOMATIC1111's label of the sampler without the schedule
};

// kiln name -> A1111 label of the base sampler.
const std::vector<Entry>& entries() {
    static const std::vector<Entry> table = {
        {"ddim", "DDIM"},          {"pndm", "PLMS"},          {"euler", "Euler"},
        {"euler_a", "Euler a"},    {"heun", "Heun"},          {"lms", "LMS"},
        {"dpmpp_2m", "DPM++ 2M"},  {"unipc", "UniPC"},        {"lcm", "LCM"},
    };
    return table;
}

const std::map<std::string, std::string>& aliases() {
    static const std::map<std::string, std::string> table = [] {
        std::map<std::string, std::string> m;
        for (const auto& name : kiln_sampler_names()) m[normalized(name)] = name;
        for (const auto& e : entries()) m[normalized(e.a1111)] = e.kiln;
        m["plms"] = "pndm";
        m["euler ancestral"] = "euler_a";
        m["dpmpp 2m"] = "dpmpp_2m";
        m["dpm++ 2m karras"] = "dpmpp_2m_karras";
        m["dpmpp 2m karras"] = "dpmpp_2m_karras";
        m["lms karras"] = "lms_karras";
        // AUTOMATIC1111's internal k-diffusion names, as old infotexts and APIs carry them.
        m["k euler"] = "euler";
        m["k euler a"] = "euler_a";
        m["k euler ancestral"] = "euler_a";
        m["k heun"] = "heun";
        m["k lms"] = "lms";
        m["k dpmpp 2m"] = "dpmpp_2m";
        return m;
    }();
    return table;
}

std::string valid_names() {
    std::string s;
    for (const auto& e : entries()) s += std::string(s.empty() ? "" : ", ") + "\"" + e.a1111 + "\"";
    s += ", \"DPM++ 2M Karras\", \"LMS Karras\"; or kiln names";
    for (const auto& n : kiln_sampler_names()) s += " " + n;
    return s;
}

bool ends_with_karras(const std::string& kiln) {
    const std::string suffix = "_karras";
    return kiln.size() > suffix.size() && kiln.compare(kiln.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string parse_sampler(const std::string& name, const std::string& schedule_type) {
    const auto it = aliases().find(normalized(name));
    require(it != aliases().end(), ErrorKind::InvalidArgument,
            "unknown sampler \"" + name + "\"; valid samplers: " + valid_names());
    const std::string kiln = it->second;
    const std::string schedule = normalized(schedule_type);
    if (schedule.empty() || schedule == "automatic" || schedule == "default") return kiln;
    require(schedule == "karras", ErrorKind::InvalidArgument,
            "unknown or unsupported schedule type \"" + schedule_type + "\"; valid schedule types: Automatic, Karras");
    if (ends_with_karras(kiln)) return kiln;
    const std::string karras = kiln + "_karras";
    for (const auto& n : kiln_sampler_names())
        if (n == karras) return karras;
    fail(ErrorKind::InvalidArgument, "sampler \"" + name +
                                         "\" has no Karras schedule (diffusers offers Karras sigmas for Euler, Heun, "
                                         "LMS, DPM++ 2M and UniPC)");
}

A1111SamplerLabel a1111_sampler_label(const std::string& kiln_sampler) {
    const bool karras = ends_with_karras(kiln_sampler);
    const std::string base = karras ? kiln_sampler.substr(0, kiln_sampler.size() - 7) : kiln_sampler;
    for (const auto& e : entries())
        if (base == e.kiln) {
            bool known = false;
            for (const auto& n : kiln_sampler_names()) known = known || n == kiln_sampler;
            if (known) return {e.a1111, karras ? "Karras" : "Automatic"};
        }
    fail(ErrorKind::InvalidArgument, "\"" + kiln_sampler + "\" is not a kiln sampler name; valid: " + valid_names());
}

int a1111_schedule_steps(const std::string& kiln_sampler, int steps) {
    const A1111SamplerLabel label = a1111_sampler_label(kiln_sampler);
    return label.sampler == "Heun" ? 2 * steps : steps;
}

}  // namespace kiln
