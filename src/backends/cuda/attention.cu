// Flash attention forward (one pass over the keys with an online softmax), fp16 tensor cores through
// mma.sync.m16n8k16 with fp32 accumulators; see attention.h for the contract.
//
// A block takes `block_rows` query rows of one (batch, head); each warp owns 16 or 32 of those rows and
// keeps their output accumulators and softmax statistics in registers. Key/value tiles of 64 (or 128)
// rows stream through shared memory, double-buffered with cp.async so the next tile loads while this
// one computes; one barrier per tile.
// Head dims are zero-padded to a multiple of 16 in shared memory (padded_d); keys past Lk are masked to
// -inf and their value rows zero-filled, query rows past Lq are computed on zeros and never stored.
// Shared-memory rows are padded by 16 bytes so that the 8 row addresses of each ldmatrix fall in
// different bank groups (the row pitch is an odd number of 16-byte units for every padded_d).
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "backends/cuda/attention.h"
#include "backends/cuda/arch_paths.h"
#include "backends/cuda/cuda_check.h"

namespace kiln::cuda {

namespace {

struct Params {
    const __half* q;
    const __half* k;
    const __half* v;
    __half* o;
    int64_t q_batch_stride, kv_batch_stride, o_batch_stride;  // Lq*q_stride, Lk*kv_stride, Lq*H*D
    int q_stride, kv_stride, o_stride;  // from one token to the next: H*D, or more where q, k, v sit side by side
    int lq, lk, heads, d;
    int q_tiles;        // blocks per (batch, head)
    float scale_log2;   // log2(e) / sqrt(D): the softmax runs in base 2
    bool causal;
    bool vec;           // 16-byte copies are safe: aligned pointers and D % 8 == 0
};

struct NvtxRange {
    explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
    ~NvtxRange() { nvtxRangePop(); }
};

// mma.sync m16n8k16 and cp.async need 8.0: for 7.5 the kernel is a trap, never launched (cuda_attention_f16
// checks device_arch_paths; the backend attends by products there).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define KILN_ATTENTION_COMPILED 0
#else
#define KILN_ATTENTION_COMPILED 1
#endif
#if KILN_ATTENTION_COMPILED
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared without registers; src_size 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr)
                 : "memory");
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr)
                 : "memory");
}

// c += a (16x16, row) * b (16x8, col), fp16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// c += a (16x8, row) * b (8x8, col): a last k-step of 8 where the head dim stops there.
__device__ __forceinline__ void mma_1688(float (&c)[4], const uint32_t (&a)[2], uint32_t b) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(b));
}

// 2^x, about 2 ulp; exp2(-inf) = 0.
__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);  // lo in the low 16 bits: the lower column index
    return *reinterpret_cast<const uint32_t*>(&h);
}

// Copies rows [row0, row0 + kRows) of one head (base points at row 0, column 0 of the head) into a
// shared tile of kRows x Dp (pitch Dp + 8), zero beyond `rows` and beyond d.
template <int Dp, int kRows, int kThreads>
__device__ __forceinline__ void load_tile(__half* tile, const __half* base, int row0, int rows, int row_stride,
                                          int d, bool vec) {
    constexpr int kChunks = Dp / 8;  // 16-byte chunks per row
    constexpr int kPitch = Dp + 8;
    for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
        const int r = idx / kChunks, col = (idx % kChunks) * 8;
        __half* dst = tile + r * kPitch + col;
        const int g = row0 + r;
        if (col >= d) {  // padding columns: zeros, so they add nothing to q.k
            *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
        } else if (vec) {
            const bool valid = g < rows;
            cp_async_16(smem_u32(dst), base + int64_t(valid ? g : 0) * row_stride + col, valid);
        } else {  // unaligned or D % 8 != 0: element by element, never past d or the last row
            uint32_t w[4];
            const __half* src = base + int64_t(g) * row_stride + col;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                uint32_t lo = 0, hi = 0;
                if (g < rows && col + 2 * e < d) lo = __half_as_ushort(src[2 * e]);
                if (g < rows && col + 2 * e + 1 < d) hi = __half_as_ushort(src[2 * e + 1]);
                w[e] = lo | (hi << 16);
            }
            *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
        }
    }
}
#endif  // KILN_ATTENTION_COMPILED

