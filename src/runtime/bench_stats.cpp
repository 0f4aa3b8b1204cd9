#include "runtime/bench_stats.h"

#include <algorithm>
#include <cmath>

#include "kiln/error.h"

namespace kiln {

TimingStats timing_stats(const std::vector<double>& seconds) {
    require(!seconds.empty(), ErrorKind::InvalidArgument, "timing statistics of no runs");
    for (double s : seconds)
        require(std::isfinite(s) && s >= 0, ErrorKind::InvalidArgument, "a timing is negative or not finite");
    std::vector<double> v(seconds);
    std::sort(v.begin(), v.end());
    TimingStats t;
    const size_t n = v.size();
    t.runs = static_cast<int64_t>(n);
    t.min = v.front();
    t.max = v.back();
    t.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    double sum = 0;
    for (double s : v) sum += s;
    t.mean = sum / static_cast<double>(n);
    if (n > 1) {
        double sq = 0;
        for (double s : v) sq += (s - t.mean) * (s - t.mean);
        t.stddev = std::sqrt(sq / static_cast<double>(n - 1));
    }
    return t;
}

}  // namespace kiln
