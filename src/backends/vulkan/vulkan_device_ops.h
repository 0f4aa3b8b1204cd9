// The ops of ops.h on the Vulkan backend: checks the operands, allocates outputs and records the shaders
// of shaders/ (one kernel per op, float32 or float16 storage with float32 arithmetic). Compositions:
// attention = scores (matmul) + softmax + weighted sum (matmul), in blocks of queries; GroupNorm is
// statistics + apply, and fused into the convolution after it; the timestep embedding's frequencies come
// from the host (once per configuration), its sines and cosines from the shader's own range reduction.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <tuple>

#include "ops/device_ops.h"

namespace kiln::vulkan {

class VulkanBackend;
struct MatmulParams;  // matmul.comp's push constants (vulkan_device_ops.cpp)
struct ConvParams;    // conv2d.comp's

// KILN_VULKAN_FUSED: unset or 1 runs the fused ops below as one kernel each, 0 composes them as DeviceOps does
// (for before/after comparisons); another value is an InvalidArgument error naming the setting.
bool fused_from_env(const char* value);
// KILN_VULKAN_CONV_ROWS8: 1 (the default) or 0: convolutions read input pixels 4 or 8 of a row at once or one
// at a time (for comparisons, docs/VULKAN.md); another value is an InvalidArgument naming the setting.
bool conv_rows_from_env(const char* value);
// KILN_VULKAN_CONV_COLUMNS: 1 (the default) or 0: the tiled builds' convolutions read their input from columns a
// pass writes first (conv_columns.comp), or compute each value as their tiles load it (comparisons).
bool conv_columns_from_env(const char* value);

class VulkanDeviceOps final : public ops::DeviceOps {
public:
    explicit VulkanDeviceOps(VulkanBackend& backend);
    // q8_0 weights with KILN_VULKAN_Q8=fused: the "_q8" products decode them as their tiles load them.
    bool reads_blocks(DType weight) const override;
    // Whether the matrix-unit build reads q8_0 weights as blocks too: sg32's KHR kernels ("_q8_coopk_sg32").
    bool matrix_reads_q8() const;
    Tensor linear(const Tensor& x, const Tensor& w, const Tensor* b) const override;
    // The fused forms, one product kernel each (issue 23): acc's old value, a per-channel term (a shortcut's
    // bias, a time embedding's columns) added in the product's epilogue, and the upsampling read through the
    // convolution's index arithmetic. Each sum is float32 before the one rounding to the storage type, so the
    // result may differ from the composition's by that rounding. Composed where the output shares memory with
    // an input (the epilogue would write values the product still reads).
    void linear_add_(Tensor& acc, const Tensor& x, const Tensor& w, const Tensor* b) const override;
    Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding) const override;
    Tensor conv2d_group_norm_silu(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps,
                                  const Tensor& w, const Tensor* b, int stride, int padding) const override;
    void conv2d_group_norm_silu_add_(Tensor& y, const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                     float eps, const Tensor& w, const Tensor* b, int stride, int padding,
                                     const Tensor* y_bias) const override;
    Tensor conv2d_group_norm_silu_plus(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps,
                                       const Tensor& w, const Tensor* b, const Tensor& image_bias, int64_t at,
                                       int stride, int padding) const override;
    Tensor conv2d_upsample2x(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding) const override;
    // SiLU(x scale + shift) read by the convolution as its GroupNorm+SiLU is (one channel a group, mean 0, 1/std 1):
    // no 1x1 diagonal product, SiLU pass or intermediate tensor (the tiled VAE decode's bands).
    Tensor conv2d_affine_silu(const Tensor& x, const std::vector<float>& scale, const std::vector<float>& shift,
                              const Tensor& w, const Tensor* b, int stride, int padding) const override;
    Tensor group_norm(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps) const override;
    // GroupNorm written as [N, H*W, C] tokens, and y += tokens read as NCHW: the compositions' bits exactly (the
    // layout change is a copy), one kernel and no intermediate tensor each.
    Tensor group_norm_to_nlc(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                             float eps) const override;
    void add_nlc_(Tensor& y, const Tensor& tokens) const override;
    Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) const override;
    Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int heads, bool causal) const override;
    // Packed q | k | v and k | v are read in place by the flash kernel (no column copies).
    Tensor attention_qkv(const Tensor& qkv, int heads) const override;
    Tensor attention_kv(const Tensor& q, const Tensor& kv, int heads, int64_t at) const override;
    void activation_(Tensor& x, ops::DeviceActivation f) const override;
    Tensor geglu(const Tensor& x) const override;
    Tensor upsample_nearest2x(const Tensor& x) const override;
    Tensor concat_channels(const Tensor& a, const Tensor& b) const override;
    void add_(Tensor& a, const Tensor& b) const override;
    void add_channel_bias_(Tensor& x, const Tensor& bias_nc) const override;
    void scale_(Tensor& x, float s) const override;
    void add_channel_sums(const Tensor& x, int64_t row, int64_t rows, std::vector<double>& sum,
                          std::vector<double>& sum_sq) const override;
    Tensor nchw_to_nlc(const Tensor& x) const override;
    Tensor nlc_to_nchw(const Tensor& x, int64_t h, int64_t w) const override;
    Tensor columns(const Tensor& x, int64_t begin, int64_t count) const override;
    Tensor softmax_lastdim(const Tensor& x) const override;
    Tensor timestep_embedding(const Tensor& timesteps, int dim, bool flip_sin_to_cos, float downscale_freq_shift,
                              float max_period, DType out_type) const override;