// kQRegs: keep q's operand fragments in registers for the whole pass rather than re-reading them from
// shared memory for every key tile. kMinBlocks: blocks per multiprocessor the register budget must allow
// (with 16 rows per warp the kernel fits in 128 registers, and twice the warps hide more latency).
// kDn: the head dim rounded up to 8 (Dp by default): where it stops short of Dp, q k^T ends with a k-step of 8
// and p v skips the zero columns (D = 40 in 48: a sixth of the products).
template <int Dp, int kWarps, int kMTiles, int kBc, bool kQRegs, int kMinBlocks, int kDn = Dp>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) attention_kernel(const Params p) {
#if KILN_ATTENTION_COMPILED
    constexpr int kStages = 2;  // key/value buffers in flight (3 measured no faster on an H200)
    constexpr int kThreads = kWarps * 32;
    constexpr int kWarpRows = kMTiles * 16;
    constexpr int kBr = kWarps * kWarpRows;
    constexpr int kPitch = Dp + 8;
    constexpr int kKSteps = kDn / 16;       // k-steps of 16 of q k^T
    constexpr bool kK8 = kDn % 16 != 0;     // and one of 8
    constexpr int kDTiles = kDn / 8;        // n-tiles of p v
    static_assert(kDn % 8 == 0 && kDn <= Dp && Dp - kDn < 16, "kDn: the head dim rounded up to 8, within Dp");
    constexpr int kNTiles = kBc / 8;   // n-tiles of q k^T

    extern __shared__ __align__(16) unsigned char smem[];
    __half* qs = reinterpret_cast<__half*>(smem);
    __half* ks = qs + kBr * kPitch;            // kStages buffers
    __half* vs = ks + kStages * kBc * kPitch;  // kStages buffers

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;  // mma fragment coordinates: row g (and g + 8), columns 2t, 2t + 1
    const int q_tile = blockIdx.x % p.q_tiles, bh = blockIdx.x / p.q_tiles;
    const int b = bh / p.heads, h = bh % p.heads;
    const int q0 = q_tile * kBr;
    const int warp_row0 = warp * kWarpRows;

    const __half* qg = p.q + b * p.q_batch_stride + int64_t(h) * p.d;
    const __half* kg = p.k + b * p.kv_batch_stride + int64_t(h) * p.d;
    const __half* vg = p.v + b * p.kv_batch_stride + int64_t(h) * p.d;
    __half* og = p.o + b * p.o_batch_stride + int64_t(h) * p.d;

    // Causal: no row of this block sees keys at or past q0 + kBr.
    const int kv_end = p.causal ? min(p.lk, q0 + kBr) : p.lk;
    const int kv_tiles = (kv_end + kBc - 1) / kBc;

    // Prologue: q with key tile 0 as one cp.async group, then tiles 1 .. kStages-2, one group each.
    load_tile<Dp, kBr, kThreads>(qs, qg, q0, p.lq, p.q_stride, p.d, p.vec);
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) {
        if (st < kv_tiles) {
            load_tile<Dp, kBc, kThreads>(ks + st * kBc * kPitch, kg, st * kBc, p.lk, p.kv_stride, p.d, p.vec);
            load_tile<Dp, kBc, kThreads>(vs + st * kBc * kPitch, vg, st * kBc, p.lk, p.kv_stride, p.d, p.vec);
        }
        cp_async_commit();  // possibly empty: keeps the group count per tile fixed
    }
    uint32_t qa[kQRegs ? kMTiles : 1][kQRegs ? kKSteps : 1][4];
    uint32_t qa8[kQRegs && kK8 ? kMTiles : 1][2];

    float o[kMTiles][kDTiles][4];
    float m[kMTiles][2], l[kMTiles][2];  // running max (scaled, base 2) and this thread's share of the sum
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.0f;
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
    }

    for (int j = 0; j < kv_tiles; ++j) {
        // Tile j's group is complete once at most kStages - 2 younger groups are pending.
        cp_async_wait<kStages - 2>();
        // One barrier per tile: tile j is visible to all, and every warp is done with tile j - 1, whose
        // buffer the load below refills.
        __syncthreads();
        {
            const int next = j + kStages - 1, nb = next % kStages;
            if (next < kv_tiles) {
                load_tile<Dp, kBc, kThreads>(ks + nb * kBc * kPitch, kg, next * kBc, p.lk, p.kv_stride, p.d, p.vec);
                load_tile<Dp, kBc, kThreads>(vs + nb * kBc * kPitch, vg, next * kBc, p.lk, p.kv_stride, p.d, p.vec);
            }
            cp_async_commit();
        }
        const int buf = j % kStages;
        const __half* kt = ks + buf * kBc * kPitch;
        const __half* vt = vs + buf * kBc * kPitch;
        if (kQRegs && j == 0) {
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
                for (int kk = 0; kk < kKSteps; ++kk)
                    ldmatrix_x4(qa[mt][kk], smem_u32(qs + (warp_row0 + mt * 16 + lane % 16) * kPitch + kk * 16 + (lane / 16) * 8));
            if (kK8) {
#pragma unroll
                for (int mt = 0; mt < kMTiles; ++mt)
                    ldmatrix_x2(qa8[mt], smem_u32(qs + (warp_row0 + mt * 16 + lane % 16) * kPitch + kKSteps * 16));
            }
        }

        // s = q k^T for this warp's rows and the tile's kBc keys.
        float s[kMTiles][kNTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
            for (int nt = 0; nt < kNTiles; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk) {
            uint32_t a[kMTiles][4];
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
                if (kQRegs) {
#pragma unroll
                    for (int i = 0; i < 4; ++i) a[mt][i] = qa[mt][kQRegs ? kk : 0][i];
                } else {
                    ldmatrix_x4(a[mt], smem_u32(qs + (warp_row0 + mt * 16 + lane % 16) * kPitch + kk * 16 + (lane / 16) * 8));
                }
            }
#pragma unroll
            for (int np = 0; np < kNTiles / 2; ++np) {
                uint32_t bk[4];  // keys np*16 + 0..7 and + 8..15, dims kk*16 + 0..15
                ldmatrix_x4(bk, smem_u32(kt + (np * 16 + lane % 8 + (lane / 16) * 8) * kPitch + kk * 16 + ((lane / 8) % 2) * 8));
#pragma unroll
                for (int mt = 0; mt < kMTiles; ++mt) {
                    mma_16816(s[mt][2 * np], a[mt], bk[0], bk[1]);
                    mma_16816(s[mt][2 * np + 1], a[mt], bk[2], bk[3]);
                }
            }
        }
        if (kK8) {  // dims kKSteps*16 + 0..7
            uint32_t a[kMTiles][2];
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
                if (kQRegs) {
                    a[mt][0] = qa8[mt][0];
                    a[mt][1] = qa8[mt][1];
                } else {
                    ldmatrix_x2(a[mt], smem_u32(qs + (warp_row0 + mt * 16 + lane % 16) * kPitch + kKSteps * 16));
                }
            }
#pragma unroll
            for (int np = 0; np < kNTiles / 2; ++np) {
                uint32_t bk[2];  // keys np*16 + 0..7 and + 8..15
                ldmatrix_x2(bk, smem_u32(kt + (np * 16 + lane % 16) * kPitch + kKSteps * 16));
#pragma unroll
                for (int mt = 0; mt < kMTiles; ++mt) {
                    mma_1688(s[mt][2 * np], a[mt], bk[0]);
                    mma_1688(s[mt][2 * np + 1], a[mt], bk[1]);
                }
            }
        }

        const int kv0 = j * kBc;
        const bool mask = kv0 + kBc > p.lk || (p.causal && kv0 + kBc - 1 > q0 + warp_row0);  // warp-uniform
        if (mask) {
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
                for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int key = kv0 + nt * 8 + 2 * t + (e & 1);
                        const int row = q0 + warp_row0 + mt * 16 + g + (e >= 2 ? 8 : 0);
                        if (key >= p.lk || (p.causal && key > row)) s[mt][nt][e] = -INFINITY;
                    }
        }

        // Online softmax: rescale what was accumulated to the new running max, turn s into weights.
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                float mx = -INFINITY;
#pragma unroll
                for (int nt = 0; nt < kNTiles; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // the 4 threads of a row
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float m_new = fmaxf(m[mt][r], mx * p.scale_log2);
                const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with every key so far masked
                const float alpha = exp2_approx(m[mt][r] - m_use);
                m[mt][r] = m_new;
                float sum = 0.0f;
#pragma unroll
                for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float w = exp2_approx(__fmaf_rn(s[mt][nt][2 * r + e], p.scale_log2, -m_use));
                        s[mt][nt][2 * r + e] = w;
                        sum += w;
                    }
                l[mt][r] = l[mt][r] * alpha + sum;
