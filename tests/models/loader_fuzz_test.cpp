// Seeded fuzzing of load_model: copies of the fixture models, each with one mutation (a config value
// of another type or an absurd size, a deleted key or file, flipped or cut bytes, renamed/deleted/
// reshaped/retyped tensors). A rejection must be a kiln::Error naming the user's file; anything else
// escaping (nlohmann::json exceptions, std::out_of_range, bad_alloc...) or a crash (the suite also runs
// under ASan/UBSan) is a bug. Loading is not a pass in itself: each mutation is classified as one a
// correct loader must reject (a missing or unexpected tensor, a wrong shape, integers where weights
// belong, a header that contradicts itself, a required file deleted or cut short) or one it cannot
// detect, with the reason (two same-shape weights swapped, F16 bytes relabelled BF16, a buffer
// inference never reads), and the first kind must be rejected. Deterministic: fixed seeds and counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/test_files.h"
#include "kiln/error.h"
#include "models/model.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using test::RawSafetensors;
using test::read_bytes;
using test::TempDir;
using test::write_bytes;

const fs::path kData = KILN_TEST_DATA;

// Loads `path` and says whether it loaded. A rejection must be a kiln::Error whose message names
// something under `named` (the copy of the model, so the user can tell which file is wrong).
bool loads(const fs::path& path, const LoadOptions& options, const fs::path& named, const std::string& mutation) {
    try {
        (void)load_model(path.string(), options);
        return true;
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(named.string()), std::string::npos)
            << mutation << ": the message does not name the file: " << e.what();
    } catch (const std::exception& e) {
        ADD_FAILURE() << mutation << ": non-kiln exception escaped load_model: " << e.what();
    } catch (...) {
        ADD_FAILURE() << mutation << ": unknown exception escaped load_model";
    }
    return false;
}

// The outcome of one mutated copy against what a correct loader must do with it. `undetectable` is
// null when the mutation must be rejected, else why a loader cannot tell the copy from a real model.
struct Tally {
    int cases = 0, must_reject = 0, rejected = 0;
    std::map<std::string, int> loaded_because;  // undetectable mutations that loaded, by reason

    void add(bool loaded, const char* undetectable, const std::string& mutation) {
        ++cases;
        if (!undetectable) {
            ++must_reject;
            EXPECT_FALSE(loaded) << mutation << ": loaded, but a correct loader must reject it";
        }
        if (!loaded) ++rejected;
        else if (undetectable) ++loaded_because[undetectable];
    }
    void print(const std::string& what) const {
        std::printf("[ fuzz     ] %s: %d cases, %d rejected (%d had to be)", what.c_str(), cases, rejected,
                    must_reject);
        for (const auto& [why, n] : loaded_because) std::printf("; %d loaded: %s", n, why.c_str());
        std::printf("\n");
    }
};

// The replacement values of a JSON value: each other type, and sizes no model has.
std::vector<nlohmann::json> replacement_values() {
    return {nullptr,
            "text",
            "",
            true,
            0,
            -1,
            -2147483649LL,
            2147483648LL,
            4294967296LL,
            9223372036854775807LL,
            1e30,
            -1e30,
            1e300,
            3.5,
            nlohmann::json::array(),
            nlohmann::json::array({1, 2}),
            nlohmann::json::array({nullptr}),
            nlohmann::json::array({"a", 2147483648LL}),
            nlohmann::json::object(),
            nlohmann::json::object({{"a", 1}})};
}

// Every place in a JSON document where a value sits: object members and array elements.
void collect_pointers(const nlohmann::json& j, const nlohmann::json::json_pointer& at,
                      std::vector<nlohmann::json::json_pointer>& out) {
    if (j.is_object()) {
        for (const auto& [key, value] : j.items()) {
            out.push_back(at / key);
            collect_pointers(value, at / key, out);
        }
    } else if (j.is_array()) {
        for (size_t i = 0; i < j.size(); ++i) {
            out.push_back(at / i);
            collect_pointers(j[i], at / i, out);
        }
    }
}

