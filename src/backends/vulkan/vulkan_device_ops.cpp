#include "backends/vulkan/vulkan_device_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "backends/vulkan/spirv_table.h"
#include "backends/vulkan/vulkan_backend.h"
#include "backends/vulkan/vulkan_kernels.h"
#include "ops/device_op_checks.h"
#include "ops/op_observer.h"
#include "ops/ops.h"
#include "ops/timestep_frequencies.h"

namespace kiln::vulkan {

// The other kernels' push constants.
struct MatmulParams {
    uint64_t a, b, c, bias, ws;
    uint32_t m, n, k;
    uint32_t sam, sak, sbk, sbn, scm, scn;
    uint32_t saz, sbz, scz;
    float alpha;
    uint32_t flags;  // 1: A's k contiguous, 2: B's k contiguous, 4: bias, 8 / 16: A / B read 8 at a time,
                     // 32: split-K's second pass, 64: C += the product (linear_add_)
    uint32_t slices, kslice;  // split-K
};

// The op's host span (ops::OpScope) and, while a profiler wants device spans, its GPU timestamps.
class VulkanDeviceOps::Timed {
public:
    Timed(VulkanBackend& backend, ops::OpKind kind, double flops = 0.0)
        : backend_(backend), scope_(kind, flops), gpu_(ops::device_spans_wanted() && !backend.recording_call()) {
        if (gpu_) backend_.time_begin(kind, flops);
    }
    ~Timed() {
        if (gpu_) backend_.time_end();
    }
    Timed(const Timed&) = delete;
    Timed& operator=(const Timed&) = delete;

private:
    VulkanBackend& backend_;
    ops::OpScope scope_;
    bool gpu_;
};

struct ConvParams {
    uint64_t x, w, bias, y, stats, gamma, beta, ws, bias2;
    uint32_t cin, h, wd, cout, oh, ow, ks, stride, pad, groups;  // h, wd: the input's size, upsampled or not
    // 1: bias, 2: GroupNorm + SiLU, 4 / 8: weights / input read 8 at a time (the matrix-unit build),
    // 16: split-K's second pass, 32: x upsampled 2x, 64: y += the result, 128: + bias2 per image and channel,
    // 256: input pixels read 4 or 8 of a row at once, 512: x is conv_columns.comp's columns for the batch's
    // pixels h .. h + wd - 1 (conv2d.comp)
    uint32_t flags;
    uint32_t slices, kslice;  // split-K
    uint32_t bias2_stride;    // bias2's values per image (0: the same for every image)
};
static_assert(sizeof(ConvParams) == kPushConstantBytes, "ConvParams fills the push constants exactly");

namespace {

using ops::bad_device_operands;
using ops::device_operand;
using ops::require_same_place;

// Shaders index with 32-bit unsigned integers, and the elementwise kernels' grid step must not wrap past 2^32.
uint32_t u32(int64_t v, const char* op, const Tensor& x) {
    if (v < 0 || v > kMaxKernelValues)
        bad_device_operands(op, x, device_operand("x", x) + " has more than " + std::to_string(kMaxKernelValues) +
                                       " values (too many for one Vulkan kernel's 32-bit indices)");
    return static_cast<uint32_t>(v);
}

std::string mib(int64_t bytes) { return std::to_string((bytes + (1 << 19)) >> 20) + " MiB"; }

std::string kernel(const char* base, const Tensor& t) {
    return std::string(base) + (t.dtype() == DType::F16 ? "_f16" : "_f32");
}

// Elementwise kernels loop over their elements with at most 65535 workgroups of 256.
uint32_t element_groups(int64_t n) { return static_cast<uint32_t>(std::clamp<int64_t>((n + 255) / 256, 1, 65535)); }

// Whether two device tensors share memory: a fused kernel writing `out` while it reads `in` would race.
bool overlaps(const Tensor& out, const Tensor* in) {
    if (!in || !out.on_device() || !in->on_device() || out.numel() == 0 || in->numel() == 0) return false;
    // Two buffers are two allocations (and a weight's address is not taken where it may be offloaded: a dry run).
    if (out.device_buffer() != in->device_buffer()) return false;
    const auto begin = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.device_data()); };
    const auto end = [&](const Tensor& t) { return begin(t) + uintptr_t(dtype_storage_bytes(t.dtype(), t.numel())); };
    return begin(out) < end(*in) && begin(*in) < end(out);
}

// Row kernels take one workgroup per row on a 2D grid.
struct RowGrid {
    uint32_t x, y;
};
RowGrid row_grid(int64_t rows) {
    const int64_t x = std::clamp<int64_t>(rows, 1, 65535);
    return {uint32_t(x), uint32_t((rows + x - 1) / x)};
}

// Push constants, laid out as the shaders declare them (device addresses first).
// conv_columns.comp's: a convolution's input written out as columns for the pixels first .. first + count - 1.
struct ColumnsParams {
    uint64_t x, cols, stats, gamma, beta;
    uint32_t cin, h, wd, oh, ow, ks, stride, pad, groups;
    uint32_t flags;  // ConvParams' 2 (GroupNorm + SiLU) and 32 (upsampled)
    uint32_t first, count;
};
struct NormStatsParams {
    uint64_t x, stats, ws;
    uint32_t count;
    float eps;
    uint32_t chunks, chunk, phase, groups;
};
struct ChannelSumsParams {
    uint64_t x, ws;
    uint32_t offset, stride, count, chunk, chunks, runs;
};
struct NormApplyParams {
    uint64_t x, y, stats, gamma, beta;
    uint32_t n, c, spatial, groups, to_nlc;
};
struct LayerNormParams {
    uint64_t x, y, gamma, beta;
    uint32_t rows, d;
    float eps;
};
struct SoftmaxParams {
    uint64_t x, y;
    uint32_t rows, len;
    float scale;
    uint32_t causal, queries, q0;
};
struct UnaryParams {
    uint64_t x;
    uint32_t n, op;
    float s;
};
struct BinaryParams {
    uint64_t a, b;
    uint32_t n, inner, nlc_c;  // nlc_c: b is [N, inner, nlc_c] tokens (add_nlc_); 0: b[i / inner]
};
struct GegluParams {
    uint64_t x, y;
    uint32_t n, d;
};
struct FlashAttentionParams {  // flash_attention.comp and flash_attention_coop.comp
    uint64_t q, k, v, o;
    uint32_t lq, lk, d, causal;
    uint32_t sq, sk, sv, so;
    float scale;
    uint32_t loads;  // values one load may take (1, 4 or 8): where every head's rows start aligned for them
};
struct LayoutParams {
    uint64_t a, b, y;
    uint32_t n, op, c, c2, h, w;
};



// Attention keeps its float32 scores for one block of queries under this. On the H200 (session 15, SD 1.5 UNet
// call, fp16) 256 / 128 / 64 / 32 MiB took 125.5 / 126.3 / 127.0 / 130.6 ms with the allocator holding 2784 /
// 2536 / 2418 / 2300 MiB: 64 MiB gives back 366 MiB for 1.2% of the time.
constexpr int64_t kScoreBudgetBytes = int64_t(64) << 20;