#pragma unroll
                for (int dt = 0; dt < kDTiles; ++dt) {
                    o[mt][dt][2 * r] *= alpha;
                    o[mt][dt][2 * r + 1] *= alpha;
                }
            }

        // o += p v: the accumulator layout of two key n-tiles is the A-operand layout of one 16-key k-step.
#pragma unroll
        for (int kk = 0; kk < kBc / 16; ++kk) {
            uint32_t pa[kMTiles][4];
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
                pa[mt][0] = pack_half2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                pa[mt][1] = pack_half2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                pa[mt][2] = pack_half2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                pa[mt][3] = pack_half2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int dp = 0; dp < kDTiles / 2; ++dp) {
                uint32_t bv[4];  // keys kk*16 + 0..15, dims dp*16 + 0..7 and + 8..15
                ldmatrix_x4_trans(bv, smem_u32(vt + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kPitch + dp * 16 + (lane / 16) * 8));
#pragma unroll
                for (int mt = 0; mt < kMTiles; ++mt) {
                    mma_16816(o[mt][2 * dp], pa[mt], bv[0], bv[1]);
                    mma_16816(o[mt][2 * dp + 1], pa[mt], bv[2], bv[3]);
                }
            }
            if (kDTiles % 2) {  // an odd last n-tile of 8 dims
                uint32_t bv[2];  // keys kk*16 + 0..7 and + 8..15
                ldmatrix_x2_trans(bv, smem_u32(vt + (kk * 16 + lane % 16) * kPitch + (kDTiles - 1) * 8));
#pragma unroll
                for (int mt = 0; mt < kMTiles; ++mt) mma_16816(o[mt][kDTiles - 1], pa[mt], bv[0], bv[1]);
            }
        }
    }
    cp_async_wait<0>();  // only empty groups can be pending here; leave none behind

    // Normalise, round to fp16, stage in this warp's own rows of the q tile (no other warp reads them),
    // then store whole rows.
    __syncwarp();
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
        float inv[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float sum = l[mt][r];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            inv[r] = sum > 0.0f ? 1.0f / sum : 0.0f;
        }
        __half* row_lo = qs + (warp_row0 + mt * 16 + g) * kPitch;
        __half* row_hi = row_lo + 8 * kPitch;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
            *reinterpret_cast<uint32_t*>(row_lo + dt * 8 + 2 * t) = pack_half2(o[mt][dt][0] * inv[0], o[mt][dt][1] * inv[0]);
            *reinterpret_cast<uint32_t*>(row_hi + dt * 8 + 2 * t) = pack_half2(o[mt][dt][2] * inv[1], o[mt][dt][3] * inv[1]);
        }
    }
    __syncwarp();
    if (p.vec) {
        const int chunks = p.d / 8;
        for (int idx = lane; idx < kWarpRows * chunks; idx += 32) {
            const int r = idx / chunks, c = idx % chunks, gr = q0 + warp_row0 + r;
            if (gr < p.lq)
                *reinterpret_cast<uint4*>(og + int64_t(gr) * p.o_stride + c * 8) =
                    *reinterpret_cast<const uint4*>(qs + (warp_row0 + r) * kPitch + c * 8);
        }
    } else {
        for (int idx = lane; idx < kWarpRows * p.d; idx += 32) {
            const int r = idx / p.d, c = idx % p.d, gr = q0 + warp_row0 + r;
            if (gr < p.lq) og[int64_t(gr) * p.o_stride + c] = qs[(warp_row0 + r) * kPitch + c];
        }
    }
