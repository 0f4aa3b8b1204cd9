// torch.randn on a CUDA generator, computed on the CPU bit for bit:
//   torch.randn(shape, generator=torch.Generator("cuda").manual_seed(seed), device="cuda")
// (the "GPU" seed source of AUTOMATIC1111's WebUI).
//
// torch draws with cuRAND's Philox4x32-10 in a grid-stride kernel (distribution_nullary_kernel):
// 256-thread blocks, grid = min(ceil(n / 256), SMs * (max threads per SM / 256)); thread i owns
// Philox subsequence i and, per loop trip, one curand_normal4 call whose 4 values go to elements
// i, i + T, i + 2T, i + 3T (T = threads in the grid). Each call advances the generator's Philox
// offset by 4 * trips. The element-to-random mapping therefore depends on the GPU's
// multiprocessor count once n exceeds 256 * SMs * (max threads per SM / 256) (270336 on an H200 or
// H100 SXM: 132 SMs x 2048 threads); below that every element gets the first value of its own
// thread and the result is the same on every GPU. The defaults describe the H200 the project's
// fixtures come from.
#pragma once
#include <cstdint>

#include "core/noise.h"

namespace kiln {

class TorchCudaGenerator : public NoiseGenerator {
public:
    static constexpr int kH200Multiprocessors = 132;
    static constexpr int kH200MaxThreadsPerMultiprocessor = 2048;

    explicit TorchCudaGenerator(uint64_t seed, int multiprocessors = kH200Multiprocessors,
                                int max_threads_per_multiprocessor = kH200MaxThreadsPerMultiprocessor);

    Tensor randn(const Shape& shape) override;

    // The Philox offset the next call starts from, as torch's Generator.get_offset().
    uint64_t offset() const { return offset_; }

private:
    uint64_t seed_;
    int multiprocessors_;
    int max_threads_per_multiprocessor_;
    uint64_t offset_ = 0;
};

}  // namespace kiln
