// Which build of the product kernels runs a product (VulkanDeviceOps::run_product): the builds, the measured choice
// per shape (timed at a shape's first call, kept on disk by ProductChoices), and split-K's slices.
#include <algorithm>
#include <chrono>
#include <iterator>
#include <string>

#include "backends/vulkan/product_choices.h"
#include "backends/vulkan/spirv_table.h"
#include "backends/vulkan/vulkan_backend.h"
#include "backends/vulkan/vulkan_device_ops.h"
#include "backends/vulkan/vulkan_kernels.h"

namespace kiln::vulkan {

namespace {
struct ProductBuild {
    const char* variant;
    uint32_t tile_m, tile_n;
};
// kMatrixWide: sg32's 32x32 blocks in 128x128 tiles of 16 subgroups (gemm_coop.glsl, COOP_WIDE), a second matrix
// build the measured choice times beside the default one where the default is sg32 (session 21, H200: the UNet's
// convolutions 3-25% faster, some linears 24% slower; docs/VULKAN.md). kRows64 and kCols64: the 128x128 FMA tiles
// halved along rows or columns (gemm_tile.glsl): no empty half-tile where rows or columns end 64 past a multiple of
// 128 (SD's 320 channels), and twice the workgroups where 128x128 tiles leave multiprocessors idle (session 25).
constexpr ProductBuild kBuilds[] = {{"", 128, 128},         {"_small", 64, 64},  {"_coop", 128, 128},
                                    {"_direct", 32, 32},    {"_coopk_sg32w", 128, 128},
                                    {"_r64", 64, 128},      {"_c64", 128, 64}};
constexpr int kLarge = 0, kSmall = 1, kMatrix = 2, kDirect = 3, kMatrixWide = 4, kRows64 = 5, kCols64 = 6;
bool is_matrix(int build) { return build == kMatrix || build == kMatrixWide; }
// kBuilds' names in the file of choices kept on disk (ProductChoices); -1 for a name this build does not know.
constexpr const char* kBuildNames[] = {"large", "small", "matrix", "direct", "matrix_wide", "rows64", "cols64"};
int build_named(const std::string& name) {
    for (int b = 0; b < int(std::size(kBuildNames)); ++b)
        if (name == kBuildNames[b]) return b;
    return -1;
}
}  // namespace

void VulkanDeviceOps::run_product(const ProductKey& key, bool matrix, const ProductRun& run,
                                  const ProductRun* trial) const {
    using P = VulkanBackend::Products;
    matrix = matrix && backend_.physical().matrix_products;
    // The matrix build through VK_KHR_cooperative_matrix is the "_coopk" kernel (or "_coopk_<name>", a variant
    // under measurement: VulkanBackend::matrix_variant), through the NV extension "_coop".
    const std::string khr = "_coopk" + backend_.matrix_variant();
    auto go_with = [&](const ProductRun& r, int b) {
        if (b == kMatrix && backend_.physical().matrix_khr)
            return r(khr.c_str(), kBuilds[b].tile_m, backend_.matrix_tile_n());
        r(kBuilds[b].variant, kBuilds[b].tile_m, kBuilds[b].tile_n);
    };
    auto go = [&](int b) { go_with(run, b); };
    const std::string& name = std::get<0>(key);
    // Whether this product's kernel has build b (names end in _f16 or _f32).
    const auto embedded_build = [&](int b) {
        return embedded_kernel((name.substr(0, name.size() - 4) + kBuilds[b].variant + name.substr(name.size() - 4)).c_str());
    };
    switch (backend_.products()) {
        case P::Direct: return go(kDirect);
        case P::Large: return go(kLarge);
        case P::Small: return go(kSmall);
        case P::Matrix: return go(matrix ? kMatrix : kLarge);
        case P::Rows64: return go(embedded_build(kRows64) ? kRows64 : kLarge);
        case P::Cols64: return go(embedded_build(kCols64) ? kCols64 : kLarge);
        case P::Measured: break;
    }
    // The choice is kept per shape, not per matrix kernel: where the kernel selected now cannot take this product
    // (KILN_VULKAN_COOP changed to one without q8_0 kernels), the 128x128 tiles do.
    if (auto it = builds_.find(key); it != builds_.end()) return go(is_matrix(it->second) && !matrix ? kLarge : it->second);
    // No timing inside a recording, nor in a dry run (whose choice is not kept: a real call times the builds).
    if (backend_.recording_call() || backend_.dry_run()) return go(matrix ? kMatrix : kSmall);
    // The wide matrix tiles where the default matrix kernel is sg32 and this product has a wide build.
    const bool wide = matrix && wide_matrix_device_ && backend_.matrix_variant() == "_sg32" && embedded_build(kMatrixWide);
    // The half tiles where the matrix units do not take the product (the FMA path: float32, or a GPU without them);
    // beside the matrix units they never won (kiln_vulkan_products_bench, H200), so timing them would only lengthen
    // a first call.
    const bool rows64 = !matrix && embedded_build(kRows64), cols64 = !matrix && embedded_build(kCols64);
    const auto may_take = [&](int b) {
        return b == kLarge || b == kSmall || (b == kMatrix && matrix) || (b == kMatrixWide && wide) ||
               (b == kRows64 && rows64) || (b == kCols64 && cols64);
    };
    // A choice an earlier process timed on this device, driver and kiln build (kept beside the pipeline cache).
    ProductChoices& kept = backend_.kernels().product_choices();
    const std::string kept_key = name + " " + std::to_string(std::get<1>(key)) + " " + std::to_string(std::get<2>(key)) +
                                 " " + std::to_string(std::get<3>(key)) + " " + std::to_string(std::get<4>(key)) +
                                 " " + (matrix ? "matrix" + backend_.matrix_variant() : "fma");
    if (const auto b = kept.find(kept_key); b && may_take(build_named(*b))) {
        builds_[key] = build_named(*b);
        return go(builds_[key]);
    }
    // Each build once untimed (its pipeline is made, its caches warm), then once timed on the host clock
    // around a submit: the products that matter take milliseconds, the submit tens of microseconds.
    int best = -1, last = -1;
    double best_seconds = 0;
    const ProductRun& timed = trial ? *trial : run;
    for (int b : {kLarge, kSmall, kMatrix, kMatrixWide, kRows64, kCols64}) {
        if (!may_take(b)) continue;
        last = b;
        go_with(timed, b);
        backend_.finish();
        const auto start = std::chrono::steady_clock::now();
        go_with(timed, b);
        backend_.finish();
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (best < 0 || seconds < best_seconds) best = b, best_seconds = seconds;
    }
    builds_[key] = best;
    kept.record(kept_key, kBuildNames[best]);
    if (trial || best != last) go(best);  // the output is the chosen build's, as at every later call
}

VulkanDeviceOps::SplitK VulkanDeviceOps::split_k(int64_t tiles, int64_t k, int64_t outputs, int64_t batch) const {
    // Fewer workgroups than this leave a large GPU mostly idle (an H200 has 132 multiprocessors, an RX 580 36
    // compute units, each running several); a slice of fewer k than kMinSlice is not worth its partial sums.
    constexpr int64_t kEnoughTiles = 256, kMinSlice = 256, kMaxSlices = 16;
    int64_t want = backend_.split_k();
    if (want == 0) {
        if (tiles >= kEnoughTiles || k < 2 * kMinSlice) return {};
        want = std::min<int64_t>({(kEnoughTiles + tiles - 1) / tiles, k / kMinSlice, kMaxSlices});
    }
    if (want <= 1 || k < 64) return {};
    // Slices are whole multiples of every build's k step (32), so a slice's loads stay inside it.
    const int64_t kslice = ((k + want - 1) / want + 31) / 32 * 32, slices = (k + kslice - 1) / kslice;
    if (slices <= 1 || slices * outputs >= (int64_t(1) << 32) || slices * batch > 65535) return {};
    return {uint32_t(slices), uint32_t(kslice)};
}

bool VulkanDeviceOps::is_direct_build(const char* variant) { return std::string(variant) == kBuilds[kDirect].variant; }

}  // namespace kiln::vulkan
