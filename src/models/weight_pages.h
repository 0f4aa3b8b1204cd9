// The pages of a component's weights that are views of a mapped file (Tensor::view), by weight name, so that
// they can leave the process's resident set when nothing will read them for a while: after the component's
// stage (the text encoder once the prompt is encoded), or block by block inside a call when a memory budget
// asks for it (the UNet streamed). The kernel reads dropped pages again from the page cache (or the disk,
// if it evicted them) on the next access, so dropping never changes a value, only what stays resident.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

class WeightPages {
public:
    struct Range {
        std::string name;
        const void* data;
        int64_t bytes;
    };
    void add(std::string name, const void* data, int64_t bytes);
    bool empty() const { return ranges_.empty(); }
    int64_t bytes() const;  // every range's bytes, once each
    // Bytes of the ranges whose weight names start with `prefix`.
    int64_t bytes_with_prefix(const std::string& prefix) const;
    // The pages of the ranges whose names start with `prefix` ("" is every range) leave the resident set.
    void drop(const std::string& prefix = "") const noexcept;
    const std::vector<Range>& ranges() const { return ranges_; }

private:
    std::vector<Range> ranges_;
};

}  // namespace kiln
