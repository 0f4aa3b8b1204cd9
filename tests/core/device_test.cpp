// Device names and the backend registry as a machine without a GPU backend sees them (the core library
// alone: no backend is registered here), and what a host tensor says when asked for device storage.
#include <gtest/gtest.h>

#include "core/backend.h"
#include "core/tensor.h"
#include "kiln/error.h"

using namespace kiln;

TEST(Device, ParsesTheNamesUsersType) {
    EXPECT_TRUE(parse_device("cpu").is_cpu());
    EXPECT_EQ(parse_device("cuda"), (Device{DeviceKind::Cuda, 0}));
    EXPECT_EQ(parse_device("cuda:3"), (Device{DeviceKind::Cuda, 3}));
    EXPECT_EQ(device_name(Device{DeviceKind::Cuda, 12}), "cuda:12");
    EXPECT_EQ(device_name(Device{}), "cpu");
    for (const char* bad : {"", "gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1:2", "CPU", "cuda:99999"}) {
        try {
            parse_device(bad);
            ADD_FAILURE() << "accepted '" << bad << "'";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << bad;
            EXPECT_NE(std::string(e.what()).find("unknown device"), std::string::npos) << e.what();
        }
    }
}

TEST(Device, WithoutABackendAutoIsTheCpuAndCudaIsAClearError) {
    // No factory registered in this program: the CPU is all there is.
    std::vector<std::string> why;
    const std::vector<DeviceDescription> all = list_devices(&why);
    ASSERT_EQ(all.size(), 1u);
    EXPECT_TRUE(all[0].device.is_cpu());
    ASSERT_FALSE(why.empty());
    EXPECT_TRUE(resolve_device("auto").is_cpu());
    try {
        resolve_device("cuda:0");
        ADD_FAILURE() << "cuda:0 resolved without a backend";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
        EXPECT_NE(std::string(e.what()).find("cuda:0 is not available"), std::string::npos) << e.what();
    }
    EXPECT_THROW(backend_for(Device{}), Error);
}

TEST(Device, HostTensorsRefuseDeviceAccessAndCopyToHostAsThemselves) {
    Tensor t({2, 3}, {1, 2, 3, 4, 5, 6});
    EXPECT_FALSE(t.on_device());
    EXPECT_TRUE(t.device().is_cpu());
    EXPECT_THROW(t.device_data(), Error);
    EXPECT_THROW(t.backend(), Error);
    const Tensor h = t.to_host();
    EXPECT_EQ(h.values(), t.values());
    const Tensor f16 = t.converted(DType::F16);
    EXPECT_EQ(f16.to_host().values(), t.values());  // small integers are exact in fp16
}
