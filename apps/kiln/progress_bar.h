// A one-line progress bar on stderr, drawn only when stderr is a terminal.
#pragma once
#include <chrono>
#include <string>

namespace kiln::cli {

class ProgressBar {
public:
    ProgressBar(std::string label, bool enabled);
    void update(int done, int total);
    void finish();

private:
    std::string label_;
    bool enabled_;
    bool drawn_ = false;
    std::chrono::steady_clock::time_point start_;
};

}  // namespace kiln::cli