// Why a changed config or tokenizer file may still load: kiln cannot check every value against the
// weights (an eps, a scaling factor, a scheduler setting, a vocabulary entry) and ignores keys it does
// not use, so a flipped byte or a replaced or deleted value can describe a valid model.
constexpr const char* kConfigValue = "a config or vocabulary value changed (not checkable against the weights)";

// One random mutation of a file's text; `what` says which, `undetectable` why a correct loader may load
// the result (null: it must reject it).
std::string mutate_text(const std::string& text, bool is_json, std::mt19937_64& rng, std::string& what,
                        const char*& undetectable) {
    undetectable = kConfigValue;
    auto pick = [&rng](size_t n) { return static_cast<size_t>(rng() % n); };
    const int kind = is_json ? static_cast<int>(pick(5)) : static_cast<int>(pick(3));
    if (kind == 0 || text.empty()) {  // byte flip
        std::string out = text;
        if (out.empty()) return "x";
        const size_t i = pick(out.size());
        out[i] = static_cast<char>(out[i] ^ static_cast<char>(1u << pick(8)));
        what = "byte " + std::to_string(i) + " flipped";
        return out;
    }
    if (kind == 1) {  // truncation
        const size_t n = pick(text.size());
        what = "truncated to " + std::to_string(n) + " bytes";
        // JSON cut before its last character (not a trailing newline) is not JSON; a merges list cut short
        // is a smaller tokenizer.
        if (!is_json) undetectable = "merges.txt cut short (a tokenizer with fewer merges)";
        else if (text.find_first_not_of(" \t\r\n", n) != std::string::npos) undetectable = nullptr;
        return text.substr(0, n);
    }
    if (kind == 2 && !is_json) {  // a line deleted (merges.txt)
        size_t start = pick(text.size());
        start = text.rfind('\n', start);
        start = start == std::string::npos ? 0 : start + 1;
        size_t end = text.find('\n', start);
        end = end == std::string::npos ? text.size() : end + 1;
        what = "line at byte " + std::to_string(start) + " deleted";
        undetectable = "a merges.txt line deleted (a tokenizer with fewer merges)";
        return text.substr(0, start) + text.substr(end);
    }
    nlohmann::json j = nlohmann::json::parse(text);
    std::vector<nlohmann::json::json_pointer> places;
    collect_pointers(j, nlohmann::json::json_pointer(), places);
    if (places.empty()) {
        what = "replaced by an empty array";
        return "[]";
    }
    const auto& at = places[pick(places.size())];
    if (kind == 2) {  // key or element deleted
        j[at.parent_pointer()].erase(j[at.parent_pointer()].is_object()
                                         ? j[at.parent_pointer()].find(at.back())
                                         : j[at.parent_pointer()].begin() +
                                               static_cast<std::ptrdiff_t>(std::stoul(at.back())));
        what = at.to_string() + " deleted";
    } else {  // value replaced
        const auto values = replacement_values();
        const auto& v = values[pick(values.size())];
        j[at] = v;
        what = at.to_string() + " = " + v.dump();
    }
    return j.dump(1);
}

