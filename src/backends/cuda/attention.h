// Flash attention on the GPU, fp16 in and out: softmax(q k^T / sqrt(D)) v per (batch, head), with the
// layout of the CPU op kiln::ops::attention (ops/ops.h): q [B, Lq, H*D], k and v [B, Lk, H*D], row-major,
// heads interleaved in the last dim; out like q. Products and sums run on the tensor cores in fp32, the
// softmax statistics (running max and sum) are fp32; the probabilities are rounded to fp16 before they
// multiply v, and the output is rounded to fp16 once, at the end.
#pragma once
#include <climits>
#include <cstddef>
#include <vector>

#include "backends/cuda/gpu_runtime.h"

namespace kiln::cuda {

// Token strides of q and of k and v, in elements: 0 means H*D (the layout above); more where the projections
// sit side by side in one tensor (q | k | v of a token: q, k and v point 0, H*D and 2*H*D into it, stride 3*H*D).
struct AttentionStrides {
    int64_t q = 0, kv = 0;
};

// Enqueues the kernel on `stream` and returns. D from 1 to 256, Lk >= 1; B = 0 or Lq = 0 is a no-op.
// causal: query i sees keys 0..i (top-left aligned, as the CPU op). Any alignment works; 16-byte-aligned
// pointers with D and the strides multiples of 8 take the fast (16-byte copy) path. out [B, Lq, H*D] must not
// overlap q, k or v. Throws kiln::Error (InvalidArgument for bad sizes or strides; Unsupported for D > 256, a
// device below compute capability 8.0, or one whose shared memory holds no configuration for D; or a launch
// failure). The device's capability is read as arch_paths.h says (KILN_CUDA_ARCH lowers it).
void cuda_attention_f16(const __half* q, const __half* k, const __half* v, __half* out, int B, int Lq, int Lk,
                        int H, int D, cudaStream_t stream, bool causal = false, AttentionStrides strides = {});

struct ArchPaths;
// Whether the flash kernel runs at head dim D on a device with these paths (compute capability 8.0, and a
// configuration within its shared memory: D = 160 and more do not fit the 99 KiB of 8.6 and 8.9).
bool flash_attention_runs(int D, const ArchPaths& paths);

namespace detail {

// One compiled tile shape. Tests check every configuration; the benchmark can time each.
struct AttentionConfig {
    int padded_d;    // D rounded up to the kernel's width (zero-padded in shared memory)
    int warps;       // per block
    int warp_rows;   // query rows per warp (16 or 32)
    int block_rows;  // query rows per block = warps * warp_rows
    int block_keys;  // keys per inner tile
    int stages;      // key/value tiles in flight
    bool q_in_registers;
    size_t smem_bytes;  // dynamic shared memory per block
};

// The configurations compiled for head dim D, in order of preference for large problems. Empty when D is
// out of range.
std::vector<AttentionConfig> attention_configs(int D);

// The configuration cuda_attention_f16 uses: by the query rows that fall on the busiest multiprocessor,
// preferring earlier configurations unless a later one cuts that share by a fifth (short sequences, few
// heads: smaller blocks). Only configurations within max_shared bytes of shared memory; -1 where none is.
int choose_attention_config(int D, int B, int Lq, int H, int multiprocessors, int max_shared = INT_MAX);

// cuda_attention_f16 with configuration attention_configs(D)[config].
void cuda_attention_f16_config(const __half* q, const __half* k, const __half* v, __half* out, int B, int Lq, int Lk,
                               int H, int D, cudaStream_t stream, bool causal, int config,
                               AttentionStrides strides = {});

}  // namespace detail

}  // namespace kiln::cuda
