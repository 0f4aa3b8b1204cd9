#include "core/split_blocks.h"

#include <iterator>
#include <string>

#include "kiln/error.h"

namespace kiln {

SplitPolicy split_policy_setting(const char* name, const char* value, SplitPolicy by_default) {
    const std::string v = value ? value : "";
    if (v.empty()) return by_default;
    if (v == "0") return SplitPolicy::Never;
    if (v == "1") return SplitPolicy::Always;
    if (v == "uncapped") return SplitPolicy::WhileUncapped;
    fail(ErrorKind::InvalidArgument, std::string(name) + "=" + v +
                                         ": 1 cuts requests from larger cached blocks, 0 keeps blocks whole, uncapped "
                                         "cuts them only without a --vram cap");
}

uint64_t SplitBlocks::take(int pool, int64_t size) {
    if (pool < 0 || size_t(pool) >= free_.size()) return 0;
    auto& pool_free = free_[size_t(pool)];
    const auto fit = pool_free.lower_bound({size, 0});
    if (fit == pool_free.end()) return 0;
    const uint64_t address = fit->second;
    pool_free.erase(fit);
    Block& b = blocks_.at(address);
    if (b.bytes - size >= min_remainder_) {
        const Block rest{b.bytes - size, b.segment, b.pool, true};
        blocks_.emplace(address + uint64_t(size), rest);
        mark_free(address + uint64_t(size), rest);
        b.bytes = size;
    }
    b.free = false;
    live_bytes_ += b.bytes;
    return address;
}

void SplitBlocks::add_segment(int pool, uint64_t base, int64_t bytes, int64_t live) {
    require(pool >= 0 && live > 0 && live <= bytes, ErrorKind::InvalidArgument,
            "SplitBlocks::add_segment: pool " + std::to_string(pool) + ", " + std::to_string(live) + " live of " +
                std::to_string(bytes) + " bytes");
    free_of(pool);  // its free list exists before release (a noexcept caller's) needs it
    if (bytes - live < min_remainder_) live = bytes;
    segments_[base] = Segment{base, bytes, pool};
    segment_bytes_ += bytes;
    blocks_[base] = Block{live, base, pool, false};
    live_bytes_ += live;
    if (bytes > live) {
        const Block rest{bytes - live, base, pool, true};
        blocks_[base + uint64_t(live)] = rest;
        mark_free(base + uint64_t(live), rest);
    }
}

SplitBlocks::Released SplitBlocks::release(uint64_t address) {
    auto it = blocks_.find(address);
    if (it == blocks_.end() || it->second.free) return {};
    Block& b = it->second;
    const Released released{b.bytes, b.segment, false, b.pool};
    live_bytes_ -= b.bytes;
    b.free = true;
    // The next block of the same segment, if free, joins this one; this one joins the previous, if free.
    if (auto next = std::next(it); next != blocks_.end() && next->second.segment == b.segment && next->second.free) {
        unmark_free(next->first, next->second);
        b.bytes += next->second.bytes;
        blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
        auto prev = std::prev(it);
        if (prev->second.segment == b.segment && prev->second.free) {
            unmark_free(prev->first, prev->second);
            prev->second.bytes += b.bytes;
            blocks_.erase(it);
            it = prev;
        }
    }
    mark_free(it->first, it->second);
    const Segment& s = segments_.at(released.segment);
    return {released.bytes, released.segment, it->first == s.base && it->second.bytes == s.bytes, released.pool};
}

std::vector<SplitBlocks::Segment> SplitBlocks::free_segments(const std::function<bool(int)>& pool_ok) const {
    std::vector<Segment> whole;
    for (const auto& [base, s] : segments_) {
        if (!pool_ok(s.pool)) continue;
        const Block& first = blocks_.at(base);
        if (first.free && first.bytes == s.bytes) whole.push_back(s);
    }
    return whole;
}

int64_t SplitBlocks::remove_segment(uint64_t base) {
    const auto s = segments_.find(base);
    if (s == segments_.end()) return 0;
    const auto b = blocks_.find(base);
    if (!b->second.free || b->second.bytes != s->second.bytes) return 0;
    const int64_t bytes = s->second.bytes;
    unmark_free(base, b->second);
    blocks_.erase(b);
    segment_bytes_ -= bytes;
    segments_.erase(s);
    return bytes;
}

void SplitBlocks::move_pool(int from, int to) {
    if (from == to || from < 0 || to < 0) return;
    for (auto& [base, s] : segments_)
        if (s.pool == from) s.pool = to;
    for (auto& [address, b] : blocks_)
        if (b.pool == from) b.pool = to;
    if (size_t(from) >= free_.size()) return;
    std::set<std::pair<int64_t, uint64_t>> moved = std::move(free_[size_t(from)]);
    free_[size_t(from)].clear();
    free_of(to).insert(moved.begin(), moved.end());
}

bool SplitBlocks::is_live(uint64_t address) const {
    const auto it = blocks_.find(address);
    return it != blocks_.end() && !it->second.free;
}

std::vector<SplitBlocks::Segment> SplitBlocks::segments() const {
    std::vector<Segment> all;
    for (const auto& [base, s] : segments_) all.push_back(s);
    return all;
}

}  // namespace kiln