// flash_attention.comp: 64 queries per workgroup (or 128: its two-row-group builds, "_rg2", for heads of up to 64
// dimensions), builds for heads of up to 16 x 2, 3, 4, 5, 8, 10 and 16 dimensions, and the most shared memory a build
// declares (its vec4 array and its floats for V: 1088 vec4 and 2048 floats; with two row groups 2304 vec4 and 1536
// floats, for heads of up to 48, whose one step of 48 dimensions holds Q^T and K^T together).
// flash_attention_coop.comp takes 64 queries per workgroup too.
constexpr int64_t kFlashQueries = 64, kFlashMaxHead = 256;
constexpr int kFlashCols[] = {2, 3, 4, 5, 8, 10, 16};
constexpr uint32_t kFlashSharedBytes = 1088 * 16 + 2048 * 4, kWideFlashSharedBytes = 2304 * 16 + 1536 * 4;
// The FMA flash kernel's build for a head: the fewest output columns a thread that cover it (so heads of 40, 80 and
// 160 dimensions compute 48, 80 and 160 columns, not whole chunks of 64: session 24).
int flash_cols(int64_t head_dim) {
    for (int c : kFlashCols)
        if (16 * c >= head_dim) return c;
    return 0;
}
// The two row groups hold twice the registers (168 a thread on NVIDIA's driver for 64-dimension heads: one
// workgroup a multiprocessor) and make half the workgroups: H200, session 22, SD 1.5's first-level self-attention
// (512 workgroups of 128 queries) ran 8% faster with them, while heads of 80 and 160 dimensions on grids of 128 and
// 32 workgroups ran at 1-2 TFLOP/s. So they are taken where the grid still has this many workgroups.
constexpr int64_t kEnoughFlashGroups = 256;

// flash_attention_coop.comp, on the matrix units: builds for heads of up to 16 x 3, 4, 5, 8 and 10 dimensions, and
// the most shared memory one declares (10 tiles: K and V 2 x 32 x 21 uvec4, scratch 4 x 16 x 9 uvec4, 128 floats).
constexpr int kMatrixFlashTiles[] = {3, 4, 5, 8, 10};
constexpr int64_t kMatrixFlashMaxHead = 160;
// The wide matrix tiles' workgroup (kMatrixWide below): 512 threads and 36 KiB of shared memory (A's and B's
// 128 x 32 float16 operands in padded rows of 5 x 16 bytes, a 16x16 float32 staging for each of 16 subgroups),
// more than Vulkan's guaranteed minimums (128 threads, 16 KiB).
constexpr uint32_t kWideThreads = 512, kWideSharedBytes = 2 * 128 * 5 * 16 + 16 * 256 * 4;
constexpr uint32_t kMatrixFlashSharedBytes = 2 * 32 * 21 * 16 + 4 * 16 * 9 * 16 + 128 * 4;
int matrix_flash_tiles(int64_t head_dim) {
    for (int t : kMatrixFlashTiles)
        if (16 * t >= head_dim) return t;
    return 0;
}

}  // namespace

namespace {

// An on/off setting: unset, "" or "1" on, "0" off, anything else an InvalidArgument naming it and its values.
bool on_off_from_env(const char* name, const char* value, const char* on_means, const char* off_means) {
    const std::string v = value ? value : "";
    if (v.empty() || v == "1") return true;
    if (v == "0") return false;
    fail(ErrorKind::InvalidArgument,
         std::string(name) + "=" + v + ": expected 1 (" + on_means + ") or 0 (" + off_means + ")");
}

}  // namespace

bool fused_from_env(const char* value) {
    return on_off_from_env("KILN_VULKAN_FUSED", value, "fused ops as one kernel", "composed");
}

bool conv_columns_from_env(const char* value) {
    return on_off_from_env("KILN_VULKAN_CONV_COLUMNS", value, "the tiled builds' convolutions read columns written first",
                           "computed as the tiles load them");
}

bool conv_rows_from_env(const char* value) {
    return on_off_from_env("KILN_VULKAN_CONV_ROWS8", value, "convolutions read 4 or 8 pixels of a row at once",
                           "one at a time");
}

VulkanDeviceOps::VulkanDeviceOps(VulkanBackend& backend)
    : backend_(backend),
      fused_(fused_from_env(std::getenv("KILN_VULKAN_FUSED"))),
      conv_rows_(conv_rows_from_env(std::getenv("KILN_VULKAN_CONV_ROWS8"))),
      conv_columns_(conv_columns_from_env(std::getenv("KILN_VULKAN_CONV_COLUMNS"))),
      wide_matrix_device_(backend.physical().matrix_khr &&
                          backend.physical().properties.limits.maxComputeWorkGroupInvocations >= kWideThreads &&
                          backend.physical().properties.limits.maxComputeSharedMemorySize >= kWideSharedBytes),
      wide_flash_device_(backend.physical().properties.limits.maxComputeSharedMemorySize >= kWideFlashSharedBytes),
      matrix_flash_device_(backend.physical().matrix_khr && embedded_kernel("flash_attention_coopk_3_f16") &&
                           backend.physical().properties.limits.maxComputeSharedMemorySize >= kMatrixFlashSharedBytes) {}

uint64_t VulkanDeviceOps::bind(const Tensor& t, int64_t elements) const {
    // A kernel reads the operand from this address to the tensor's end: that span must be within what one
    // kernel operand may span (VulkanMemory::max_binding), else the indices would wrap. OutOfMemory, as for an
    // allocation past its limit: the same work in smaller pieces (the VAE decode's bands) fits.
    const int64_t elem = int64_t(dtype_size(t.dtype())), span = (t.numel() - elements) * elem;
    const int64_t limit = backend_.max_binding_bytes(elem);
    if (span > limit)
        fail(ErrorKind::OutOfMemory, device_name(t.device()) + ": a kernel operand of " + mib(span) + " (" +
                                         shape_str(t.shape()) + " " + dtype_name(t.dtype()) + ") is more than one kernel may read, " +
                                         mib(limit) + " (" + backend_.binding_limit_name() + ")");
    // A dry run (core/dry_run.h) dispatches nothing: no address is taken, so offloaded weights stay where they are.
    if (backend_.dry_run()) return 0;
    return reinterpret_cast<uint64_t>(ops::device_at(t, elements));
}
uint64_t VulkanDeviceOps::bind(const Tensor* t) const { return t ? bind(*t) : 0; }

template <class Params>
void VulkanDeviceOps::dispatch_product(const std::string& name, Params p, uint32_t gx, uint32_t gy, uint32_t batch,
                                       int64_t k, int64_t outputs, uint32_t sum_flag) const {
    const SplitK split = split_k(int64_t(gx) * gy * batch, k, outputs, batch);
    p.slices = split.slices, p.kslice = split.kslice;
    Tensor partials;  // freed after the second pass is queued: the stream's order keeps it until then
    if (split.slices > 1) {
        partials = Tensor::empty_on(backend_, {int64_t(split.slices) * outputs}, DType::F32);
        p.ws = bind(partials);
    }
    backend_.dispatch(name.c_str(), p, gx, gy, batch * split.slices);
    if (split.slices > 1) {
        p.flags |= sum_flag;
        backend_.dispatch(name.c_str(), p, gx, gy, batch);
    }
}