#else
    (void)p;
    __trap();  // never launched: the host checks the device first (flash_attention, arch_paths.h)
#endif
}

// ------------------------------------------------------------------------------------------------ host

using LaunchFn = void (*)(const Params&, int blocks, size_t smem, cudaStream_t);

struct Entry {
    detail::AttentionConfig config;
    LaunchFn launch;
    const void* kernel;
    size_t smem;
};

template <int Dp, int kWarps, int kMTiles, int kBc, bool kQRegs, int kMinBlocks, int kDn>
void launch_kernel(const Params& p, int blocks, size_t smem, cudaStream_t stream) {
    attention_kernel<Dp, kWarps, kMTiles, kBc, kQRegs, kMinBlocks, kDn><<<blocks, kWarps * 32, smem, stream>>>(p);
}

template <int Dp, int kWarps, int kMTiles, int kBc = 64, bool kQRegs = false, int kMinBlocks = 1, int kDn = Dp>
Entry entry() {
    const int rows = kWarps * kMTiles * 16;
    const size_t smem = size_t(rows + 2 * 2 * kBc) * (Dp + 8) * sizeof(__half);
    return {{Dp, kWarps, kMTiles * 16, rows, kBc, 2, kQRegs, smem},
            &launch_kernel<Dp, kWarps, kMTiles, kBc, kQRegs, kMinBlocks, kDn>,
            reinterpret_cast<const void*>(&attention_kernel<Dp, kWarps, kMTiles, kBc, kQRegs, kMinBlocks, kDn>),
            smem};
}