private:
    class Timed;
    void require_weight(const char* op, const Tensor& x, const Tensor& w) const;
    // The device address of a tensor's value `elements` in, for a kernel's push constants; OutOfMemory naming the
    // limit where the span from there to the tensor's end is more than one kernel operand may span.
    uint64_t bind(const Tensor& t, int64_t elements = 0) const;
    uint64_t bind(const Tensor* t) const;  // null: 0
    // y = x w^T + b into y, or added onto y's old value (accumulate: linear_add_).
    void linear_into(const char* op, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y,
                     bool accumulate) const;
    // What a convolution does beyond conv2d (conv2d.comp's flags 32-128).
    struct ConvFusion {
        bool upsampled = false;         // convolve x's nearest-2x upsampling
        Tensor* accumulate = nullptr;   // add the result onto this tensor (then conv returns an empty one)
        const Tensor* terms = nullptr;  // + terms[image * terms_stride + terms_at + channel]
        int64_t terms_at = 0, terms_stride = 0;
    };
    Tensor conv(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding, const Tensor* stats,
                const Tensor* gamma, const Tensor* beta, int groups, const ConvFusion& fusion) const;
    Tensor group_norm_stats(const Tensor& x, int groups, float eps) const;  // F32 [N, groups, 2]
    // GroupNorm of x [N, C, ...] into a new tensor: x's layout, or [N, spatial, C] (to_nlc).
    Tensor group_norm_into(const char* op, const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                           float eps, bool to_nlc) const;
    // Attention's operands for flash_attention.comp: device addresses of head 0 of batch entry 0, the keys'
    // count and each operand's row stride in elements (the packed forms read q, k and v as columns in place).
    struct AttentionOperands {
        uint64_t q, k, v;
        int64_t lk, sq, sk, sv;
    };
    // Whether one kernel takes this attention (the backend's attention setting, the head's size, the dtype, the
    // device's shared memory and matrix units), and runs it.
    bool flash_attention_fits(int64_t head_dim, DType dtype) const;
    bool matrix_flash_runs(int64_t head_dim, DType dtype) const;  // flash_attention_coop.comp takes it
    void flash_attention(const AttentionOperands& a, Tensor& out, int heads, bool causal) const;
    void layout(int op, const Tensor& a, const Tensor* b, Tensor& y, int64_t c, int64_t c2, int64_t h, int64_t w) const;
    // Runs a product through run(variant, tile_m, tile_n): variant "" (128x128 tiles), "_small" (64x64), "_r64" /
    // "_c64" (64x128 / 128x64), "_direct" or "_coop" (matrix units, 128 x VulkanBackend::matrix_tile_n; only where
    // `matrix` says the kernel has that build and the device can run it), as the backend's mode says; in Measured
    // mode the first call of each shape (key) times the candidate builds and keeps the fastest, whose output stands
    // (vulkan_product_builds.cpp).
    using ProductKey = std::tuple<std::string, int64_t, int64_t, int64_t, int64_t>;
    // A product that adds into its output (accumulate) must run once: its timing runs are `trial`, the same
    // product written to scratch memory, and the chosen build then runs `run` once.
    using ProductRun = std::function<void(const char* variant, uint32_t tile_m, uint32_t tile_n)>;
    void run_product(const ProductKey& key, bool matrix, const ProductRun& run, const ProductRun* trial = nullptr) const;
    static bool is_direct_build(const char* variant);  // the build without shared memory (devices that run on the CPU)
    // Split-K: a product of `tiles` workgroups too few to fill the GPU runs its k in `slices` slices of `kslice`
    // side by side, each summing into a float32 workspace, then a second pass of the same kernel adds them
    // (sum_slices in gemm_build.glsl). {1, 0}: no split (also when the workspace would need 2^32 values,
    // `outputs` per slice, or the grid more than 65535 slices x `batch`). KILN_VULKAN_SPLIT_K=N forces N.
    struct SplitK {
        uint32_t slices = 1, kslice = 0;
    };
    SplitK split_k(int64_t tiles, int64_t k, int64_t outputs, int64_t batch) const;
    // A product kernel (Params: MatmulParams or ConvParams) over gx x gy tiles and `batch` z's, `outputs`
    // values, split along its k where split_k says so; `sum_flag` marks the second pass in the kernel's flags.
    template <class Params>
    void dispatch_product(const std::string& name, Params p, uint32_t gx, uint32_t gy, uint32_t batch, int64_t k,
                          int64_t outputs, uint32_t sum_flag) const;
    // matmul.comp (`base`: matmul, matmul_scores or matmul_pv; `suffix`: _f32 or _f16) over `batch` z's.
    // C's old value is added where p.flags has 64 (its measuring runs then write to scratch memory).
    void matmul(const MatmulParams& p, const char* base, const char* suffix, uint32_t batch) const;
    // A convolution in a tiled build (`name`) over `images` images of float16 or float32, through columns written
    // in chunks by conv_columns.comp (ConvParams' flags & 512).
    void conv_from_columns(const std::string& name, const ConvParams& p, bool f16, int64_t images, uint32_t tile_m,
                           uint32_t tile_n) const;

    VulkanBackend& backend_;
    const bool fused_;      // KILN_VULKAN_FUSED
    const bool conv_rows_;  // KILN_VULKAN_CONV_ROWS8
    const bool conv_columns_;  // KILN_VULKAN_CONV_COLUMNS
    // This device holds the wide matrix tiles' workgroup (KHR matrix units, 512 threads, their shared memory).
    const bool wide_matrix_device_;
    // This device holds flash_attention.comp's two-row-group builds (their shared memory).
    const bool wide_flash_device_;
    // This device runs flash_attention_coop.comp: KHR matrix units, the kernels in this build, their shared memory.
    const bool matrix_flash_device_;
    // The embedding's frequencies per (half, shift, max_period), uploaded by the first call: a recorded call
    // (run_recorded) may not upload.
    mutable std::map<std::tuple<int, float, float>, Tensor> frequencies_;
    mutable std::map<ProductKey, int> builds_;  // the measured choice per product shape (index in kBuilds)
};

}  // namespace kiln::vulkan
