#include "models/lora/lora_file.h"

#include <cmath>
#include <set>
#include <utility>

#include "io/safetensors.h"
#include "io/safetensors_header.h"
#include "kiln/error.h"
#include "ops/blas.h"

namespace kiln {

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
    return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}
void replace_all(std::string& s, const std::string& from, const std::string& to) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}

using KeyParts = LoraKeyParts;

// The parts each naming writes, normalised (A1111 reads PEFT's lora_A/lora_B as lora_down/lora_up too).
std::string normalised_part(const std::string& part) {
    if (part == "lora_down.weight" || part == "lora_A.weight" || part == "lora.down.weight" || part == "down.weight")
        return "down";
    if (part == "lora_up.weight" || part == "lora_B.weight" || part == "lora.up.weight" || part == "up.weight") return "up";
    return part;
}

}  // namespace

// kohya / A1111: "lora_unet_<path>.<part>"; diffusers / PEFT: "unet.<dotted path>.<part>".
std::optional<LoraKeyParts> lora_key_parts(const std::string& key) {
    static const std::pair<const char*, LoraComponent> kohya[] = {
        {"lora_unet_", LoraComponent::UNet}, {"lora_te1_", LoraComponent::TextEncoder},
        {"lora_te2_", LoraComponent::TextEncoder2}, {"lora_te_", LoraComponent::TextEncoder}};
    for (const auto& [prefix, component] : kohya) {
        if (!starts_with(key, prefix)) continue;
        const size_t dot = key.find('.');
        if (dot == std::string::npos) return std::nullopt;
        return KeyParts{component, key.substr(0, dot), key.substr(std::string(prefix).size(), dot - std::string(prefix).size()),
                        normalised_part(key.substr(dot + 1))};
    }
    static const std::pair<const char*, LoraComponent> diffusers[] = {
        {"unet.", LoraComponent::UNet}, {"text_encoder_2.", LoraComponent::TextEncoder2},
        {"text_encoder.", LoraComponent::TextEncoder}};
    static const char* const parts[] = {"lora_A.weight", "lora_B.weight", "lora.down.weight", "lora.up.weight",
                                        "lora_down.weight", "lora_up.weight", "alpha"};
    for (const auto& [prefix, component] : diffusers) {
        if (!starts_with(key, prefix)) continue;
        std::string part;
        for (const char* p : parts)
            if (ends_with(key, std::string(".") + p)) part = p;
        // diffusers' older attention processors: "attn1.processor.to_q_lora.down.weight".
        if (part.empty() && (ends_with(key, "_lora.down.weight") || ends_with(key, "_lora.up.weight")))
            part = ends_with(key, ".down.weight") ? "down.weight" : "up.weight";
        if (part.empty()) part = key.substr(key.rfind('.') + 1);  // an unknown part: named in the error
        const size_t begin = std::string(prefix).size();
        if (key.size() <= begin + part.size() + 1) return std::nullopt;
        const std::string module = key.substr(0, key.size() - part.size() - 1);
        std::string path = module.substr(begin);
        // diffusers' older attention processors: "attn1.processor.to_q_lora" is attn1.to_q.
        replace_all(path, ".processor.to_out_lora", ".to_out.0");
        for (const char* x : {"q", "k", "v"})
            replace_all(path, std::string(".processor.to_") + x + "_lora", std::string(".to_") + x);
        replace_all(path, ".", "_");
        return KeyParts{component, module, path, normalised_part(part)};
    }
    return std::nullopt;
}

