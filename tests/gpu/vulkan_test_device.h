// The Vulkan device the Vulkan-only tests run on (tests/gpu/vulkan_*_test.cpp), and KILN_EXPECT_VULKAN.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/backend.h"
#include "gpu/linked_backends.h"
#if KILN_HAS_VULKAN
#include "backends/vulkan/physical_devices.h"
#endif

namespace kiln::test {

// CI installs lavapipe and glslc so that every Vulkan test runs; without this, a build that lost them
// would skip the tests and stay green.
inline bool vulkan_expected() {
    const char* v = std::getenv("KILN_EXPECT_VULKAN");
    return v && std::string(v) == "1";
}

#if KILN_HAS_VULKAN
// The first Vulkan device, or nullptr with a reason.
inline Backend* vulkan_or_null(std::string* why) {
    register_linked_backends();
    for (const DeviceDescription& d : list_devices())
        if (d.device.kind == DeviceKind::Vulkan) return &backend_for(d.device);
    vulkan::physical_devices(why);
    if (why->empty()) *why = "no Vulkan device";
    return nullptr;
}
#endif

}  // namespace kiln::test

#if KILN_HAS_VULKAN
#define KILN_VULKAN_OR_SKIP(var)                                                                     \
    std::string var##_why;                                                                           \
    Backend* var = ::kiln::test::vulkan_or_null(&var##_why);                                         \
    if (!var && ::kiln::test::vulkan_expected()) FAIL() << "KILN_EXPECT_VULKAN=1 but " << var##_why; \
    if (!var) GTEST_SKIP() << var##_why
#endif
