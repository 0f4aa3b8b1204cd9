// Summary statistics of repeated timings.
#pragma once
#include <cstdint>
#include <vector>

namespace kiln {

struct TimingStats {
    int64_t runs = 0;
    double median = 0, min = 0, max = 0, mean = 0;
    double stddev = 0;  // sample standard deviation (n - 1); 0 for a single run
};

// Throws InvalidArgument for no samples or a negative / non-finite one.
TimingStats timing_stats(const std::vector<double>& seconds);

}  // namespace kiln