// Per padded width, in order of preference for long sequences (see choose_attention_config). 16 rows per
// warp with q in registers, capped at 128 registers so that two 8-warp blocks share a multiprocessor,
// measured fastest on an H200 at D = 40, 64 and 80 (32 rows per warp read k and v from shared memory half
// as often but leave room for 8 warps only: kept as the alternative the benchmark times). 64-row blocks
// are for short sequences with few heads, where 128-row blocks leave multiprocessors idle. Head dims 33 to 40
// (SD 1.5's first level, its costliest attention) stop the products at 40 of the 48 (kDn): SD 1.5's 4096-token
// self-attention 0.224 -> 0.2125 ms on an H200. Three blocks a multiprocessor (80 registers) measured slower
// there, with or without kDn (0.220 and 0.250 ms).
const std::vector<Entry>& entries_for(int padded_d, int kdn) {
    static const std::vector<Entry> e40{entry<48, 8, 1, 64, true, 2, 40>(), entry<48, 4, 2, 128, false, 2, 40>(),
                                        entry<48, 4, 1, 64, true, 4, 40>()};
    static const std::vector<Entry> e16{entry<16, 8, 1, 64, true, 2>(), entry<16, 4, 1, 64, true, 4>()};
    static const std::vector<Entry> e32{entry<32, 8, 1, 64, true, 2>(), entry<32, 4, 1, 64, true, 4>()};
    static const std::vector<Entry> e48{entry<48, 8, 1, 64, true, 2>(), entry<48, 4, 2, 128, false, 2>(),
                                        entry<48, 4, 1, 64, true, 4>()};
    static const std::vector<Entry> e64{entry<64, 8, 1, 64, true, 2>(), entry<64, 4, 2, 128, false, 2>(),
                                        entry<64, 4, 1, 64, true, 4>()};
    static const std::vector<Entry> e80{entry<80, 8, 1, 64, true, 2>(), entry<80, 4, 2, 64, false, 2>(),
                                        entry<80, 4, 1, 64, true, 4>()};
    static const std::vector<Entry> e96{entry<96, 4, 2, 64, false, 2>(), entry<96, 4, 1, 64, false, 2>()};
    static const std::vector<Entry> e128{entry<128, 4, 1, 64, true, 2>()};
    static const std::vector<Entry> e160{entry<160, 4, 1, 64, true, 2>()};
    static const std::vector<Entry> e192{entry<192, 4, 1, 64, false, 2>()};
    static const std::vector<Entry> e256{entry<256, 4, 1, 64, false, 1>()};
    static const std::vector<Entry> none;
    switch (padded_d) {
        case 16: return e16;
        case 32: return e32;
        case 48: return kdn == 40 ? e40 : e48;
        case 64: return e64;
        case 80: return e80;
        case 96: return e96;
        case 128: return e128;
        case 160: return e160;
        case 192: return e192;
        case 256: return e256;
        default: return none;
    }
}