void VulkanDeviceOps::matmul(const MatmulParams& params, const char* base, const char* suffix, uint32_t batch) const {
    require((params.m + 31) / 32 <= 65535, ErrorKind::Unsupported, "vulkan: a product with more than 2M rows");
    // Every float16 product has a matrix-unit build (kernels.cmake). It reads 8 float16 values at once where
    // they are contiguous and 16-byte aligned (flags 8 for A, 16 for B; the shader ignores 8 on float32 A).
    const bool matrix = std::string(suffix) == "_f16" && (std::string(base) != "matmul_q8" || matrix_reads_q8());
    MatmulParams p = params;
    auto aligned = [&](uint64_t address, uint32_t stride, uint32_t batch_stride) {
        return address % 16 == 0 && stride % 8 == 0 && (batch == 1 || batch_stride % 8 == 0);
    };
    if ((p.flags & 1) && p.sak == 1 && aligned(p.a, p.sam, p.saz)) p.flags |= 8;
    if ((p.flags & 2) ? p.sbk == 1 && aligned(p.b, p.sbn, p.sbz) : p.sbn == 1 && aligned(p.b, p.sbk, p.sbz))
        p.flags |= 16;
    const auto run_into = [&](const MatmulParams& q) {
        return [&, q](const char* variant, uint32_t tile_m, uint32_t tile_n) {
            dispatch_product(std::string(base) + variant + suffix, q, (q.n + tile_n - 1) / tile_n,
                             (q.m + tile_m - 1) / tile_m, batch, q.k, int64_t(batch) * q.m * q.n, 32);
        };
    };
    const ProductRun run = run_into(p);
    if ((p.flags & 64) == 0) return run_product({std::string(base) + suffix, p.m, p.n, p.k, batch}, matrix, run);
    // Adding into C: timing runs (the first call of a shape in Measured mode) write a scratch copy's worth of
    // float32 values (room for either storage type), made only if they happen, and do not add.
    Tensor scratch;
    const ProductRun trial = [&](const char* variant, uint32_t tile_m, uint32_t tile_n) {
        if (scratch.empty()) {
            const int64_t extent = int64_t(batch - 1) * p.scz + int64_t(p.m - 1) * p.scm + int64_t(p.n - 1) * p.scn + 1;
            scratch = Tensor::empty_on(backend_, {extent}, DType::F32);
        }
        MatmulParams q = p;
        q.c = bind(scratch), q.flags &= ~64u;
        run_into(q)(variant, tile_m, tile_n);
    };
    run_product({std::string(base) + suffix, p.m, p.n, p.k, batch}, matrix, run, &trial);
}

bool VulkanDeviceOps::matrix_reads_q8() const {
    return backend_.physical().matrix_khr && backend_.matrix_variant() == "_sg32";
}

bool VulkanDeviceOps::reads_blocks(DType weight) const {
    return weight == DType::Q8_0 && backend_.q8_products() == VulkanBackend::Q8Products::Fused;
}

// A weight on x's device in x's dtype, or, where the products read it as blocks, in q8_0.
void VulkanDeviceOps::require_weight(const char* op, const Tensor& x, const Tensor& w) const {
    if (w.on_device() && w.device() == x.device() && reads_blocks(w.dtype())) return;
    require_same_place(op, x, w, "w");
}

namespace {
// linear's output shape for x and w: x's with the last dimension w's rows; InvalidArgument for other operands.
Shape linear_shape(const char* op, const Tensor& x, const Tensor& w) {
    if (x.rank() < 1 || w.rank() != 2 || x.dim(-1) != w.dim(1))
        bad_device_operands(op, x, device_operand("x", x) + " and " + device_operand("w", w));
    Shape shape = x.shape();
    shape.back() = w.dim(0);
    return shape;
}
}  // namespace

Tensor VulkanDeviceOps::linear(const Tensor& x, const Tensor& w, const Tensor* b) const {
    Tensor y = Tensor::empty_on(backend_, linear_shape("linear", x, w), x.dtype());
    linear_into("linear", x, w, b, y, false);
    return y;
}

void VulkanDeviceOps::linear_add_(Tensor& acc, const Tensor& x, const Tensor& w, const Tensor* b) const {
    const Shape shape = linear_shape("linear_add_", x, w);
    require_same_place("linear_add_", x, acc, "acc");
    if (acc.shape() != shape)
        bad_device_operands("linear_add_", x, device_operand("acc", acc) + " for the product's " + shape_str(shape));
    if (!fused_ || overlaps(acc, &x) || overlaps(acc, &w) || overlaps(acc, b))
        return DeviceOps::linear_add_(acc, x, w, b);
    linear_into("linear_add_", x, w, b, acc, true);
}

void VulkanDeviceOps::linear_into(const char* op, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y,
                                  bool accumulate) const {
    require_weight(op, x, w);
    const int64_t k = w.dim(1), n = w.dim(0), m = k ? x.numel() / k : 0;
    if (b) {
        require_same_place(op, x, *b, "b");
        if (b->numel() != n) bad_device_operands(op, x, device_operand("b", *b) + " for " + device_operand("w", w));
    }
    if (y.numel() == 0) return;
    Timed scope(backend_, ops::OpKind::Linear, 2.0 * double(m) * double(n) * double(k));
    MatmulParams p{};
    p.a = bind(x), p.b = bind(w), p.c = bind(y), p.bias = bind(b);
    p.m = u32(m, op, x), p.n = u32(n, op, x), p.k = u32(k, op, x);
    p.sam = p.k, p.sak = 1;  // x [m, k]
    p.sbk = 1, p.sbn = p.k;  // B(k, n) = w[n, k]
    p.scm = p.n, p.scn = 1;
    p.alpha = 1.0f;
    p.flags = 1 | 2 | (b ? 4 : 0) | (accumulate ? 64 : 0);
    matmul(p, w.dtype() == DType::Q8_0 ? "matmul_q8" : "matmul", x.dtype() == DType::F16 ? "_f16" : "_f32", 1);
}

Tensor VulkanDeviceOps::group_norm_stats(const Tensor& x, int groups, float eps) const {
    const int64_t n = x.dim(0), c = x.dim(1);
    if (groups < 1 || c % groups != 0)
        bad_device_operands("group_norm", x, std::to_string(groups) + " groups for " + device_operand("x", x));
    Tensor stats = Tensor::empty_on(backend_, {n, int64_t(groups), 2}, DType::F32);
    if (x.numel() == 0) return stats;
    const int64_t count = x.numel() / (n * groups), groups_total = n * groups;
    NormStatsParams p{bind(x), bind(stats), 0, u32(count, "group_norm", x), eps, 1, 0, 0, uint32_t(groups_total)};
    const std::string name = kernel("group_norm_stats", x);
    // Groups of 8192 values or more are reduced in chunks of 4096 by many workgroups (group_norm_stats.comp).
    constexpr int64_t kChunk = 4096;
    if (count < 2 * kChunk) {
        const RowGrid grid = row_grid(groups_total);
        backend_.dispatch(name.c_str(), p, grid.x, grid.y);
        return stats;
    }
    const int64_t chunks = (count + kChunk - 1) / kChunk;
    const Tensor ws = Tensor::empty_on(backend_, {2 * groups_total * chunks}, DType::F32);
    p.ws = bind(ws), p.chunks = uint32_t(chunks), p.chunk = uint32_t(kChunk);
    const RowGrid grid = row_grid(groups_total * chunks);
    for (uint32_t phase : {1u, 2u}) {
        p.phase = phase;
        backend_.dispatch(name.c_str(), p, grid.x, grid.y);
    }
    p.phase = 3;
    backend_.dispatch(name.c_str(), p, uint32_t((groups_total + 255) / 256));
    return stats;
}

Tensor VulkanDeviceOps::group_norm(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                   float eps) const {
    return group_norm_into("group_norm", x, groups, gamma, beta, eps, false);
}

