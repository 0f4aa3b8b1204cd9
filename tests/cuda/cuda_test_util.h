// Shared by the tests that run kiln's ops and models on the CUDA backend: the backend of cuda:0, or a
// skip naming why there is none (CI has no GPU).
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "core/backend.h"
#include "pipeline/compiled_backends.h"

namespace kiln::test {

// The first GPU's backend, or nullptr with *why set.
inline Backend* cuda_backend_or_null(std::string* why) {
    register_compiled_backends();
    std::vector<std::string> reasons;
    for (const DeviceDescription& d : list_devices(&reasons))
        if (!d.device.is_cpu()) return &backend_for(d.device);
    for (const std::string& r : reasons) *why += r + " ";
    if (why->empty()) *why = "no GPU";
    return nullptr;
}

}  // namespace kiln::test

#define KILN_CUDA_BACKEND_OR_SKIP(var)                                   \
    std::string var##_why;                                               \
    ::kiln::Backend* var = ::kiln::test::cuda_backend_or_null(&var##_why); \
    if (!var) GTEST_SKIP() << var##_why
