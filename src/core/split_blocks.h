// The bookkeeping of a caching device allocator that cuts requests out of larger free blocks (issue 21; docs/MEMORY.md,
// "What a capped run pays at its allocator"). Segments are what the driver gave (one cudaMalloc each); blocks are
// parts of a segment, each free or live, all of the segment's pool. A request takes the smallest free block of its
// pool that holds it (best fit) and leaves the rest free when the rest is worth keeping; a freed block merges with
// the free blocks beside it in its segment, so a segment whose blocks are all free again is whole and can go back to
// the driver. Without this a cache under a --vram cap fills with blocks of the wrong sizes and gives them back to
// the driver at every step. No device call is made here: the allocator makes them (so this is tested on the CPU).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace kiln {

class SplitBlocks {
public:
    // A cut leaves a free block only where at least `min_remainder` bytes remain; else the request takes the
    // whole block (and frees it whole).
    explicit SplitBlocks(int64_t min_remainder) : min_remainder_(min_remainder) {}

    // A live block of `size` bytes from a free block of `pool`: its address, or 0 where no free block holds it.
    uint64_t take(int pool, int64_t size);
    // A segment for `pool`, [base, base + bytes) (one the driver gave, or a whole cached block), whose first `live`
    // bytes (> 0) become a live block at base; the rest is free where it is at least `min_remainder`, else the live
    // block takes it too, as a cut does.
    void add_segment(int pool, uint64_t base, int64_t bytes, int64_t live);

    struct Released {
        int64_t bytes = 0;      // the block's size (0: not a live block of here)
        uint64_t segment = 0;   // its segment's base
        bool segment_free = false;  // every block of the segment is free now
        int pool = 0;
    };
    // The live block at `address` becomes free, merged with the free blocks beside it.
    Released release(uint64_t address);

    struct Segment {
        uint64_t base;
        int64_t bytes;
        int pool;
    };
    // The segments every block of which is free, of the pools `pool_ok` accepts.
    std::vector<Segment> free_segments(const std::function<bool(int)>& pool_ok) const;
    // Forgets a segment every block of which is free (gone back to the driver): its bytes, 0 where it is not one.
    int64_t remove_segment(uint64_t base);

    // Every segment of pool `from`, its blocks free and live, becomes pool `to`'s (a recording's pool released into
    // the ordinary one, as Vulkan's allocator does).
    void move_pool(int from, int to);

    bool is_live(uint64_t address) const;
    int64_t live_bytes() const { return live_bytes_; }
    int64_t segment_bytes() const { return segment_bytes_; }
    std::vector<Segment> segments() const;  // all of them (the process is ending: every one goes back)

private:
    struct Block {
        int64_t bytes;
        uint64_t segment;
        int pool;
        bool free;
    };
    void mark_free(uint64_t address, const Block& b) { free_of(b.pool).insert({b.bytes, address}); }
    void unmark_free(uint64_t address, const Block& b) { free_of(b.pool).erase({b.bytes, address}); }

    int64_t min_remainder_;
    std::map<uint64_t, Block> blocks_;  // by address: a segment's blocks are neighbours here
    // Per pool (its index; grown as pools appear): (bytes, address) of its free blocks. (A vector, not a map of
    // sets: Debian 12's hipcc, clang 15, crashes instantiating the map's node type.)
    std::vector<std::set<std::pair<int64_t, uint64_t>>> free_;
    std::set<std::pair<int64_t, uint64_t>>& free_of(int pool) {
        if (size_t(pool) >= free_.size()) free_.resize(size_t(pool) + 1);
        return free_[size_t(pool)];
    }
    std::map<uint64_t, Segment> segments_;  // by base
    int64_t live_bytes_ = 0, segment_bytes_ = 0;
};

// When an allocator cuts requests from larger free blocks. Measured on an H200 (docs/MEMORY.md, "What a capped run
// pays at its allocator"): without a cap cutting holds far less (SD 1.5 txt2img: 1.6-1.7 GiB less on the driver)
// at the same speed; under a CUDA cap the blocks a long-lived tensor pins inside freed segments can leave a
// large request no room that giving whole blocks back would have made (the VAE decode then goes to bands).
enum class SplitPolicy {
    Never,
    Always,
    WhileUncapped,  // while the allocator has no --vram cap; requests under a cap are served whole
};
// Whether a request is cut under `policy` while the allocator's cap is `limit` (0: none).
inline bool cuts_blocks(SplitPolicy policy, int64_t limit) {
    return policy == SplitPolicy::Always || (policy == SplitPolicy::WhileUncapped && limit <= 0);
}

// A backend's setting for it (KILN_CUDA_SPLIT_BLOCKS, KILN_VULKAN_SPLIT_BLOCKS), named `name`, of value `value`
// (null or "": unset, giving `by_default`): "0" never cuts, "1" always, "uncapped" only without a cap; anything
// else is InvalidArgument naming the setting.
SplitPolicy split_policy_setting(const char* name, const char* value, SplitPolicy by_default);

}  // namespace kiln