Tensor VulkanDeviceOps::group_norm_to_nlc(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                          float eps) const {
    if (!fused_) return DeviceOps::group_norm_to_nlc(x, groups, gamma, beta, eps);
    if (x.rank() != 4) bad_device_operands("group_norm_to_nlc", x, device_operand("x", x) + " must be [N, C, H, W]");
    return group_norm_into("group_norm_to_nlc", x, groups, gamma, beta, eps, true);
}

Tensor VulkanDeviceOps::group_norm_into(const char* op, const Tensor& x, int groups, const Tensor& gamma,
                                        const Tensor& beta, float eps, bool to_nlc) const {
    if (x.rank() < 2 || gamma.numel() != x.dim(1) || beta.numel() != x.dim(1))
        bad_device_operands(op, x, device_operand("x", x) + ", " + device_operand("gamma", gamma));
    require_same_place(op, x, gamma, "gamma");
    require_same_place(op, x, beta, "beta");
    const int64_t n = x.dim(0), c = x.dim(1), spatial = n > 0 && c > 0 ? x.numel() / (n * c) : 0;
    Tensor y = Tensor::empty_on(backend_, to_nlc ? Shape{n, spatial, c} : x.shape(), x.dtype());
    if (y.numel() == 0) return y;
    Timed scope(backend_, ops::OpKind::GroupNorm);
    const Tensor stats = group_norm_stats(x, groups, eps);
    NormApplyParams p{bind(x), bind(y), bind(stats), bind(gamma), bind(beta), u32(x.numel(), op, x), uint32_t(c),
                      uint32_t(spatial), uint32_t(groups), to_nlc ? 1u : 0u};
    backend_.dispatch(kernel("group_norm_apply", x).c_str(), p, element_groups(x.numel()));
    return y;
}

Tensor VulkanDeviceOps::conv(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding,
                             const Tensor* stats, const Tensor* gamma, const Tensor* beta, int groups,
                             const ConvFusion& f) const {
    if (x.rank() != 4 || w.rank() != 4 || w.dim(1) != x.dim(1) || w.dim(2) != w.dim(3) || stride < 1 || padding < 0)
        bad_device_operands("conv2d", x, device_operand("x", x) + ", " + device_operand("w", w) + ", stride " +
                                             std::to_string(stride) + ", padding " + std::to_string(padding) +
                                             " (square kernels only)");
    require_weight("conv2d", x, w);
    const int64_t up = f.upsampled ? 2 : 1;  // the kernel reads the upsampled input through its index arithmetic
    const int64_t n = x.dim(0), cin = x.dim(1), h = up * x.dim(2), wd = up * x.dim(3), cout = w.dim(0), kk = w.dim(2);
    if (h + 2 * padding < kk || wd + 2 * padding < kk)
        bad_device_operands("conv2d", x, device_operand("x", x) + " is smaller than the kernel");
    if (b) {
        require_same_place("conv2d", x, *b, "b");
        if (b->numel() != cout) bad_device_operands("conv2d", x, device_operand("b", *b) + " for " + device_operand("w", w));
    }
    const int64_t oh = (h + 2 * padding - kk) / stride + 1, ow = (wd + 2 * padding - kk) / stride + 1;
    const Shape shape{n, cout, oh, ow};
    if (f.accumulate) {
        require_same_place("conv2d", x, *f.accumulate, "y");
        if (f.accumulate->shape() != shape)
            bad_device_operands("conv2d", x, device_operand("y", *f.accumulate) + " to add the convolution's " +
                                                 shape_str(shape) + " onto");
    }
    if (f.terms) {
        require_same_place("conv2d", x, *f.terms, "bias");
        // At least one row of cout values from terms_at on, and one per image where they differ by image.
        const int64_t rows = f.terms_stride ? n : 1, row = f.terms_stride ? f.terms_stride : cout;
        if (f.terms_at < 0 || f.terms_at + cout > row || rows * row != f.terms->numel())
            bad_device_operands("conv2d", x, device_operand("bias", *f.terms) + " at column " +
                                                 std::to_string(f.terms_at) + " for " + std::to_string(n) +
                                                 " images of " + std::to_string(cout) + " channels");
    }
    Tensor y = f.accumulate ? Tensor() : Tensor::empty_on(backend_, shape, x.dtype());
    Tensor& out = f.accumulate ? *f.accumulate : y;
    if (out.numel() == 0) return y;
    Timed scope(backend_, ops::OpKind::Conv2d, 2.0 * double(n) * double(cout) * double(oh * ow) * double(cin * kk * kk));
    u32(x.numel(), "conv2d", x), u32(out.numel(), "conv2d", out);
    ConvParams p{};
    p.x = bind(x), p.w = bind(w), p.bias = bind(b), p.y = bind(out), p.stats = bind(stats), p.gamma = bind(gamma),
    p.beta = bind(beta);
    p.cin = uint32_t(cin), p.h = uint32_t(h), p.wd = uint32_t(wd), p.cout = uint32_t(cout), p.oh = uint32_t(oh),
    p.ow = uint32_t(ow), p.ks = uint32_t(kk), p.stride = uint32_t(stride), p.pad = uint32_t(padding),
    p.groups = uint32_t(groups), p.slices = 1;
    p.flags = (b ? 1 : 0) | (stats ? 2 : 0) | (f.upsampled ? 32 : 0) | (f.accumulate ? 64 : 0) | (f.terms ? 128 : 0);
    if (f.terms) p.bias2 = bind(*f.terms, f.terms_at), p.bias2_stride = uint32_t(f.terms_stride);
    const bool q8 = w.dtype() == DType::Q8_0;  // read as blocks ("conv2d_q8": the FMA builds, and sg32's)
    if (p.w % 16 == 0 && (cin * kk * kk) % 8 == 0) p.flags |= 4;
    if (p.x % 16 == 0 && kk == 1 && stride == 1 && padding == 0 && !stats && !f.upsampled && (h * wd) % 8 == 0)
        p.flags |= 8;
    else if (ow % 8 == 0 && conv_rows_)
        p.flags |= 256;  // the 128x128 and matrix tiles read 4 or 8 pixels of a row at once (conv2d.comp: row_read)
    require(n <= 65535 && (cout + 31) / 32 <= 65535 && (oh * ow + 31) / 32 <= 65535, ErrorKind::Unsupported,
            "vulkan: conv2d of " + device_operand("x", x) + " exceeds the workgroup grid");
    const std::string suffix = x.dtype() == DType::F16 ? "_f16" : "_f32", base = q8 ? "conv2d_q8" : "conv2d";
    // The tiled builds read the input as columns written by a pass before them (conv_columns.comp) where whole
    // groups of 8 pixels line up; a 1x1 convolution read straight (flags & 8) needs none.
    const bool columns = conv_columns_ && (p.flags & 8) == 0 && ow % 8 == 0;
    const auto run_into = [&](const ConvParams& q) {
        return [&, q](const char* variant, uint32_t tile_m, uint32_t tile_n) {
            const std::string name = base + std::string(variant) + suffix;
            // Columns pay where two or more tiles of output channels read each value (H200: 1 x 128 x 512^2 -> 128
            // 57 -> 52 TFLOP/s through columns, 2 x 320 x 64^2 -> 320 38 -> 51; docs/VULKAN.md); not in the direct
            // build, which reads each value once a thread (devices that run on the CPU).
            if (columns && cout > tile_m && !is_direct_build(variant))
                return conv_from_columns(name, q, x.dtype() == DType::F16, n, tile_m, tile_n);
            dispatch_product(name, q, uint32_t((oh * ow + tile_n - 1) / tile_n), uint32_t((cout + tile_m - 1) / tile_m),
                             uint32_t(n), cin * kk * kk, out.numel(), 16);
        };
    };
    const ProductKey key{base + suffix, cout, oh * ow, cin * kk * kk, n};
    const ProductRun run = run_into(p);
    const bool matrix = x.dtype() == DType::F16 && (!q8 || matrix_reads_q8());
    if (!f.accumulate) {
        run_product(key, matrix, run);
        return y;
    }
    // Adding onto y: timing runs (a shape's first call in Measured mode) write to scratch and do not add.
    Tensor scratch;
    const ProductRun trial = [&](const char* variant, uint32_t tile_m, uint32_t tile_n) {
        if (scratch.empty()) scratch = Tensor::empty_on(backend_, {out.numel()}, DType::F32);  // room for either type
        ConvParams q = p;
        q.y = bind(scratch), q.flags &= ~64u;
        run_into(q)(variant, tile_m, tile_n);
    };
    run_product(key, matrix, run, &trial);
    return y;
}

