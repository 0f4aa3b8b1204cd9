#include "core/dtype.h"

#include "quant/block_formats.h"
#include "quant/k_quants.h"

namespace kiln {

namespace {
constexpr DType kAllDTypes[] = {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64,
                                DType::I32, DType::I16, DType::I8,  DType::U8,   DType::BOOL};
}

const char* dtype_name(DType dtype) {
    switch (dtype) {
        case DType::F64: return "F64";
        case DType::F32: return "F32";
        case DType::F16: return "F16";
        case DType::BF16: return "BF16";
        case DType::I64: return "I64";
        case DType::I32: return "I32";
        case DType::I16: return "I16";
        case DType::I8: return "I8";
        case DType::U8: return "U8";
        case DType::BOOL: return "BOOL";
        case DType::Q8_0: return "Q8_0";
        case DType::Q4_0: return "Q4_0";
        case DType::Q4_1: return "Q4_1";
        case DType::Q5_0: return "Q5_0";
        case DType::Q5_1: return "Q5_1";
        case DType::Q4_K: return "Q4_K";
        case DType::Q5_K: return "Q5_K";
        case DType::Q6_K: return "Q6_K";
        case DType::Q2_K: return "Q2_K";
        case DType::Q3_K: return "Q3_K";
    }
    return "?";
}

size_t dtype_size(DType dtype) {
    switch (dtype) {
        case DType::F64:
        case DType::I64: return 8;
        case DType::F32:
        case DType::I32: return 4;
        case DType::F16:
        case DType::BF16:
        case DType::I16: return 2;
        case DType::I8:
        case DType::U8:
        case DType::BOOL: return 1;
        case DType::Q8_0:
        case DType::Q4_0:
        case DType::Q4_1:
        case DType::Q5_0:
        case DType::Q5_1:
        case DType::Q4_K:
        case DType::Q5_K:
        case DType::Q6_K:
        case DType::Q2_K:
        case DType::Q3_K: return 0;
    }
    return 0;
}

bool is_block_quantized(DType dtype) { return dtype_block_bytes(dtype) != 0; }

size_t dtype_block_bytes(DType dtype) {
    switch (dtype) {
        case DType::Q8_0: return quant::kQ8_0Bytes;
        case DType::Q4_0: return quant::kQ4_0Bytes;
        case DType::Q4_1: return quant::kQ4_1Bytes;
        case DType::Q5_0: return quant::kQ5_0Bytes;
        case DType::Q5_1: return quant::kQ5_1Bytes;
        case DType::Q4_K: return quant::kQ4_KBytes;
        case DType::Q5_K: return quant::kQ5_KBytes;
        case DType::Q6_K: return quant::kQ6_KBytes;
        case DType::Q2_K: return quant::kQ2_KBytes;
        case DType::Q3_K: return quant::kQ3_KBytes;
        default: return 0;
    }
}

int64_t dtype_block_values(DType dtype) {
    switch (dtype) {
        case DType::Q8_0:
        case DType::Q4_0:
        case DType::Q4_1:
        case DType::Q5_0:
        case DType::Q5_1: return quant::kBlockValues;
        case DType::Q4_K:
        case DType::Q5_K:
        case DType::Q6_K:
        case DType::Q2_K:
        case DType::Q3_K: return quant::kKBlockValues;
        default: return 0;
    }
}

int64_t dtype_storage_bytes(DType dtype, int64_t numel) {
    if (is_block_quantized(dtype)) return numel / dtype_block_values(dtype) * int64_t(dtype_block_bytes(dtype));
    return numel * int64_t(dtype_size(dtype));
}

std::optional<DType> dtype_from_name(std::string_view name) {
    for (DType d : kAllDTypes)
        if (name == dtype_name(d)) return d;
    return std::nullopt;
}

}  // namespace kiln
