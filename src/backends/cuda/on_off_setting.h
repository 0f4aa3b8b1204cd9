// The CUDA backend's on/off environment settings (KILN_CUDA_PDL, KILN_CUDA_DEQUANT_AHEAD, KILN_CUDA_UPLOAD_AHEAD):
// null (unset), "" or "1" is on, "0" off; anything else is InvalidArgument naming the setting and its values.
#pragma once
#include <cstring>
#include <string>

#include "kiln/error.h"

namespace kiln::cuda::detail {

inline bool on_off_setting(const char* name, const char* value, const char* on_means, const char* off_means) {
    if (!value || !*value || std::strcmp(value, "1") == 0) return true;
    if (std::strcmp(value, "0") == 0) return false;
    fail(ErrorKind::InvalidArgument, std::string(name) + "=" + value + ": 1 " + on_means + " (the default), 0 " +
                                         off_means);
}

}  // namespace kiln::cuda::detail