void VulkanDeviceOps::conv_from_columns(const std::string& name, const ConvParams& p, bool f16, int64_t images,
                                        uint32_t tile_m, uint32_t tile_n) const {
    const int64_t k = int64_t(p.cin) * p.ks * p.ks, total = images * p.oh * p.ow, elem = f16 ? 2 : 4;
    // Chunks of at most 64 MiB of columns (an eighth of a --vram cap, at least 16 MiB), whole tiles of pixels.
    const int64_t limit = backend_.memory().limit();
    int64_t bytes = limit > 0 ? std::clamp<int64_t>(limit / 8, 16 << 20, 64 << 20) : int64_t(64) << 20;
    if (backend_.columns_chunk_bytes() > 0) bytes = backend_.columns_chunk_bytes();
    bytes = std::min(bytes, backend_.memory().max_binding(elem));
    const int64_t count = std::min(total, std::max<int64_t>(128, bytes / (elem * k) / 128 * 128));
    const Tensor cols = Tensor::empty_on(backend_, {k * count}, f16 ? DType::F16 : DType::F32);
    for (int64_t first = 0; first < total; first += count) {
        const uint32_t c = uint32_t(std::min(count, total - first));  // a multiple of 8: ow is
        const ColumnsParams cp{p.x,  bind(cols), p.stats, p.gamma, p.beta,   p.cin, p.h,           p.wd, p.oh,
                               p.ow, p.ks,       p.stride, p.pad,  p.groups, p.flags & (2u | 32u), uint32_t(first), c};
        backend_.dispatch(f16 ? "conv_columns_f16" : "conv_columns_f32", cp, element_groups(k * c / 8));
        ConvParams q = p;
        q.x = cp.cols, q.h = uint32_t(first), q.wd = c;
        q.flags = (p.flags & ~(2u | 32u | 256u)) | 512u;
        dispatch_product(name, q, (c + tile_n - 1) / tile_n, (p.cout + tile_m - 1) / tile_m, 1, k, int64_t(p.cout) * c, 16);
    }
}

Tensor VulkanDeviceOps::conv2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding) const {
    return conv(x, w, b, stride, padding, nullptr, nullptr, nullptr, 1, ConvFusion{});
}

namespace {
void check_norm_operands(const char* op, const Tensor& x, const Tensor& gamma, const Tensor& beta) {
    if (x.rank() != 4 || gamma.numel() != x.dim(1) || beta.numel() != x.dim(1))
        bad_device_operands(op, x, device_operand("x", x) + ", " + device_operand("gamma", gamma));
    require_same_place(op, x, gamma, "gamma");
    require_same_place(op, x, beta, "beta");
}
}  // namespace

Tensor VulkanDeviceOps::conv2d_group_norm_silu(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                               float eps, const Tensor& w, const Tensor* b, int stride,
                                               int padding) const {
    check_norm_operands("conv2d_group_norm_silu", x, gamma, beta);
    const Tensor stats = group_norm_stats(x, groups, eps);
    return conv(x, w, b, stride, padding, &stats, &gamma, &beta, groups, ConvFusion{});
}

void VulkanDeviceOps::conv2d_group_norm_silu_add_(Tensor& y, const Tensor& x, int groups, const Tensor& gamma,
                                                  const Tensor& beta, float eps, const Tensor& w, const Tensor* b,
                                                  int stride, int padding, const Tensor* y_bias) const {
    check_norm_operands("conv2d_group_norm_silu_add_", x, gamma, beta);
    if (!fused_ || overlaps(y, &x) || overlaps(y, y_bias))
        return DeviceOps::conv2d_group_norm_silu_add_(y, x, groups, gamma, beta, eps, w, b, stride, padding, y_bias);
    const Tensor stats = group_norm_stats(x, groups, eps);
    ConvFusion f;
    f.accumulate = &y, f.terms = y_bias;  // y_bias: one row for every image (stride 0)
    conv(x, w, b, stride, padding, &stats, &gamma, &beta, groups, f);
}

Tensor VulkanDeviceOps::conv2d_group_norm_silu_plus(const Tensor& x, int groups, const Tensor& gamma,
                                                    const Tensor& beta, float eps, const Tensor& w, const Tensor* b,
                                                    const Tensor& image_bias, int64_t at, int stride,
                                                    int padding) const {
    if (!fused_)
        return DeviceOps::conv2d_group_norm_silu_plus(x, groups, gamma, beta, eps, w, b, image_bias, at, stride, padding);
    check_norm_operands("conv2d_group_norm_silu_plus", x, gamma, beta);
    if (image_bias.rank() != 2)
        bad_device_operands("conv2d_group_norm_silu_plus", x, device_operand("image_bias", image_bias) + " is not [N, W]");
    const Tensor stats = group_norm_stats(x, groups, eps);
    ConvFusion f;
    f.terms = &image_bias, f.terms_at = at, f.terms_stride = image_bias.dim(1);  // image i's columns [at, at + cout)
    return conv(x, w, b, stride, padding, &stats, &gamma, &beta, groups, f);
}

Tensor VulkanDeviceOps::conv2d_affine_silu(const Tensor& x, const std::vector<float>& scale,
                                           const std::vector<float>& shift, const Tensor& w, const Tensor* b,
                                           int stride, int padding) const {
    if (!fused_) return DeviceOps::conv2d_affine_silu(x, scale, shift, w, b, stride, padding);
    if (x.rank() != 4 || int64_t(scale.size()) != x.dim(1) || int64_t(shift.size()) != x.dim(1))
        bad_device_operands("conv2d_affine_silu", x, device_operand("x", x) + " with " + std::to_string(scale.size()) +
                                                         " scales and " + std::to_string(shift.size()) + " shifts");
    const int64_t n = x.dim(0), c = x.dim(1);
    std::vector<float> unit(size_t(2 * n * c), 1.0f);  // (mean 0, 1/std 1) per image and channel
    for (size_t i = 0; i < unit.size(); i += 2) unit[i] = 0.0f;
    const Tensor stats = Tensor({n, c, 2}, std::move(unit)).to_device(backend_, DType::F32);
    const Tensor gamma = Tensor({c}, scale).to_device(backend_, x.dtype());
    const Tensor beta = Tensor({c}, shift).to_device(backend_, x.dtype());
    return conv(x, w, b, stride, padding, &stats, &gamma, &beta, int(c), ConvFusion{});
}

Tensor VulkanDeviceOps::conv2d_upsample2x(const Tensor& x, const Tensor& w, const Tensor* b, int stride,
                                          int padding) const {
    if (!fused_) return DeviceOps::conv2d_upsample2x(x, w, b, stride, padding);
    ConvFusion f;
    f.upsampled = true;
    return conv(x, w, b, stride, padding, nullptr, nullptr, nullptr, 1, f);
}

