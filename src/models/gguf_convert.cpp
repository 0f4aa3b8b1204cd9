#include "models/gguf_convert.h"

#include <filesystem>
#include <optional>

#include "kiln/error.h"
#include "models/clip/clip_single_file.h"
#include "models/model.h"
#include "models/quant_policy.h"
#include "models/unet/unet_config.h"
#include "models/vae/vae_single_file.h"

namespace fs = std::filesystem;

namespace kiln {

namespace {

// file name -> the diffusers names it becomes, from the tables the single-file loader builds (model_loader.cpp).
std::map<std::string, std::vector<std::pair<std::string, WeightMapping>>> file_uses(const SafetensorsFile& file) {
    std::map<std::string, std::vector<std::pair<std::string, WeightMapping>>> uses;
    auto add = [&](const std::map<std::string, WeightMapping>& table) {
        for (const auto& [internal, m] : table) uses[m.file_name].emplace_back(internal, m);
    };
    const Architecture arch = detect_single_file_architecture(file);
    if (arch == Architecture::SD1) add(clip_hf_layout(file, kSd1ClipPrefix).table);
    if (arch == Architecture::SD2) add(openclip_layout(file, kSd2OpenClipPrefix).table);
    if (arch == Architecture::SDXL) {
        add(clip_hf_layout(file, kSdxlClipPrefix).table);
        add(openclip_layout(file, kSdxlOpenClipPrefix).table);
    }
    std::vector<std::string> unknown;
    add(unet_table_from_ldm(file, "model.diffusion_model.", &unknown));
    add(ldm_vae_layout(file, 0.18215f).table);  // the scale does not change the names
    return uses;
}

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64; }

DType output_dtype(const TensorInfo& ti, const std::vector<std::pair<std::string, WeightMapping>>& uses, DType want) {
    std::optional<DType> chosen;
    for (const auto& [internal, m] : uses) {
        // A transposed matrix's blocks would run along its other dimension (the policy keeps the one such
        // matrix, text_projection, 16-bit anyway).
        if (m.op == WeightMapping::Op::Transpose) return ti.dtype;
        Shape s;  // the shape the loader hands out (WeightMapping's ops)
        for (int64_t d : ti.shape)
            if (m.op != WeightMapping::Op::Squeeze || d != 1) s.push_back(d);
        if (m.op == WeightMapping::Op::RowSlice && !s.empty()) s[0] /= m.parts;
        std::optional<DType> t = s.size() >= 2 ? std::optional<DType>(want) : std::nullopt;
        if (is_block_quantized(want)) {
            t = quantized_dtype(internal, s, want, /*innermost_blocks=*/true);
            if (t && ti.shape.back() % dtype_block_values(*t) != 0) t.reset();  // a squeezed 1x1 conv's is 1
        }
        if (!t || (chosen && *chosen != *t)) return ti.dtype;  // fused parts treated apart are kept too
        chosen = t;
    }
    return chosen.value_or(ti.dtype);
}

}  // namespace

ConvertPlan plan_gguf_conversion(const std::string& input, DType weights) {
    require(fs::exists(input), ErrorKind::IO, "no such file or folder: " + input);
    require(!fs::is_directory(input), ErrorKind::Unsupported,
            input + " is a folder: kiln convert reads single-file checkpoints (.safetensors, .gguf) for now");
    ConvertPlan plan;
    plan.file = std::make_shared<const SafetensorsFile>(SafetensorsFile::open(input));
    const auto uses = file_uses(*plan.file);
    for (const std::string& name : plan.file->names()) {
        const TensorInfo& ti = plan.file->info(name);
        require(ti.dtype != DType::BOOL && ti.dtype != DType::U8, ErrorKind::Unsupported,
                input + ": tensor " + quote_name(name) + " is " + dtype_name(ti.dtype) + ", which GGUF cannot hold");
        const auto it = uses.find(name);
        const DType out = is_float(ti.dtype) && it != uses.end() ? output_dtype(ti, it->second, weights) : ti.dtype;
        if (out != ti.dtype) ++plan.converted[out];
        plan.entries.push_back(ConvertEntry{name, GgufWriteSpec{name, ti.shape, out}});
    }
    return plan;
}

void write_gguf_conversion(const ConvertPlan& plan, const std::string& output,
                           const std::function<void(size_t done, size_t total)>& progress) {
    const SafetensorsFile& file = *plan.file;
    std::error_code ec;  // (an output that does not exist yet is not the input)
    require(!fs::equivalent(file.path(), output, ec), ErrorKind::InvalidArgument,
            "the output " + output + " is the input file " + file.path() + "; write to another name");
    std::vector<GgufWriteSpec> specs;
    for (const ConvertEntry& e : plan.entries) specs.push_back(e.out);
    auto produce = [&](size_t i, const GgufBytes& write) {
        const ConvertEntry& e = plan.entries[i];
        const TensorInfo& ti = file.info(e.source_name);
        if (e.out.dtype == ti.dtype) return write(file.raw(e.source_name), ti.nbytes);
        Tensor t;
        try {
            t = file.load_stored(e.source_name).converted(e.out.dtype);
        } catch (const Error& err) {  // a NaN or infinite weight: the input is damaged
            fail(ErrorKind::InvalidModel, file.path() + ": tensor " + quote_name(e.source_name) + ": " + err.what());
        }
        const uint64_t bytes = uint64_t(dtype_storage_bytes(t.dtype(), t.numel()));
        write(is_block_quantized(t.dtype()) ? static_cast<const void*>(t.blocks())
              : t.dtype() == DType::F32     ? static_cast<const void*>(t.data())
                                            : static_cast<const void*>(t.bits16()),
              bytes);
    };
    write_gguf(output, specs, produce, {}, progress);
}

}  // namespace kiln