int padded_width(int d) {
    if (d < 1 || d > 256) return 0;
    if (d <= 96) return (d + 15) / 16 * 16;
    if (d <= 128) return 128;
    if (d <= 160) return 160;
    if (d <= 192) return 192;
    return 256;
}

// The compiled configurations for head dim d.
const std::vector<Entry>& entries_for_head(int d) { return entries_for(padded_width(d), (d + 7) / 8 * 8); }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void run(const Entry& e, const __half* q, const __half* k, const __half* v, __half* out, int B, int Lq, int Lk, int H,
         int D, cudaStream_t stream, bool causal, AttentionStrides st) {
    Params p{};
    p.q = q;
    p.k = k;
    p.v = v;
    p.o = out;
    p.o_stride = H * D;
    p.q_stride = st.q ? st.q : H * D;
    p.kv_stride = st.kv ? st.kv : H * D;
    p.q_batch_stride = int64_t(Lq) * p.q_stride;
    p.kv_batch_stride = int64_t(Lk) * p.kv_stride;
    p.o_batch_stride = int64_t(Lq) * H * D;
    p.lq = Lq;
    p.lk = Lk;
    p.heads = H;
    p.d = D;
    p.scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(double(D)));
    p.causal = causal;
    p.vec = D % 8 == 0 && p.q_stride % 8 == 0 && p.kv_stride % 8 == 0 && aligned16(q) && aligned16(k) &&
            aligned16(v) && aligned16(out);
    const int64_t q_tiles = (int64_t(Lq) + e.config.block_rows - 1) / e.config.block_rows;
    const int64_t blocks = q_tiles * B * H;
    require(blocks <= INT_MAX, ErrorKind::Unsupported,
            "cuda_attention_f16: " + std::to_string(blocks) + " blocks exceed one launch");
    p.q_tiles = static_cast<int>(q_tiles);

    int device = 0;
    KILN_CUDA_CHECK(cudaGetDevice(&device));
    const ArchPaths& paths = device_arch_paths(device);  // KILN_CUDA_ARCH's choices too, as on such a device
    require(paths.flash_attention, ErrorKind::Unsupported,
            "cuda_attention_f16: the flash kernel needs compute capability 8.0; cuda:" + std::to_string(device) +
                " has " + capability_name(paths.capability));
    const int max_smem = paths.max_shared_per_block;
    require(e.smem <= size_t(max_smem), ErrorKind::Unsupported,
            "cuda_attention_f16: D = " + std::to_string(D) + " needs " + std::to_string(e.smem) +
                " bytes of shared memory per block; this device allows " + std::to_string(max_smem));
    // Per device and function; cheap, and keeps multi-GPU use right without a cache.
    KILN_CUDA_CHECK(cudaFuncSetAttribute(e.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(e.smem)));
    e.launch(p, static_cast<int>(blocks), e.smem, stream);
    KILN_CUDA_CHECK(cudaGetLastError());
}

void check_args(const __half* q, const __half* k, const __half* v, const __half* out, int B, int Lq, int Lk, int H,
                int D, AttentionStrides st = {}) {
    const std::string shape = "B=" + std::to_string(B) + " Lq=" + std::to_string(Lq) + " Lk=" + std::to_string(Lk) +
                              " H=" + std::to_string(H) + " D=" + std::to_string(D);
    require(B >= 0 && Lq >= 0 && Lk >= 1 && H >= 1 && D >= 1, ErrorKind::InvalidArgument,
            "cuda_attention_f16: " + shape + ": need B, Lq >= 0 and Lk, H, D >= 1");
    require(D <= 256, ErrorKind::Unsupported, "cuda_attention_f16: " + shape + ": head dims above 256 are not compiled");
    require(int64_t(H) * D <= INT_MAX && int64_t(std::max(Lq, Lk)) * H * D <= INT64_MAX / std::max(B, 1),
            ErrorKind::InvalidArgument, "cuda_attention_f16: " + shape + ": sizes overflow");
    // Token strides of q and of k/v: 0 (H*D), or at least H*D (projections side by side) and within int.
    for (int64_t stride : {st.q, st.kv})
        require(stride == 0 || (stride >= int64_t(H) * D && stride <= INT_MAX &&
                                int64_t(std::max(Lq, Lk)) * stride <= INT64_MAX / std::max(B, 1)),
                ErrorKind::InvalidArgument,
                "cuda_attention_f16: " + shape + ": token stride " + std::to_string(stride) + " below H*D or too large");
    require(B == 0 || Lq == 0 || (q && k && v && out), ErrorKind::InvalidArgument,
            "cuda_attention_f16: " + shape + ": null pointer");
}

}  // namespace