Tensor VulkanDeviceOps::layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) const {
    if (x.rank() < 1 || gamma.numel() != x.dim(-1) || beta.numel() != x.dim(-1))
        bad_device_operands("layer_norm", x, device_operand("x", x) + ", " + device_operand("gamma", gamma));
    require_same_place("layer_norm", x, gamma, "gamma");
    require_same_place("layer_norm", x, beta, "beta");
    Tensor y = Tensor::empty_on(backend_, x.shape(), x.dtype());
    if (y.numel() == 0) return y;
    Timed scope(backend_, ops::OpKind::LayerNorm);
    const int64_t d = x.dim(-1), rows = x.numel() / d;
    LayerNormParams p{bind(x), bind(y), bind(gamma), bind(beta), u32(rows, "layer_norm", x), uint32_t(d), eps};
    u32(x.numel(), "layer_norm", x);
    const RowGrid g = row_grid(rows);
    backend_.dispatch(kernel("layer_norm", x).c_str(), p, g.x, g.y);
    return y;
}

Tensor VulkanDeviceOps::softmax_lastdim(const Tensor& x) const {
    Tensor y = Tensor::empty_on(backend_, x.shape(), x.dtype());
    if (y.numel() == 0 || x.rank() == 0) return y;
    Timed scope(backend_, ops::OpKind::SoftmaxLastdim);
    const int64_t len = x.dim(-1), rows = x.numel() / len;
    SoftmaxParams p{bind(x), bind(y), u32(rows, "softmax_lastdim", x), uint32_t(len), 1.0f, 0, 1, 0};
    u32(x.numel(), "softmax_lastdim", x);
    const RowGrid g = row_grid(rows);
    backend_.dispatch(kernel("softmax", x).c_str(), p, g.x, g.y);
    return y;
}

bool VulkanDeviceOps::matrix_flash_runs(int64_t head_dim, DType dtype) const {
    return matrix_flash_device_ && backend_.attention() == VulkanBackend::Attention::Matrix && dtype == DType::F16 &&
           head_dim <= kMatrixFlashMaxHead;
}

bool VulkanDeviceOps::flash_attention_fits(int64_t head_dim, DType dtype) const {
    if (matrix_flash_runs(head_dim, dtype)) return true;
    using A = VulkanBackend::Attention;  // Matrix takes the FMA flash kernel where the matrix one does not run
    return backend_.attention() != A::Products && head_dim <= kFlashMaxHead &&
           backend_.physical().properties.limits.maxComputeSharedMemorySize >= kFlashSharedBytes;
}

void VulkanDeviceOps::flash_attention(const AttentionOperands& a, Tensor& out, int heads, bool causal) const {
    const int64_t lq = out.dim(1), hd = out.dim(2), d = hd / heads;
    FlashAttentionParams p{};
    p.q = a.q, p.k = a.k, p.v = a.v, p.o = bind(out);
    p.lq = uint32_t(lq), p.lk = uint32_t(a.lk), p.d = uint32_t(d), p.causal = causal ? 1u : 0u;
    p.sq = uint32_t(a.sq), p.sk = uint32_t(a.sk), p.sv = uint32_t(a.sv), p.so = uint32_t(hd);
    p.scale = 1.0f / std::sqrt(float(d));
    // n values a load where every head's rows of q, k and v start on n values' bytes.
    const int64_t value = int64_t(dtype_size(out.dtype()));
    const auto rows_start_on = [&](int64_t n) {
        return (a.q | a.k | a.v) % uint64_t(n * value) == 0 && d % n == 0 && a.sq % n == 0 && a.sk % n == 0 &&
               a.sv % n == 0;
    };
    p.loads = out.dtype() == DType::F16 && rows_start_on(8) ? 8u : rows_start_on(4) ? 4u : 1u;
    const bool matrix = matrix_flash_runs(d, out.dtype());
    bool wide = false;  // the FMA kernel's two row groups (kEnoughFlashGroups says when)
    const int cols = flash_cols(d);
    if (!matrix && cols <= 4 && wide_flash_device_) {
        const int asked = backend_.flash_queries();
        const int64_t wide_groups = (lq + 2 * kFlashQueries - 1) / (2 * kFlashQueries) * heads * out.dim(0);
        wide = asked == 128 || (asked == 0 && wide_groups >= kEnoughFlashGroups);
    }
    const int64_t per_group = wide ? 2 * kFlashQueries : kFlashQueries;
    const uint32_t groups = uint32_t((lq + per_group - 1) / per_group);
    const std::string name = matrix ? "flash_attention_coopk_" + std::to_string(matrix_flash_tiles(d)) + "_f16"
                                    : "flash_attention_c" + std::to_string(cols) + (wide ? "_rg2" : "") +
                                          (out.dtype() == DType::F16 ? "_f16" : "_f32");
    backend_.dispatch(name.c_str(), p, groups, uint32_t(heads), uint32_t(out.dim(0)));
}

Tensor VulkanDeviceOps::attention(const Tensor& q, const Tensor& k, const Tensor& v, int heads, bool causal) const {
    if (q.rank() != 3 || k.rank() != 3 || v.rank() != 3 || heads < 1 || q.dim(0) != k.dim(0) || k.shape() != v.shape() ||
        q.dim(2) != k.dim(2) || q.dim(2) % heads != 0)
        bad_device_operands("attention", q, device_operand("q", q) + ", " + device_operand("k", k) + ", " +
                                                device_operand("v", v) + ", " + std::to_string(heads) + " heads");
    require_same_place("attention", q, k, "k");
    require_same_place("attention", q, v, "v");
    const int64_t batch = q.dim(0), lq = q.dim(1), lk = k.dim(1), hd = q.dim(2), d = hd / heads;
    Tensor out = Tensor::empty_on(backend_, q.shape(), q.dtype());
    if (out.numel() == 0 || lk == 0) return out;
    Timed scope(backend_, ops::OpKind::Attention, 4.0 * double(batch) * double(lq) * double(lk) * double(hd));
    u32(q.numel(), "attention", q), u32(k.numel(), "attention", k);
    if (flash_attention_fits(d, q.dtype())) {
        flash_attention({bind(q), bind(k), bind(v), lk, hd, hd, hd}, out, heads, causal);
        return out;
    }
    // Queries per block: the float32 scores of every head for one block stay under the budget, and within one
    // allocation where the device allows less.
    const int64_t budget = std::min(kScoreBudgetBytes, backend_.max_allocation_bytes());
    const int64_t block = std::clamp<int64_t>(budget / (4 * heads * lk), 1, lq);
    Tensor scores = Tensor::empty_on(backend_, {int64_t(heads), block, lk}, DType::F32);
    const bool f16 = q.dtype() == DType::F16;
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t q0 = 0; q0 < lq; q0 += block) {
            const int64_t qn = std::min(block, lq - q0);
            MatmulParams s{};  // scores[h, i, j] = q[b, q0 + i, h d + .] . k[b, j, h d + .] / sqrt(d)
            s.a = bind(q, (b * lq + q0) * hd), s.b = bind(k, b * lk * hd), s.c = bind(scores);
            s.m = uint32_t(qn), s.n = uint32_t(lk), s.k = uint32_t(d);
            s.sam = uint32_t(hd), s.sak = 1, s.saz = uint32_t(d);
            s.sbk = 1, s.sbn = uint32_t(hd), s.sbz = uint32_t(d);
            s.scm = uint32_t(lk), s.scn = 1, s.scz = uint32_t(qn * lk);
            s.alpha = 1.0f / std::sqrt(float(d));
            s.flags = 1 | 2;
            matmul(s, f16 ? "matmul_scores" : "matmul", f16 ? "_f16" : "_f32", uint32_t(heads));
            SoftmaxParams sm{bind(scores), bind(scores), uint32_t(heads * qn), uint32_t(lk), 1.0f, causal ? 1u : 0u,
                             uint32_t(qn), uint32_t(q0)};
            const RowGrid g = row_grid(heads * qn);
            backend_.dispatch("softmax_f32", sm, g.x, g.y);
            MatmulParams o{};  // out[b, q0 + i, h d + c] = sum_j p[h, i, j] v[b, j, h d + c]
            o.a = bind(scores), o.b = bind(v, b * lk * hd), o.c = bind(out, (b * lq + q0) * hd);
            o.m = uint32_t(qn), o.n = uint32_t(d), o.k = uint32_t(lk);
            o.sam = uint32_t(lk), o.sak = 1, o.saz = uint32_t(qn * lk);
            o.sbk = uint32_t(hd), o.sbn = 1, o.sbz = uint32_t(d);
            o.scm = uint32_t(hd), o.scn = 1, o.scz = uint32_t(d);
            o.alpha = 1.0f;
            o.flags = 1;
            matmul(o, f16 ? "matmul_pv" : "matmul", f16 ? "_f16" : "_f32", uint32_t(heads));
        }
    return out;
}