void fuzz_diffusers_folder(const std::string& model, uint64_t seed, int cases) {
    TempDir tmp;
    ASSERT_FALSE(tmp.path().empty());
    const fs::path dir = tmp.path() / "model";
    fs::copy(kData / model / "diffusers", dir, fs::copy_options::recursive);
    const bool xl = fs::exists(dir / "text_encoder_2");

    std::vector<std::string> files = {"model_index.json",
                                      "unet/config.json",
                                      "vae/config.json",
                                      "text_encoder/config.json",
                                      "scheduler/scheduler_config.json",
                                      "tokenizer/vocab.json",
                                      "tokenizer/merges.txt",
                                      "tokenizer/special_tokens_map.json",
                                      "tokenizer/tokenizer_config.json"};
    if (xl)
        for (const std::string f : {"text_encoder_2/config.json", "tokenizer_2/vocab.json", "tokenizer_2/merges.txt"})
            files.push_back(f);
    // Small configs get most cases: they are where values are read; the vocabulary is mostly data.
    std::vector<double> weights;
    for (const auto& f : files) weights.push_back(f.find("vocab") != std::string::npos ? 0.5 : 2.0);
    std::discrete_distribution<size_t> which(weights.begin(), weights.end());

    std::mt19937_64 rng(seed);
    Tally tally;
    for (int i = 0; i < cases; ++i) {
        const std::string rel = files[which(rng)];
        const fs::path file = dir / rel;
        const std::string original = read_bytes(file);
        std::string what;
        const char* undetectable = nullptr;
        if (rng() % 12 == 0) {
            fs::remove(file);
            what = "deleted";
            // tokenizer_config.json only names the pad token; every other file kiln reads is required.
            if (rel.ends_with("tokenizer_config.json")) undetectable = "tokenizer_config.json deleted (optional)";
        } else {
            const bool is_json = rel.ends_with(".json");
            write_bytes(file, mutate_text(original, is_json, rng, what, undetectable));
        }
        // special_tokens_map.json names the pad token only for folders without tokenizer_config.json.
        if (rel.ends_with("special_tokens_map.json"))
            undetectable = "special_tokens_map.json changed (unread beside tokenizer_config.json)";
        const std::string mutation = model + " case " + std::to_string(i) + ": " + rel + " " + what;
        SCOPED_TRACE(mutation);
        tally.add(loads(dir, {}, dir, mutation), undetectable, mutation);
        write_bytes(file, original);
    }
    tally.print(model + " diffusers folder");
    // The restored copy still loads: the cases above really started from a good model.
    EXPECT_NO_THROW(load_model(dir.string()));
}

// Bytes per element of the safetensors dtypes, and another dtype of each size.
size_t dtype_size(const std::string& d) {
    if (d == "F64" || d == "I64" || d == "U64") return 8;
    if (d == "F32" || d == "I32" || d == "U32") return 4;
    if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
    return 1;
}
std::vector<std::string> dtypes_of_size(size_t n) {
    if (n == 8) return {"F64", "I64", "U64"};
    if (n == 4) return {"F32", "I32", "U32"};
    if (n == 2) return {"F16", "BF16", "I16", "U16"};
    return {"U8", "I8", "BOOL"};
}

// Lays the data area out again from the header's shapes and dtypes, keeping each tensor's leading
// bytes (zero-filled when it grew), so that a reshaped tensor still makes a consistent file.
void repack(RawSafetensors& raw) {
    std::string data;
    for (auto& [name, entry] : raw.header.items()) {
        if (name == "__metadata__") continue;
        uint64_t n = dtype_size(entry["dtype"].get<std::string>());
        for (const auto& d : entry["shape"]) n *= d.get<uint64_t>();
        const auto& off = entry["data_offsets"];
        std::string bytes = raw.data.substr(off[0].get<uint64_t>(), off[1].get<uint64_t>() - off[0].get<uint64_t>());
        bytes.resize(n, '\0');
        entry["data_offsets"] = {data.size(), data.size() + n};
        data += bytes;
    }
    raw.data = std::move(data);
}

// A tensor name with one of its index numbers changed (input_blocks.4 -> input_blocks.40), or
// with a character added when it has no digits.
std::string renamed(const std::string& name, std::mt19937_64& rng) {
    std::vector<size_t> digits;
    for (size_t i = 0; i < name.size(); ++i)
        if (name[i] >= '0' && name[i] <= '9') digits.push_back(i);
    if (digits.empty()) return name + "_";
    const size_t i = digits[rng() % digits.size()];
    std::string out = name;
    switch (rng() % 3) {
        case 0: out.insert(i + 1, "0"); break;
        case 1: out[i] = static_cast<char>('0' + (out[i] - '0' + 1) % 10); break;
        default: out[i] = static_cast<char>('0' + (out[i] - '0' + 9) % 10); break;
    }
    return out;
}