namespace {

// The file's tensor as float32, checked: a floating-point dtype and finite values.
Tensor read_checked(const SafetensorsFile& file, const std::string& name) {
    const DType t = file.info(name).dtype;
    require(t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64, ErrorKind::InvalidModel,
            "LoRA tensor " + quote_name(name) + " in " + file.path() + " has dtype " + dtype_name(t) +
                "; LoRA weights are F32, F16, BF16 or F64");
    Tensor v = file.load(name);
    const float* p = std::as_const(v).data();
    for (int64_t i = 0; i < v.numel(); ++i)
        if (!std::isfinite(p[i]))
            fail(ErrorKind::InvalidModel, "LoRA tensor " + quote_name(name) + " in " + file.path() + " holds NaN or infinite values");
    return v;
}

// The first size and the product of the others: the matrix a factor stands for.
Tensor as_matrix(const Tensor& t, const std::string& what) {
    require(t.rank() == 2 || t.rank() == 4, ErrorKind::InvalidModel,
            what + " should be 2-d or 4-d, has shape " + shape_str(t.shape()));
    require(t.numel() > 0, ErrorKind::InvalidModel, what + " is empty");
    return t.reshaped({t.dim(0), t.numel() / t.dim(0)});
}

const char* unsupported_format(const std::string& part) {
    if (part == "lora_mid.weight" || part == "hada_t1" || part == "hada_t2" || part == "lokr_t2")
        return "Tucker-factored convolutions (LyCORIS' use_tucker / CP decomposition)";
    if (part == "on_input" || part == "weight") return "LyCORIS (IA)^3";
    if (part == "oft_blocks" || part == "oft_diag" || part == "rescale") return "OFT / BOFT";
    if (part == "diff" || part == "diff_b") return "full weight differences (LyCORIS 'full')";
    if (part == "dora_scale" || part == "lora_magnitude_vector") return "DoRA";
    if (part == "w_norm" || part == "b_norm") return "LyCORIS norm layers";
    if (starts_with(part, "a1.") || starts_with(part, "b1.")) return "GLoRA";
    return nullptr;
}

// One module's tensors (by normalised part) checked and put in matrix form.
LoraModule make_module(const KeyParts& where, std::map<std::string, std::pair<std::string, Tensor>> parts,
                       const std::string& path) {
    LoraModule m;
    m.key = where.module;
    m.component = where.component;
    m.path = where.path;
    auto what = [&](const std::string& part) { return "LoRA tensor " + quote_name(parts.at(part).first) + " in " + path; };
    for (const auto& [part, named] : parts) {
        if (const char* format = unsupported_format(part))
            fail(ErrorKind::Unsupported, "LoRA module '" + m.key + "' in " + path + " is " + format +
                                             ", which kiln does not apply (LoRA, LoCon, LoHa and LoKr only)");
        static const std::set<std::string> known = {"down",      "up",        "alpha",     "hada_w1_a", "hada_w1_b",
                                                    "hada_w2_a", "hada_w2_b", "lokr_w1",   "lokr_w1_a", "lokr_w1_b",
                                                    "lokr_w2",   "lokr_w2_a", "lokr_w2_b"};
        require(known.count(part) > 0, ErrorKind::InvalidModel,
                "LoRA tensor " + quote_name(named.first) + " in " + path + ": '" + part + "' is no part of a LoRA module kiln knows");
    }
    auto has = [&](const char* p) { return parts.count(p) > 0; };
    auto need = [&](const char* p) -> const Tensor& {
        require(has(p), ErrorKind::InvalidModel, "LoRA module '" + m.key + "' in " + path + " has no '" + p + "' tensor");
        return parts.at(p).second;
    };
    auto matrix = [&](const char* p) {
        const Tensor& t = need(p);  // first: what(p) needs the part to exist
        return as_matrix(t, what(p));
    };
    int64_t rank = 0;  // what alpha is divided by (A1111's dim); 0: no division
    if (has("down") || has("up")) {
        m.kind = LoraKind::LoRA;
        const Tensor down = matrix("down"), up = need("up");
        require(up.rank() == 2 || (up.rank() == 4 && up.dim(2) == 1 && up.dim(3) == 1), ErrorKind::InvalidModel,
                what("up") + " should be [out, rank] or [out, rank, 1, 1], has shape " + shape_str(up.shape()));
        require(up.dim(1) == down.dim(0), ErrorKind::InvalidModel,
                what("up") + " of shape " + shape_str(up.shape()) + " does not fit its down tensor of rank " +
                    std::to_string(down.dim(0)));
        rank = down.dim(0);
        m.out_features = up.dim(0);
        m.in_numel = down.dim(1);
        m.tensors = {{"down", down}, {"up", up.reshaped({up.dim(0), rank})}};
    } else if (has("hada_w1_a") || has("hada_w1_b") || has("hada_w2_a") || has("hada_w2_b")) {
        m.kind = LoraKind::LoHa;
        for (const char* w : {"hada_w1", "hada_w2"}) {
            const Tensor a = matrix((std::string(w) + "_a").c_str()), b = matrix((std::string(w) + "_b").c_str());
            require(a.dim(1) == b.dim(0), ErrorKind::InvalidModel,
                    what(std::string(w) + "_a") + " does not fit " + w + "_b (" + shape_str(a.shape()) + " @ " +
                        shape_str(b.shape()) + ")");
            if (m.out_features == 0) {
                m.out_features = a.dim(0), m.in_numel = b.dim(1);
                rank = b.dim(0);
            }
            require(a.dim(0) == m.out_features && b.dim(1) == m.in_numel, ErrorKind::InvalidModel,
                    "LoRA module '" + m.key + "' in " + path + ": hada_w1 and hada_w2 make matrices of other shapes");
            m.tensors[std::string(w) + "_a"] = a;
            m.tensors[std::string(w) + "_b"] = b;
        }
    } else if (has("lokr_w1") || has("lokr_w1_a") || has("lokr_w2") || has("lokr_w2_a")) {
        m.kind = LoraKind::LoKr;
        int64_t rows[2], cols[2];
        for (int i = 0; i < 2; ++i) {
            const std::string w = i == 0 ? "lokr_w1" : "lokr_w2";
            if (has(w.c_str())) {
                const Tensor whole = matrix(w.c_str());
                m.tensors[w] = whole;
                rows[i] = whole.dim(0), cols[i] = whole.dim(1);
                continue;
            }
            const Tensor a = matrix((w + "_a").c_str()), b = matrix((w + "_b").c_str());
            require(a.dim(1) == b.dim(0), ErrorKind::InvalidModel,
                    what(w + "_a") + " does not fit " + w + "_b (" + shape_str(a.shape()) + " @ " + shape_str(b.shape()) + ")");
            m.tensors[w + "_a"] = a;
            m.tensors[w + "_b"] = b;
            rows[i] = a.dim(0), cols[i] = b.dim(1);
            if (i == 1 || rank == 0) rank = b.dim(0);  // A1111: w2_b's rank, else w1_b's
        }
        m.out_features = rows[0] * rows[1];
        m.in_numel = cols[0] * cols[1];
    } else {
        fail(ErrorKind::InvalidModel, "LoRA module '" + m.key + "' in " + path + " has no weights (only alpha)");
    }
    if (has("alpha") && rank > 0) {
        const Tensor& alpha = parts.at("alpha").second;
        require(alpha.numel() == 1, ErrorKind::InvalidModel,
                what("alpha") + " should hold one number, has shape " + shape_str(alpha.shape()));
        m.scale = double(alpha.data()[0]) / double(rank);
    }
    return m;
}

}  // namespace