Tensor VulkanDeviceOps::attention_qkv(const Tensor& qkv, int heads) const {
    const int64_t w = qkv.rank() == 3 ? qkv.dim(2) : 0, c = w / 3;
    if (qkv.rank() != 3 || w % 3 != 0 || heads < 1 || c % heads != 0 || !flash_attention_fits(c / heads, qkv.dtype()))
        return DeviceOps::attention_qkv(qkv, heads);
    const int64_t batch = qkv.dim(0), l = qkv.dim(1);
    Tensor out = Tensor::empty_on(backend_, {batch, l, c}, qkv.dtype());
    if (out.numel() == 0) return out;
    Timed scope(backend_, ops::OpKind::Attention, 4.0 * double(batch) * double(l) * double(l) * double(c));
    u32(qkv.numel(), "attention", qkv);
    flash_attention({bind(qkv), bind(qkv, c), bind(qkv, 2 * c), l, w, w, w}, out, heads, false);
    return out;
}

Tensor VulkanDeviceOps::attention_kv(const Tensor& q, const Tensor& kv, int heads, int64_t at) const {
    const int64_t c = q.rank() == 3 ? q.dim(2) : 0;
    if (q.rank() != 3 || kv.rank() != 3 || heads < 1 || c % heads != 0 || kv.dim(0) != q.dim(0) || at < 0 ||
        at + 2 * c > kv.dim(2) || !flash_attention_fits(c / heads, q.dtype()))
        return DeviceOps::attention_kv(q, kv, heads, at);
    const int64_t batch = q.dim(0), lq = q.dim(1), lk = kv.dim(1), w = kv.dim(2);
    if (q.numel() == 0 || lk == 0) return DeviceOps::attention_kv(q, kv, heads, at);
    require_same_place("attention", q, kv, "kv");
    Tensor out = Tensor::empty_on(backend_, q.shape(), q.dtype());
    Timed scope(backend_, ops::OpKind::Attention, 4.0 * double(batch) * double(lq) * double(lk) * double(c));
    u32(q.numel(), "attention", q), u32(kv.numel(), "attention", kv);
    flash_attention({bind(q), bind(kv, at), bind(kv, at + c), lk, c, w, w}, out, heads, false);
    return out;
}

void VulkanDeviceOps::activation_(Tensor& x, ops::DeviceActivation f) const {
    if (x.numel() == 0) return;
    static constexpr ops::OpKind kinds[] = {ops::OpKind::Silu, ops::OpKind::Gelu, ops::OpKind::GeluTanh,
                                            ops::OpKind::QuickGelu};
    Timed scope(backend_, kinds[int(f)]);
    UnaryParams p{bind(x), u32(x.numel(), "activation", x), uint32_t(f), 1.0f};
    backend_.dispatch(kernel("unary", x).c_str(), p, element_groups(x.numel()));
}

void VulkanDeviceOps::add_channel_sums(const Tensor& x, int64_t row, int64_t rows, std::vector<double>& sum,
                                       std::vector<double>& sum_sq) const {
    if (x.rank() != 4 || x.dim(0) != 1 || row < 0 || rows < 0 || row + rows > x.dim(2) ||
        int64_t(sum.size()) != x.dim(1) || int64_t(sum_sq.size()) != x.dim(1))
        bad_device_operands("add_channel_sums", x,
                            device_operand("x", x) + " must be [1, C, H, W] with rows " + std::to_string(row) + " to " +
                                std::to_string(row + rows) + " in it and C sums");
    const int64_t c = x.dim(1), plane = x.dim(2) * x.dim(3), length = rows * x.dim(3);
    if (c == 0 || length == 0) return;
    // Chunks of 1024 values: four a thread, then the workgroup's tree, in float32 (the whole decode's own GroupNorm
    // statistics are float32 too); the chunks add up in double here. The band's values stay on the device.
    constexpr int64_t kChunk = 1024;
    const int64_t chunks = (length + kChunk - 1) / kChunk;
    const Tensor ws = Tensor::empty_on(backend_, {2 * c * chunks}, DType::F32);
    ChannelSumsParams p{bind(x), bind(ws), u32(row * x.dim(3), "add_channel_sums", x), u32(plane, "add_channel_sums", x),
                        u32(length, "add_channel_sums", x), uint32_t(kChunk), uint32_t(chunks), uint32_t(c)};
    u32(x.numel(), "add_channel_sums", x);
    const RowGrid grid = row_grid(c * chunks);
    backend_.dispatch(kernel("channel_sums", x).c_str(), p, grid.x, grid.y);
    std::vector<float> host(size_t(2 * c * chunks));
    backend_.download(host.data(), ws.device_data(), int64_t(host.size() * sizeof(float)));
    for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t k = 0; k < chunks; ++k) {
            sum[size_t(ch)] += host[size_t(2 * (ch * chunks + k))];
            sum_sq[size_t(ch)] += host[size_t(2 * (ch * chunks + k) + 1)];
        }
}

void VulkanDeviceOps::scale_(Tensor& x, float s) const {
    if (x.numel() == 0) return;
    Timed scope(backend_, ops::OpKind::Scale);
    UnaryParams p{bind(x), u32(x.numel(), "scale_", x), 4u, s};
    backend_.dispatch(kernel("unary", x).c_str(), p, element_groups(x.numel()));
}

Tensor VulkanDeviceOps::geglu(const Tensor& x) const {
    const int64_t d = x.dim(-1) / 2;
    Shape shape = x.shape();
    shape.back() = d;
    Tensor y = Tensor::empty_on(backend_, shape, x.dtype());
    if (y.numel() == 0) return y;
    Timed scope(backend_, ops::OpKind::Geglu);
    GegluParams p{bind(x), bind(y), u32(y.numel(), "geglu", x), uint32_t(d)};
    u32(x.numel(), "geglu", x);
    backend_.dispatch(kernel("geglu", x).c_str(), p, element_groups(y.numel()));
    return y;
}

