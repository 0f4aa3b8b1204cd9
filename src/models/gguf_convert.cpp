#include "models/gguf_convert.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>

#include "kiln/error.h"
#include "models/clip/clip_single_file.h"
#include "models/diffusers_as_original.h"
#include "models/model.h"
#include "models/quant_policy.h"
#include "models/unet/unet_config.h"
#include "models/vae/vae_single_file.h"

namespace fs = std::filesystem;

namespace kiln {

namespace {

// The diffusers names the loader reads from one original-layout tensor, each with how it reads it.
using Uses = std::vector<std::pair<std::string, WeightMapping>>;

// file name -> its uses, from the tables the single-file loader builds (model_loader.cpp).
std::map<std::string, Uses> file_uses(const SafetensorsFile& file) {
    std::map<std::string, Uses> uses;
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

// `stored` and `shape`: the original-layout tensor's.
DType output_dtype(DType stored, const Shape& shape, const Uses& uses, DType want) {
    std::optional<DType> chosen;
    for (const auto& [internal, m] : uses) {
        // A transposed matrix's blocks would run along its other dimension (the policy keeps the one such
        // matrix, text_projection, 16-bit anyway).
        if (m.op == WeightMapping::Op::Transpose) return stored;
        Shape s;  // the shape the loader hands out (WeightMapping's ops)
        for (int64_t d : shape)
            if (m.op != WeightMapping::Op::Squeeze || d != 1) s.push_back(d);
        if (m.op == WeightMapping::Op::RowSlice && !s.empty()) s[0] /= m.parts;
        std::optional<DType> t = s.size() >= 2 ? std::optional<DType>(want) : std::nullopt;
        if (is_block_quantized(want)) {
            t = quantized_dtype(internal, s, want, /*innermost_blocks=*/true);
            if (t && shape.back() % dtype_block_values(*t) != 0) t.reset();  // a squeezed 1x1 conv's is 1
        }
        if (!t || (chosen && *chosen != *t)) return stored;  // fused parts treated apart are kept too
        chosen = t;
    }
    return chosen.value_or(stored);
}

// Adds the entry with the dtype it is written in: converted where the loader reads it (`uses`, null where it does not).
void add_entry(ConvertPlan& plan, ConvertEntry e, const Uses* uses, DType weights) {
    require(e.stored != DType::BOOL && e.stored != DType::U8, ErrorKind::Unsupported,
            e.file->path() + ": tensor " + quote_name(e.parts.front()) + " is " + dtype_name(e.stored) +
                ", which GGUF cannot hold");
    e.out.dtype = is_float(e.stored) && uses ? output_dtype(e.stored, e.out.shape, *uses, weights) : e.stored;
    if (e.out.dtype != e.stored) ++plan.converted[e.out.dtype];
    plan.entries.push_back(std::move(e));
}

ConvertPlan plan_single_file(const std::string& input, DType weights) {
    ConvertPlan plan;
    plan.inputs = {input};
    auto file = std::make_shared<const SafetensorsFile>(SafetensorsFile::open(input));
    const auto uses = file_uses(*file);
    for (const std::string& name : file->names()) {
        const TensorInfo& ti = file->info(name);
        const auto it = uses.find(name);
        add_entry(plan, ConvertEntry{GgufWriteSpec{name, ti.shape, ti.dtype}, file, {name}, ti.dtype, false},
                  it == uses.end() ? nullptr : &it->second, weights);
    }
    return plan;
}

// The original tensor's shape, from its parts' by the inverse of the loader's WeightMapping ops.
Shape original_shape(const std::string& name, const OriginalTensor& t) {
    const SafetensorsFile& file = *t.file;
    const auto& [first, m] = t.parts.front();
    Shape shape = file.info(first).shape;
    for (const auto& [part, pm] : t.parts) {
        const TensorInfo& ti = file.info(part);
        Shape rows_apart = ti.shape, first_apart = shape;
        if (!rows_apart.empty()) rows_apart[0] = first_apart[0] = 0;
        require(ti.dtype == file.info(first).dtype && rows_apart == first_apart && !ti.shape.empty(),
                ErrorKind::InvalidModel,
                file.path() + ": " + quote_name(part) + " (" + dtype_name(ti.dtype) + " " + shape_str(ti.shape) +
                    ") does not stack with " + quote_name(first) + " (" + dtype_name(file.info(first).dtype) + " " +
                    shape_str(file.info(first).shape) + ") into " + quote_name(name));
    }
    switch (m.op) {
        case WeightMapping::Op::Copy: break;
        case WeightMapping::Op::Squeeze: shape.insert(shape.end(), {1, 1}); break;  // [C,C] -> a 1x1 conv's [C,C,1,1]
        case WeightMapping::Op::Transpose:
            require(shape.size() == 2, ErrorKind::InvalidModel,
                    file.path() + ": " + quote_name(first) + " must be a matrix, not " + shape_str(shape));
            std::swap(shape[0], shape[1]);
            break;
        case WeightMapping::Op::RowSlice: shape[0] *= int64_t(t.parts.size()); break;
    }
    return shape;
}

ConvertPlan plan_folder(const std::string& dir, DType weights) {
    ConvertPlan plan;
    plan.folder = dir;
    for (const auto& [name, t] : diffusers_as_original(dir)) {
        if (std::find(plan.inputs.begin(), plan.inputs.end(), t.file->path()) == plan.inputs.end())
            plan.inputs.push_back(t.file->path());
        const DType stored = t.file->info(t.parts.front().first).dtype;  // every part's (original_shape checks)
        ConvertEntry e{GgufWriteSpec{name, original_shape(name, t), stored}, t.file, {}, stored,
                       t.parts.front().second.op == WeightMapping::Op::Transpose};
        for (const auto& [part, m] : t.parts) e.parts.push_back(part);
        add_entry(plan, std::move(e), &t.parts, weights);
    }
    return plan;
}

// The entry's values in its stored precision: its parts stacked along the rows, transposed where it is stored so.
Tensor assembled(const ConvertEntry& e) {
    const SafetensorsFile& file = *e.file;
    if (e.parts.size() == 1 && !e.transpose) return file.load_stored(e.parts.front());
    require(e.stored == DType::F32 || e.stored == DType::F16 || e.stored == DType::BF16, ErrorKind::Unsupported,
            file.path() + ": " + quote_name(e.parts.front()) + " is " + dtype_name(e.stored) +
                ": kiln convert stacks or transposes F32, F16 and BF16 tensors only");
    std::vector<uint8_t> bytes;
    for (const std::string& p : e.parts) bytes.insert(bytes.end(), file.raw(p), file.raw(p) + file.info(p).nbytes);
    if (e.transpose) {  // [a, b] as stored -> [b, a] = out.shape
        const size_t es = dtype_size(e.stored), a = size_t(e.out.shape[1]), b = size_t(e.out.shape[0]);
        std::vector<uint8_t> t(bytes.size());
        for (size_t i = 0; i < a; ++i)
            for (size_t j = 0; j < b; ++j) std::memcpy(&t[(j * a + i) * es], &bytes[(i * b + j) * es], es);
        bytes.swap(t);
    }
    if (e.stored == DType::F32) {
        Tensor t(e.out.shape);
        std::memcpy(t.data(), bytes.data(), bytes.size());
        return t;
    }
    std::vector<uint16_t> bits(bytes.size() / 2);
    std::memcpy(bits.data(), bytes.data(), bytes.size());
    return Tensor::from_bits16(e.out.shape, e.stored, std::move(bits));
}

}  // namespace

ConvertPlan plan_gguf_conversion(const std::string& input, DType weights) {
    require(fs::exists(input), ErrorKind::IO, "no such file or folder: " + input);
    return fs::is_directory(input) ? plan_folder(input, weights) : plan_single_file(input, weights);
}

void write_gguf_conversion(const ConvertPlan& plan, const std::string& output,
                           const std::function<void(size_t done, size_t total)>& progress) {
    for (const std::string& input : plan.inputs) {
        std::error_code ec;  // (an output that does not exist yet is not the input)
        require(!fs::equivalent(input, output, ec), ErrorKind::InvalidArgument,
                "the output " + output + " is the input file " + input + "; write to another name");
    }
    if (!plan.folder.empty()) {  // a new file there would change the folder too
        const fs::path dir = fs::canonical(plan.folder), out = fs::weakly_canonical(output);
        require(std::mismatch(dir.begin(), dir.end(), out.begin(), out.end()).first != dir.end(),
                ErrorKind::InvalidArgument,
                "the output " + output + " is inside the input folder " + plan.folder + ", which kiln convert "
                "never changes; write elsewhere");
    }
    std::vector<GgufWriteSpec> specs;
    for (const ConvertEntry& e : plan.entries) specs.push_back(e.out);
    auto produce = [&](size_t i, const GgufBytes& write) {
        const ConvertEntry& e = plan.entries[i];
        const SafetensorsFile& file = *e.file;
        if (e.out.dtype == e.stored && !e.transpose) {  // the stored bytes, row blocks one after the other
            for (const std::string& p : e.parts) write(file.raw(p), file.info(p).nbytes);
            return;
        }
        const Tensor stored = assembled(e);
        Tensor t;
        try {
            t = stored.converted(e.out.dtype);
        } catch (const Error& err) {  // a NaN or infinite weight: the input is damaged
            std::string names;
            for (const std::string& p : e.parts) names += (names.empty() ? "" : ", ") + quote_name(p);
            fail(ErrorKind::InvalidModel, file.path() + ": tensor " + names + ": " + err.what());
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
