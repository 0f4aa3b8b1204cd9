// A scope's host time, added to a running total in milliseconds (core/allocator_counts.h's).
#pragma once
#include <chrono>

namespace kiln {

// Adds the host milliseconds of its lifetime to `ms`.
class AddHostTime {
public:
    explicit AddHostTime(double& ms) : ms_(ms), start_(std::chrono::steady_clock::now()) {}
    ~AddHostTime() { ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count(); }
    AddHostTime(const AddHostTime&) = delete;
    AddHostTime& operator=(const AddHostTime&) = delete;

private:
    double& ms_;
    std::chrono::steady_clock::time_point start_;
};

}  // namespace kiln
