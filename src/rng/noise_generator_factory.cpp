#include "rng/noise_generator_factory.h"

#include "kiln/error.h"
#include "rng/torch_cpu_generator.h"
#include "rng/torch_cuda_generator.h"

namespace kiln {

std::unique_ptr<NoiseGenerator> make_noise_generator(const std::string& kind, uint64_t seed) {
    if (kind == "cpu") return std::make_unique<TorchCpuGenerator>(seed);
    if (kind == "cuda") return std::make_unique<TorchCudaGenerator>(seed);
    fail(ErrorKind::InvalidArgument, "unknown noise generator \"" + kind + "\" (expected \"cpu\" or \"cuda\")");
}

}  // namespace kiln