// Tensors of the single files that inference never reads (the DDPM schedule's buffers, CLIP's position_ids
// and logit_scale, EMA copies): whatever is done to one of them leaves the model kiln runs unchanged. The
// same list as the loader's, stated here as what the test expects rather than read from the loader.
bool unread(const std::string& name) {
    static const std::set<std::string> ddpm = {
        "betas", "alphas_cumprod", "alphas_cumprod_prev", "sqrt_alphas_cumprod", "sqrt_one_minus_alphas_cumprod",
        "log_one_minus_alphas_cumprod", "sqrt_recip_alphas_cumprod", "sqrt_recipm1_alphas_cumprod",
        "posterior_variance", "posterior_log_variance_clipped", "posterior_mean_coef1", "posterior_mean_coef2",
        "model_ema.decay", "model_ema.num_updates", "logvar"};
    return ddpm.count(name) || name.starts_with("model_ema.") || name.ends_with("position_ids") ||
           name.ends_with("logit_scale");
}

// The VAE's attention projections, 1x1 convolutions in the original layout that diffusers keeps as linear
// layers: the loader drops their size-1 dims, so a size-1 dim more or less holds the same weights.
bool squeezed(const std::string& name) {
    return name.starts_with("first_stage_model.") && name.find(".attn_1.") != std::string::npos &&
           (name.ends_with(".q.weight") || name.ends_with(".k.weight") || name.ends_with(".v.weight") ||
            name.ends_with(".proj_out.weight"));
}

bool floating(const std::string& dtype) {
    return dtype == "F64" || dtype == "F32" || dtype == "F16" || dtype == "BF16";
}

nlohmann::json without_ones(const nlohmann::json& shape) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& d : shape)
        if (d.get<int64_t>() != 1) out.push_back(d);
    return out;
}

constexpr const char* kUnread = "a tensor inference never reads";