void cuda_attention_f16(const __half* q, const __half* k, const __half* v, __half* out, int B, int Lq, int Lk, int H,
                        int D, cudaStream_t stream, bool causal, AttentionStrides strides) {
    check_args(q, k, v, out, B, Lq, Lk, H, D, strides);  // before any runtime call: bad sizes are not device errors
    if (B == 0 || Lq == 0) return;
    int device = 0, sms = 0;
    KILN_CUDA_CHECK(cudaGetDevice(&device));
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const int smem = device_arch_paths(device).max_shared_per_block;
    const int config = detail::choose_attention_config(D, B, Lq, H, sms, smem);
    require(config >= 0, ErrorKind::Unsupported,
            "cuda_attention_f16: no configuration for D = " + std::to_string(D) + " fits in the " +
                std::to_string(smem) + " bytes of shared memory a block has on cuda:" + std::to_string(device));
    detail::cuda_attention_f16_config(q, k, v, out, B, Lq, Lk, H, D, stream, causal, config, strides);
}

bool flash_attention_runs(int D, const ArchPaths& paths) {
    if (!paths.flash_attention) return false;
    for (const Entry& e : entries_for_head(D))
        if (e.smem <= size_t(paths.max_shared_per_block)) return true;
    return false;
}

namespace detail {

// The busiest multiprocessor's share of query rows, ceil(blocks / SMs) * block_rows, stands for the time.
// A later configuration replaces the current choice only if it cuts that by a fifth: at equal shares the
// earlier one was measured faster (e.g. 128-row blocks against 64-row ones at Lq = 1024, D = 80, 16 heads
// on 132 SMs), while B = 2 x 10 heads of 1024 rows at D = 64 ran 9% faster in 64-row blocks (share 192
// vs 256 rows).
int choose_attention_config(int D, int B, int Lq, int H, int multiprocessors, int max_shared) {
    const std::vector<Entry>& entries = entries_for_head(D);
    const int64_t sms = std::max(multiprocessors, 1);
    int best = -1;
    int64_t best_share = INT64_MAX;
    for (int i = 0; i < int(entries.size()); ++i) {
        if (entries[i].smem > size_t(max_shared)) continue;  // e.g. D = 160 on 8.6 / 8.9 (99 KiB a block)
        const int64_t rows = entries[i].config.block_rows;
        const int64_t blocks = (int64_t(Lq) + rows - 1) / rows * B * H;
        const int64_t share = (blocks + sms - 1) / sms * rows;
        if (best < 0 || share * 5 < best_share * 4) best = i, best_share = share;
    }
    return best;
}

std::vector<AttentionConfig> attention_configs(int D) {
    std::vector<AttentionConfig> out;
    for (const Entry& e : entries_for_head(D)) out.push_back(e.config);
    return out;
}

void cuda_attention_f16_config(const __half* q, const __half* k, const __half* v, __half* out, int B, int Lq, int Lk,
                               int H, int D, cudaStream_t stream, bool causal, int config, AttentionStrides strides) {
    NvtxRange range("kiln::cuda_attention_f16");
    check_args(q, k, v, out, B, Lq, Lk, H, D, strides);
    const std::vector<Entry>& entries = entries_for_head(D);
    require(config >= 0 && config < int(entries.size()), ErrorKind::InvalidArgument,
            "cuda_attention_f16: no configuration " + std::to_string(config) + " for D = " + std::to_string(D));
    if (B == 0 || Lq == 0) return;
    run(entries[config], q, k, v, out, B, Lq, Lk, H, D, stream, causal, strides);
}

}  // namespace detail

}  // namespace kiln::cuda
