// The edges of kernels.h: bad arguments throw kiln::Error (InvalidArgument) before any runtime call, and
// empty problems return without one, so both hold on machines without a GPU; and a tensor of more than
// 2^31 elements is covered completely (64-bit indices), where a GPU with the memory is present.
#include <climits>
#include <functional>
#include <thread>

#include "backends/cuda/dependent_launch.h"
#include "backends/cuda/dequantize_ahead.h"
#include "backends/cuda/on_off_setting.h"
#include "cuda/kernel_test_support.h"

namespace kiln::cuda::test {
namespace {

int kind_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return static_cast<int>(e.kind());
    }
    return -1;
}

constexpr int kInvalid = static_cast<int>(ErrorKind::InvalidArgument);

// Never dereferenced: every call below fails its checks (or has nothing to do) first.
void* const P = reinterpret_cast<void*>(uintptr_t(4096));
float* const S = reinterpret_cast<float*>(uintptr_t(8192));

TEST(KernelsCudaArgs, NonStorageTypesAreRejected) {
    const DType bad = DType::I32;
    EXPECT_EQ(kind_of([&] { convert(P, bad, P, DType::F32, 4, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { convert(P, DType::F32, P, DType::F64, 4, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { activation(P, bad, 4, Activation::Silu, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { add(P, P, bad, 4, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { scale(P, bad, 4, 2.0f, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { add_channel_bias(P, P, bad, 1, 2, 2, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { geglu(P, P, bad, 2, 2, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { upsample_nearest2x(P, P, bad, 1, 2, 2, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { concat_channels(P, P, P, bad, 1, 1, 1, 2, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { nchw_to_nlc(P, P, bad, 1, 2, 2, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { nlc_to_nchw(P, P, bad, 1, 2, 2, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { softmax_lastdim(P, P, bad, 2, 2, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { layer_norm(P, P, P, P, bad, 2, 2, 1e-5f, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { group_norm_stats(P, bad, 1, 2, 2, 1, 1e-5f, S, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { group_norm_apply(P, S, P, P, P, bad, 1, 2, 2, 1, false, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { im2col(P, P, bad, 1, 3, 3, 3, 1, 1, 3, 3, 0, 9, nullptr, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { timestep_embedding(S, P, bad, 1, 4, false, 0.0f, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { find_nonfinite(P, bad, 4, reinterpret_cast<int*>(P), nullptr); }), kInvalid);
    // Even for an empty tensor.
    EXPECT_EQ(kind_of([&] { add(nullptr, nullptr, bad, 0, nullptr); }), kInvalid);
}

TEST(KernelsCudaArgs, BadSizesAndPointersAreRejected) {
    const DType t = DType::F16;
    EXPECT_EQ(kind_of([&] { add(P, P, t, -1, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { add(P, nullptr, t, 4, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { scale(nullptr, t, 4, 2.0f, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { add_channel_bias(P, P, t, 2, -3, 2, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { activation(P, t, 4, static_cast<Activation>(99), nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { concat_channels(P, nullptr, P, t, 1, 1, 1, 2, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { layer_norm(P, P, P, P, t, 2, 2, -1.0f, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { group_norm_stats(P, t, 1, 6, 2, 4, 1e-5f, S, nullptr); }), kInvalid);  // 4 does not divide 6
    EXPECT_EQ(kind_of([&] { group_norm_stats(P, t, 1, 6, 2, 0, 1e-5f, S, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { group_norm_apply(P, nullptr, P, P, P, t, 1, 2, 2, 1, true, nullptr); }), kInvalid);
    // im2col: k, stride, padding, and the pixel range within the output.
    EXPECT_EQ(kind_of([&] { im2col(P, P, t, 1, 3, 3, 0, 1, 1, 3, 3, 0, 9, nullptr, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { im2col(P, P, t, 1, 3, 3, 3, 0, 1, 3, 3, 0, 9, nullptr, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { im2col(P, P, t, 1, 3, 3, 3, 1, -1, 3, 3, 0, 9, nullptr, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { im2col(P, P, t, 1, 3, 3, 3, 1, 1, 3, 3, 1, 9, nullptr, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { im2col(P, P, t, 1, 3, 3, 3, 1, 1, 3, 3, -1, 2, nullptr, nullptr); }), kInvalid);
    const Im2colNorm no_groups{S, P, P, 0}, no_stats{nullptr, P, P, 1};
    EXPECT_EQ(kind_of([&] { im2col(P, P, t, 2, 3, 3, 3, 1, 1, 3, 3, 0, 9, &no_groups, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { im2col(P, P, t, 2, 3, 3, 3, 1, 1, 3, 3, 0, 9, &no_stats, nullptr); }), kInvalid);
    // timestep_embedding: dim >= 1, and half - shift must not be 0 (dim 2 or 3 with shift 1).
    EXPECT_EQ(kind_of([&] { timestep_embedding(S, P, t, 1, 0, false, 0.0f, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { timestep_embedding(S, P, t, 1, 3, false, 1.0f, nullptr); }), kInvalid);
    EXPECT_EQ(kind_of([&] { timestep_embedding(nullptr, P, t, 1, 4, false, 0.0f, nullptr); }), kInvalid);
    // from_nhwc: image_bias rows narrower than the channels; out_bias without accumulate.
    EXPECT_EQ(kind_of([&] { from_nhwc(P, P, P, t, 1, 4, 8, nullptr, false, P, 7); }), kInvalid);
    EXPECT_EQ(kind_of([&] { from_nhwc(P, P, P, t, 1, 4, 8, nullptr, false, nullptr, 0, P); }), kInvalid);
}

TEST(KernelsCudaArgs, EmptyProblemsDoNothing) {
    const DType t = DType::BF16;
    EXPECT_NO_THROW(convert(nullptr, t, nullptr, DType::F32, 0, nullptr));
    EXPECT_NO_THROW(activation(nullptr, t, 0, Activation::Gelu, nullptr));
    EXPECT_NO_THROW(add(nullptr, nullptr, t, 0, nullptr));
    EXPECT_NO_THROW(scale(nullptr, t, 0, 2.0f, nullptr));
    EXPECT_NO_THROW(add_channel_bias(nullptr, nullptr, t, 2, 3, 0, nullptr));
    EXPECT_NO_THROW(geglu(nullptr, nullptr, t, 4, 0, nullptr));
    EXPECT_NO_THROW(upsample_nearest2x(nullptr, nullptr, t, 3, 0, 4, nullptr));
    EXPECT_NO_THROW(concat_channels(nullptr, nullptr, nullptr, t, 2, 0, 0, 4, nullptr));
    EXPECT_NO_THROW(nchw_to_nlc(nullptr, nullptr, t, 0, 3, 3, nullptr));
    EXPECT_NO_THROW(nlc_to_nchw(nullptr, nullptr, t, 1, 0, 3, nullptr));
    EXPECT_NO_THROW(softmax_lastdim(nullptr, nullptr, t, 0, 8, nullptr));
    EXPECT_NO_THROW(layer_norm(nullptr, nullptr, nullptr, nullptr, t, 3, 0, 1e-5f, nullptr));
    EXPECT_NO_THROW(group_norm_stats(nullptr, t, 0, 4, 4, 2, 1e-5f, nullptr, nullptr));
    EXPECT_NO_THROW(group_norm_apply(nullptr, nullptr, nullptr, nullptr, nullptr, t, 1, 4, 0, 2, true, nullptr));
    EXPECT_NO_THROW(im2col(nullptr, nullptr, t, 3, 5, 5, 3, 1, 1, 5, 5, 25, 0, nullptr, nullptr));  // no pixels
    EXPECT_NO_THROW(im2col(nullptr, nullptr, t, 0, 5, 5, 3, 1, 1, 5, 5, 0, 25, nullptr, nullptr));  // no channels
    EXPECT_NO_THROW(timestep_embedding(nullptr, nullptr, t, 0, 320, true, 1.0f, nullptr));
    EXPECT_NO_THROW(find_nonfinite(nullptr, t, 0, nullptr, nullptr));
}

TEST(KernelsCudaArgs, DependentLaunchSettingIsZeroOrOne) {
    EXPECT_TRUE(detail::dependent_launch_wanted(nullptr));  // unset: the default
    EXPECT_TRUE(detail::dependent_launch_wanted(""));
    EXPECT_TRUE(detail::dependent_launch_wanted("1"));
    EXPECT_FALSE(detail::dependent_launch_wanted("0"));
    for (const char* bad : {"yes", "2", "00"}) {
        try {
            detail::dependent_launch_wanted(bad);
            ADD_FAILURE() << "KILN_CUDA_PDL=" << bad << " was accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find(std::string("KILN_CUDA_PDL=") + bad), std::string::npos) << e.what();
        }
    }
}

// The settings that turn the quantized weights' dequantization ahead and the streamed copies ahead off
// (dequantize_ahead.h, CudaBackend::upload_ahead) read the same way, naming themselves when wrong.
TEST(KernelsCudaArgs, AheadSettingsAreZeroOrOne) {
    EXPECT_TRUE(dequantize_ahead_wanted(nullptr));
    EXPECT_TRUE(dequantize_ahead_wanted("1"));
    EXPECT_FALSE(dequantize_ahead_wanted("0"));
    EXPECT_FALSE(detail::on_off_setting("KILN_CUDA_UPLOAD_AHEAD", "0", "on", "off"));
    for (const char* bad : {"off", "2"}) {
        try {
            dequantize_ahead_wanted(bad);
            ADD_FAILURE() << "KILN_CUDA_DEQUANT_AHEAD=" << bad << " was accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find(std::string("KILN_CUDA_DEQUANT_AHEAD=") + bad), std::string::npos);
        }
    }
}

// A library launch that lets no dependent start early is noted once, for the next kiln launch only (which then
// goes out plainly), and per thread.
TEST(KernelsCudaArgs, AnUntriggeredLibraryLaunchIsTakenOnce) {
    (void)detail::take_untriggered_library_launch();
    EXPECT_FALSE(detail::take_untriggered_library_launch());
    detail::note_untriggered_library_launch();
    bool elsewhere = true;
    std::thread([&] { elsewhere = detail::take_untriggered_library_launch(); }).join();
    EXPECT_FALSE(elsewhere);
    EXPECT_TRUE(detail::take_untriggered_library_launch());
    EXPECT_FALSE(detail::take_untriggered_library_launch());
}

// F16 values 0x3c3c (1.05859375) by the byte, 2^31 + 65 of them: indices past 2^31 must be reached.
TEST(KernelsCuda, MoreThan2To31ElementsAreAllCovered) {
    KILN_SKIP_WITHOUT_GPU();
    const int64_t n = (int64_t(1) << 31) + 65;
    size_t free_bytes = 0, total_bytes = 0;
    KILN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (free_bytes < size_t(n) * 2 + (size_t(1) << 30)) GTEST_SKIP() << "needs 5 GiB of free GPU memory";
    DeviceBuffer x(size_t(n) * 2), flag(sizeof(int));
    x.fill(0x3c);
    const int zero = 0;
    flag.upload(&zero, sizeof(int));
    auto read_flag = [&] {
        int f = 0;
        const std::vector<uint8_t> b = flag.download(sizeof(int));
        std::memcpy(&f, b.data(), sizeof(int));
        return f;
    };
    find_nonfinite(x.get(), DType::F16, n, flag.as<int>(), nullptr);
    EXPECT_EQ(read_flag(), 0);
    const uint16_t nan16 = 0x7e00;
    x.upload(&nan16, 2, size_t(n - 1) * 2);  // the very last element
    find_nonfinite(x.get(), DType::F16, n, flag.as<int>(), nullptr);
    EXPECT_EQ(read_flag(), 1);

    scale(x.get(), DType::F16, n, 2.0f, nullptr);  // 1.05859375 * 2 = 0x403c exactly
    for (int64_t at : {int64_t(0), (int64_t(1) << 31) - 1, int64_t(1) << 31, n - 2}) {
        const std::vector<uint8_t> b = x.download(2, size_t(at) * 2);
        EXPECT_EQ(uint16_t(b[0] | (b[1] << 8)), 0x403c) << "element " << at;
    }
    const std::vector<uint8_t> last = x.download(2, size_t(n - 1) * 2);
    EXPECT_EQ(uint16_t(last[0] | (last[1] << 8)) & 0x7c00, 0x7c00) << "NaN stays NaN";
}

}  // namespace
}  // namespace kiln::cuda::test