void fuzz_single_file(const std::string& model, const LoadOptions& options, uint64_t seed, int cases) {
    TempDir tmp;
    ASSERT_FALSE(tmp.path().empty());
    const RawSafetensors original = RawSafetensors::read(kData / model / (model + ".safetensors"));
    std::vector<std::string> names;
    for (const auto& [name, entry] : original.header.items())
        if (name != "__metadata__") names.push_back(name);
    const fs::path file = tmp.path() / (model + ".safetensors");

    std::mt19937_64 rng(seed);
    Tally tally;
    for (int i = 0; i < cases; ++i) {
        RawSafetensors raw = original;
        const std::string name = names[rng() % names.size()];
        auto& entry = raw.header[name];
        auto& shape = entry["shape"];
        const nlohmann::json old_shape = shape;
        std::string what;
        const char* undetectable = nullptr;
        switch (rng() % 6) {
            case 0: {  // renamed
                const std::string to = renamed(name, rng);
                what = "renamed to " + to;
                if (raw.header.contains(to)) {  // swapping two names keeps both, each with the other's data
                    const auto& other = raw.header[to];
                    const bool both_floating = floating(other["dtype"].get<std::string>()) &&
                                               floating(entry["dtype"].get<std::string>());
                    if (unread(name) && unread(to)) undetectable = kUnread;
                    else if (other["shape"] == shape && both_floating)
                        undetectable = "two weights of the same shape swapped (a valid model with other weights)";
                    std::swap(raw.header[to], raw.header[name]);
                } else {  // one name goes missing, one the loader does not know appears
                    if (unread(name) && unread(to)) undetectable = kUnread;
                    const nlohmann::ordered_json moved = entry;  // a copy: inserting may move the entries
                    raw.header.erase(name);
                    raw.header[to] = moved;
                }
                break;
            }
            case 1:
                raw.header.erase(name);
                what = "deleted";
                if (unread(name)) undetectable = kUnread;
                repack(raw);
                break;
            case 2: {  // one dim +-1
                if (shape.empty()) {
                    shape.push_back(2);
                } else {
                    const size_t d = rng() % shape.size();
                    const int64_t delta = rng() % 2 ? 1 : -1;
                    shape[d] = std::max<int64_t>(0, shape[d].get<int64_t>() + delta);
                }
                what = "shape " + shape.dump();
                if (unread(name)) undetectable = kUnread;
                if (shape == old_shape) undetectable = "no change (a dim of 0 made smaller)";
                repack(raw);
                break;
            }
            case 3:  // a dim added or removed
                if (!shape.empty() && rng() % 2) {
                    shape.erase(shape.size() - 1);
                } else {
                    shape.push_back(1 + rng() % 2);
                }
                what = "shape " + shape.dump();
                if (unread(name)) undetectable = kUnread;
                if (squeezed(name) && without_ones(shape) == without_ones(old_shape))
                    undetectable = "a size-1 dim added to or removed from a 1x1 convolution read as a linear layer";
                repack(raw);
                break;
            case 4: {  // another dtype of the same size: offsets stay valid
                const auto same = dtypes_of_size(dtype_size(entry["dtype"].get<std::string>()));
                entry["dtype"] = same[rng() % same.size()];
                what = "dtype " + entry["dtype"].dump();
                // F16 bytes read as BF16 (or the reverse) are numbers of the other type; integers are not weights.
                if (floating(entry["dtype"].get<std::string>()))
                    undetectable = "a weight relabelled as another floating type of its size";
                if (unread(name)) undetectable = kUnread;
                break;
            }
            default:  // an absurd dim with the data left as it was: the header contradicts itself
                if (shape.empty()) shape.push_back(1);
                shape[rng() % shape.size()] = rng() % 2 ? 2147483648LL : 4611686018427387904LL;
                what = "shape " + shape.dump() + " (offsets unchanged)";
                break;
        }
        const std::string mutation = model + " case " + std::to_string(i) + ": " + name + " " + what;
        SCOPED_TRACE(mutation);
        raw.write(file);
        tally.add(loads(file, options, file, mutation), undetectable, mutation);
    }
    tally.print(model + " single file");
    // The classification must leave the test something to check: with these seeds most mutations break
    // the model (a few hit the ~1% of unread tensors or relabel F16 as BF16).
    EXPECT_GT(tally.must_reject, cases / 2);
}

// Case counts keep the whole suite to ~15 s in Release (a fixture loads in 0.05-0.2 s).
// KILN_FUZZ_SCALE=n runs n times as many cases (same seeds, so the default cases come first).
int scaled(int cases) {
    const char* s = std::getenv("KILN_FUZZ_SCALE");
    const int n = s ? std::atoi(s) : 1;
    return cases * std::max(1, n);
}

TEST(LoaderFuzz, Sd15DiffusersFolder) { fuzz_diffusers_folder("sd15-mini", 1501, scaled(45)); }
TEST(LoaderFuzz, SdxlDiffusersFolder) { fuzz_diffusers_folder("sdxl-mini", 1502, scaled(35)); }
TEST(LoaderFuzz, Sd15SingleFile) { fuzz_single_file("sd15-mini", {}, 1503, scaled(25)); }
TEST(LoaderFuzz, Sd2SingleFile) { fuzz_single_file("sd2-mini", LoadOptions{"v_prediction", std::nullopt}, 1504, scaled(25)); }
TEST(LoaderFuzz, SdxlSingleFile) { fuzz_single_file("sdxl-mini", {}, 1505, scaled(25)); }

