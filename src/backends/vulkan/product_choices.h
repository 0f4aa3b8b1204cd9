// The measured choice of a product's build per shape (VulkanDeviceOps::run_product: the first call of a shape times
// each build), kept on disk beside the pipeline cache, so that each shape is timed once per machine, driver and kiln
// build rather than once per process: on a slow GPU the timing runs cost a first UNet call about as much again.
// The file is a cache: a missing, unreadable, damaged or foreign one (another kiln build's kernels) is ignored, never
// an error, and one that cannot be written only costs the next process its timings.
#pragma once
#include <map>
#include <optional>
#include <string>

namespace kiln::vulkan {

class ProductChoices {
public:
    // `file` empty: nothing is read or kept on disk. The file is read at the first find().
    explicit ProductChoices(std::string file) : file_(std::move(file)) {}

    // The build recorded for a product shape (a key of the caller's: no spaces), if any.
    std::optional<std::string> find(const std::string& key);
    void record(const std::string& key, const std::string& build);
    // Forgets what was read and recorded (a test that needs a shape timed again); the file is left as it is.
    void clear();
    // Writes the file (beside, then renamed over it) when something was recorded since the last save; never throws.
    void save() noexcept;

    // The first line of a file this kiln build writes: a format version and a hash of every embedded kernel.
    static std::string header();
    // Reads choices from the text of a file; empty where the header is not this build's or any line is malformed.
    static std::map<std::string, std::string> parse(const std::string& text);

private:
    void load();
    std::string file_;
    bool loaded_ = false, dirty_ = false;
    std::map<std::string, std::string> choices_;  // key -> build
};

}  // namespace kiln::vulkan