void VulkanDeviceOps::add_(Tensor& a, const Tensor& b) const {
    require_same_place("add_", a, b, "b");
    if (a.numel() != b.numel()) bad_device_operands("add_", a, device_operand("a", a) + " and " + device_operand("b", b));
    if (a.numel() == 0) return;
    Timed scope(backend_, ops::OpKind::Add);
    BinaryParams p{bind(a), bind(b), u32(a.numel(), "add_", a), 1};
    backend_.dispatch(kernel("binary", a).c_str(), p, element_groups(a.numel()));
}

void VulkanDeviceOps::add_nlc_(Tensor& y, const Tensor& tokens) const {
    require_same_place("add_nlc_", y, tokens, "tokens");
    if (y.rank() != 4 || tokens.rank() != 3 || tokens.dim(0) != y.dim(0) || tokens.dim(1) != y.dim(2) * y.dim(3) ||
        tokens.dim(2) != y.dim(1))
        bad_device_operands("add_nlc_", y, device_operand("tokens", tokens) + " for " + device_operand("y", y));
    if (y.numel() == 0) return;
    if (!fused_ || overlaps(y, &tokens)) return DeviceOps::add_nlc_(y, tokens);
    Timed scope(backend_, ops::OpKind::NlcToNchw);
    BinaryParams p{bind(y), bind(tokens), u32(y.numel(), "add_nlc_", y), uint32_t(y.dim(2) * y.dim(3)),
                   uint32_t(y.dim(1))};
    backend_.dispatch(kernel("binary", y).c_str(), p, element_groups(y.numel()));
}

void VulkanDeviceOps::add_channel_bias_(Tensor& x, const Tensor& bias_nc) const {
    require_same_place("add_channel_bias_", x, bias_nc, "bias");
    if (x.numel() == 0) return;
    Timed scope(backend_, ops::OpKind::AddChannelBias);
    BinaryParams p{bind(x), bind(bias_nc), u32(x.numel(), "add_channel_bias_", x),
                   uint32_t(x.numel() / (x.dim(0) * x.dim(1)))};
    backend_.dispatch(kernel("binary", x).c_str(), p, element_groups(x.numel()));
}

void VulkanDeviceOps::layout(int op, const Tensor& a, const Tensor* b, Tensor& y, int64_t c, int64_t c2, int64_t h,
                             int64_t w) const {
    if (y.numel() == 0) return;
    LayoutParams p{bind(a), bind(b), bind(y), u32(y.numel(), "layout", a), uint32_t(op), uint32_t(c), uint32_t(c2),
                   uint32_t(h), uint32_t(w)};
    backend_.dispatch(kernel("layout", a).c_str(), p, element_groups(y.numel()));
}

Tensor VulkanDeviceOps::upsample_nearest2x(const Tensor& x) const {
    Tensor y = Tensor::empty_on(backend_, {x.dim(0), x.dim(1), 2 * x.dim(2), 2 * x.dim(3)}, x.dtype());
    Timed scope(backend_, ops::OpKind::UpsampleNearest2x);
    layout(0, x, nullptr, y, 0, 0, x.dim(2), x.dim(3));
    return y;
}

Tensor VulkanDeviceOps::concat_channels(const Tensor& a, const Tensor& b) const {
    require_same_place("concat_channels", a, b, "b");
    Shape shape = a.shape();
    shape[1] += b.dim(1);
    Tensor y = Tensor::empty_on(backend_, shape, a.dtype());
    Timed scope(backend_, ops::OpKind::ConcatChannels);
    const int64_t planes = a.dim(0) * a.dim(1), spatial = planes > 0 ? a.numel() / planes : 0;
    layout(1, a, &b, y, a.dim(1), b.dim(1), spatial, 1);
    return y;
}

Tensor VulkanDeviceOps::nchw_to_nlc(const Tensor& x) const {
    Tensor y = Tensor::empty_on(backend_, {x.dim(0), x.dim(2) * x.dim(3), x.dim(1)}, x.dtype());
    Timed scope(backend_, ops::OpKind::NchwToNlc);
    layout(2, x, nullptr, y, x.dim(1), 0, x.dim(2) * x.dim(3), 1);
    return y;
}

Tensor VulkanDeviceOps::nlc_to_nchw(const Tensor& x, int64_t h, int64_t w) const {
    Tensor y = Tensor::empty_on(backend_, {x.dim(0), x.dim(2), h, w}, x.dtype());
    Timed scope(backend_, ops::OpKind::NlcToNchw);
    layout(3, x, nullptr, y, x.dim(2), 0, h * w, 1);
    return y;
}

Tensor VulkanDeviceOps::columns(const Tensor& x, int64_t begin, int64_t count) const {
    Shape shape = x.shape();
    const int64_t width = shape.back();
    shape.back() = count;
    Tensor y = Tensor::empty_on(backend_, shape, x.dtype());
    layout(4, x, nullptr, y, count, width, begin, 1);
    return y;
}

Tensor VulkanDeviceOps::timestep_embedding(const Tensor& timesteps, int dim, bool flip_sin_to_cos,
                                           float downscale_freq_shift, float max_period, DType out_type) const {
    if (timesteps.dtype() != DType::F32)
        bad_device_operands("timestep_embedding", timesteps, device_operand("timesteps", timesteps) + " must be F32");
    require(dim >= 1, ErrorKind::InvalidArgument, "ops::timestep_embedding: dim " + std::to_string(dim) + " must be >= 1");
    const int half = dim / 2;
    require(half == 0 || float(half) - downscale_freq_shift != 0.0f, ErrorKind::InvalidArgument,
            "ops::timestep_embedding: half - shift = 0");
    Tensor y = Tensor::empty_on(backend_, {timesteps.numel(), int64_t(dim)}, out_type);
    if (y.numel() == 0) return y;
    Timed scope(backend_, ops::OpKind::TimestepEmbedding);
    const auto key = std::tuple{half, downscale_freq_shift, max_period};
    Tensor uncached;  // a dry run's (core/dry_run.h): kept by no cache, which real calls read
    const Tensor* frequencies = nullptr;
    if (auto it = frequencies_.find(key); it != frequencies_.end()) {
        frequencies = &it->second;
    } else {
        const std::vector<float> f = ops::timestep_frequencies(half, downscale_freq_shift, max_period);
        Tensor host({int64_t(std::max(half, 1))}, f.empty() ? std::vector<float>{0.0f} : f);
        if (backend_.dry_run()) frequencies = &(uncached = host.to_device(backend_, DType::F32));
        else frequencies = &frequencies_.emplace(key, host.to_device(backend_, DType::F32)).first->second;
    }
    if (half == 0) {  // dim 1: the zero column alone
        const Tensor zeros = Tensor(y.shape()).to_device(backend_, out_type);
        backend_.copy(y.device_data(), zeros.device_data(), y.numel() * int64_t(dtype_size(out_type)));
        return y;
    }
    struct {
        uint64_t t, freq, y;
        uint32_t n, dim, half_dim, sin_at, cos_at;
    } p{bind(timesteps), bind(*frequencies), bind(y), u32(timesteps.numel(), "timestep_embedding", timesteps),
        uint32_t(dim), uint32_t(half), uint32_t(flip_sin_to_cos ? half : 0), uint32_t(flip_sin_to_cos ? 0 : half)};
    backend_.dispatch(kernel("timestep_embedding", y).c_str(), p, element_groups(timesteps.numel() * half));
    return y;
}

}  // namespace kiln::vulkan