// A config that claims an absurd width must be rejected against the weights' shapes, not
// allocated: hidden_size 2^31 (and the other sizes) in each component's config.json.
TEST(LoaderFuzz, AbsurdConfigSizesAreRejectedNotAllocated) {
    TempDir tmp;
    ASSERT_FALSE(tmp.path().empty());
    const fs::path dir = tmp.path() / "model";
    fs::copy(kData / "sd15-mini" / "diffusers", dir, fs::copy_options::recursive);
    const std::vector<std::pair<std::string, std::string>> edits = {
        {"text_encoder/config.json", "hidden_size"},       {"text_encoder/config.json", "intermediate_size"},
        {"text_encoder/config.json", "vocab_size"},        {"text_encoder/config.json", "max_position_embeddings"},
        {"text_encoder/config.json", "num_hidden_layers"}, {"unet/config.json", "cross_attention_dim"},
        {"unet/config.json", "layers_per_block"},          {"unet/config.json", "block_out_channels"},
        {"unet/config.json", "norm_num_groups"},           {"unet/config.json", "in_channels"},
        {"vae/config.json", "block_out_channels"},         {"vae/config.json", "layers_per_block"},
        {"vae/config.json", "latent_channels"}};
    for (const auto& [rel, key] : edits) {
        for (const nlohmann::json& huge : {nlohmann::json(2147483648LL), nlohmann::json(1073741824),
                                           nlohmann::json(1e30)}) {
            const fs::path file = dir / rel;
            const std::string original = read_bytes(file);
            nlohmann::json j = nlohmann::json::parse(original);
            j[key] = j[key].is_array() ? nlohmann::json::array({huge, huge, huge, huge}) : huge;
            write_bytes(file, j.dump());
            const std::string mutation = rel + " " + key + " = " + huge.dump();
            try {
                (void)load_model(dir.string());
                ADD_FAILURE() << mutation << ": loaded";
            } catch (const Error& e) {
                EXPECT_NE(std::string(e.what()).find(dir.string()), std::string::npos)
                    << mutation << ": the message does not name the file: " << e.what();
            } catch (const std::exception& e) {
                ADD_FAILURE() << mutation << ": " << e.what();
            }
            write_bytes(file, original);
        }
    }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A weight stored as integers is not converted by value and run: it is InvalidModel, naming the tensor
// (as the file names it) and the file, in both layouts and for each component.
TEST(LoaderFuzz, IntegerWeightsAreRejectedNamingTensorAndFile) {
    TempDir tmp;
    ASSERT_FALSE(tmp.path().empty());
    auto expect_rejected = [](const fs::path& load, const fs::path& file, const std::string& tensor) {
        try {
            (void)load_model(load.string());
            ADD_FAILURE() << tensor << " as I16 loaded";
        } catch (const Error& e) {
            const std::string msg = e.what();
            EXPECT_EQ(e.kind(), ErrorKind::InvalidModel) << msg;
            for (const std::string& part : {tensor, file.string(), std::string("I16")})
                EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
        }
    };
    const fs::path single = tmp.path() / "sd15-mini.safetensors";
    for (const std::string tensor : {"model.diffusion_model.input_blocks.0.0.weight",
                                     "first_stage_model.decoder.conv_in.bias",
                                     "cond_stage_model.transformer.text_model.encoder.layers.0.mlp.fc1.weight"}) {
        RawSafetensors raw = RawSafetensors::read(kData / "sd15-mini" / "sd15-mini.safetensors");
        ASSERT_EQ(raw.header[tensor]["dtype"], "F16") << tensor;
        raw.header[tensor]["dtype"] = "I16";
        raw.write(single);
        expect_rejected(single, single, tensor);
    }
    const fs::path dir = tmp.path() / "model";
    fs::copy(kData / "sd15-mini" / "diffusers", dir, fs::copy_options::recursive);
    const fs::path unet = dir / "unet" / "diffusion_pytorch_model.safetensors";
    RawSafetensors raw = RawSafetensors::read(unet);
    ASSERT_EQ(raw.header["conv_in.weight"]["dtype"], "F16");
    raw.header["conv_in.weight"]["dtype"] = "I16";
    raw.write(unet);
    expect_rejected(dir, unet, "conv_in.weight");
}

// The UNet's widths are read from its first block; without it the loader used to read past an empty list
// (std::out_of_range) instead of naming what is missing.
TEST(LoaderFuzz, MissingFirstUNetBlockIsNamed) {
    TempDir tmp;
    ASSERT_FALSE(tmp.path().empty());
    const fs::path file = tmp.path() / "sd15-mini.safetensors";
    RawSafetensors raw = RawSafetensors::read(kData / "sd15-mini" / "sd15-mini.safetensors");
    raw.header.erase("model.diffusion_model.input_blocks.1.0.in_layers.2.weight");
    repack(raw);
    raw.write(file);
    try {
        (void)load_model(file.string());
        ADD_FAILURE() << "loaded without the UNet's first block";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidModel) << e.what();
        EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("down_blocks.0.resnets.0.conv1.weight"), std::string::npos) << e.what();
    }
}