LoraFile read_lora_file(const std::string& path) {
    const SafetensorsFile file = SafetensorsFile::open(path);
    LoraFile out;
    out.path = path;
    std::map<std::string, KeyParts> where;  // by module name, in the file's (sorted) order
    std::map<std::string, std::map<std::string, std::pair<std::string, Tensor>>> parts;
    for (const std::string& name : file.names()) {
        const std::optional<KeyParts> k = lora_key_parts(name);
        if (!k) {
            out.unknown_keys.push_back(name);
            continue;
        }
        auto& module_parts = parts[k->module];
        require(!module_parts.count(k->part), ErrorKind::InvalidModel,
                "LoRA file " + path + " has two '" + k->part + "' tensors for module '" + k->module + "'");
        module_parts[k->part] = {name, read_checked(file, name)};
        where.emplace(k->module, *k);
    }
    std::set<std::pair<LoraComponent, std::string>> paths;
    for (auto& [module, module_parts] : parts) {
        const KeyParts& k = where.at(module);
        require(paths.insert({k.component, k.path}).second, ErrorKind::InvalidModel,
                "LoRA file " + path + " names module '" + module + "' twice (in two namings)");
        out.modules.push_back(make_module(k, std::move(module_parts), path));
    }
    require(!out.modules.empty(), ErrorKind::InvalidModel,
            path + " holds no LoRA modules (no lora_unet_/lora_te_ or unet./text_encoder. tensors)");
    return out;
}

namespace {

// a [m, k] @ b [k, n] in float32.
Tensor product(const Tensor& a, const Tensor& b) {
    Tensor c({a.dim(0), b.dim(1)});
    ops::blas::gemm(false, false, a.dim(0), b.dim(1), a.dim(1), 1.0f, a.data(), a.dim(1), b.data(), b.dim(1), 0.0f,
                    c.data(), b.dim(1));
    return c;
}

Tensor factor(const LoraModule& m, const std::string& w) {
    auto whole = m.tensors.find(w);
    return whole != m.tensors.end() ? whole->second : product(m.tensors.at(w + "_a"), m.tensors.at(w + "_b"));
}

}  // namespace

Tensor lora_delta(const LoraModule& m) {
    Tensor d;
    switch (m.kind) {
        case LoraKind::LoRA: d = product(m.tensors.at("up"), m.tensors.at("down")); break;
        case LoraKind::LoHa: {
            d = product(m.tensors.at("hada_w1_a"), m.tensors.at("hada_w1_b"));
            const Tensor w2 = product(m.tensors.at("hada_w2_a"), m.tensors.at("hada_w2_b"));
            float* p = d.data();
            const float* q = w2.data();
            for (int64_t i = 0; i < d.numel(); ++i) p[i] *= q[i];
            break;
        }
        case LoraKind::LoKr: {  // kron(w1, w2): row i*r2 + k, column j*c2 + l holds w1[i, j] * w2[k, l]
            const Tensor w1 = factor(m, "lokr_w1"), w2 = factor(m, "lokr_w2");
            const int64_t r1 = w1.dim(0), c1 = w1.dim(1), r2 = w2.dim(0), c2 = w2.dim(1);
            d = Tensor({r1 * r2, c1 * c2});
            float* p = d.data();
            const float *a = w1.data(), *b = w2.data();
            for (int64_t i = 0; i < r1; ++i)
                for (int64_t k = 0; k < r2; ++k)
                    for (int64_t j = 0; j < c1; ++j)
                        for (int64_t l = 0; l < c2; ++l)
                            p[(i * r2 + k) * (c1 * c2) + j * c2 + l] = a[i * c1 + j] * b[k * c2 + l];
            break;
        }
    }
    return d;
}

}  // namespace kiln
