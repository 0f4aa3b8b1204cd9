#include "progress_bar.h"

#include <cstdio>

namespace kiln::cli {

ProgressBar::ProgressBar(std::string label, bool enabled)
    : label_(std::move(label)), enabled_(enabled), start_(std::chrono::steady_clock::now()) {}

void ProgressBar::update(int done, int total) {
    if (!enabled_ || total <= 0) return;
    constexpr int kWidth = 30;
    const int filled = done * kWidth / total;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double rate = done > 0 ? secs / done : 0;
    std::fprintf(stderr, "\r%s [%s%s] %d/%d  %.1fs  %.2fs/it ", label_.c_str(), std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(), done, total, secs, rate);
    std::fflush(stderr);
    drawn_ = true;
}

void ProgressBar::finish() {
    if (drawn_) std::fputc('\n', stderr);
    drawn_ = false;
}

}  // namespace kiln::cli