// An index written with a leading zero ("up.00" for "up.0") is not the original layer's name: it must not
// load as that layer (nor, beside the real name, give one weight two tensors), for each component.
TEST(LoaderFuzz, LeadingZeroIndicesAreNotTheLayer) {
    TempDir tmp;
    ASSERT_FALSE(tmp.path().empty());
    const fs::path file = tmp.path() / "sd15-mini.safetensors";
    const std::pair<std::string, std::string> renames[] = {
        {"first_stage_model.decoder.up.0.block.1.conv1.weight", "first_stage_model.decoder.up.00.block.1.conv1.weight"},
        {"model.diffusion_model.input_blocks.1.0.in_layers.2.weight",
         "model.diffusion_model.input_blocks.01.0.in_layers.2.weight"},
        {"model.diffusion_model.middle_block.0.in_layers.2.weight",
         "model.diffusion_model.middle_block.00.in_layers.2.weight"},
        {"cond_stage_model.transformer.text_model.encoder.layers.0.mlp.fc1.weight",
         "cond_stage_model.transformer.text_model.encoder.layers.00.mlp.fc1.weight"}};
    for (const auto& [from, to] : renames) {
        for (bool keep_original : {false, true}) {
            RawSafetensors raw = RawSafetensors::read(kData / "sd15-mini" / "sd15-mini.safetensors");
            ASSERT_TRUE(raw.header.contains(from)) << from;
            const nlohmann::ordered_json entry = raw.header[from];
            if (!keep_original) raw.header.erase(from);
            raw.header[to] = entry;  // the same bytes under the second name
            raw.write(file);
            EXPECT_THROW(load_model(file.string()), Error) << to << (keep_original ? " beside " + from : "");
        }
    }
}

// A fused q/k/v projection with no rows (or none at all: a scalar) cannot be split in three; it
// used to divide by its zero row count (SIGFPE) or read dim 0 of a scalar.
TEST(LoaderFuzz, EmptyOrScalarFusedInProjIsRejected) {
    TempDir tmp;
    ASSERT_FALSE(tmp.path().empty());
    const std::string name = "cond_stage_model.model.transformer.resblocks.0.attn.in_proj_weight";
    const fs::path file = tmp.path() / "sd2-mini.safetensors";
    for (const nlohmann::json& shape : {nlohmann::json::array({0, 48}), nlohmann::json::array()}) {
        RawSafetensors raw = RawSafetensors::read(kData / "sd2-mini" / "sd2-mini.safetensors");
        raw.header[name]["shape"] = shape;
        repack(raw);
        raw.write(file);
        try {
            (void)load_model(file.string(), LoadOptions{"v_prediction", std::nullopt});
            ADD_FAILURE() << "loaded with in_proj_weight of shape " << shape.dump();
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
        }
    }
}

}  // namespace
}  // namespace kiln
