// UNet2DConditionModel for SD 1.x, SD 2.x and SDXL (text_time conditioning). It runs where its weights are:
// float32 on the CPU, or on a GPU in the weights' dtype; the inputs must be on that device already
// (ops::on_device_of), so a call can be recorded and replayed (Backend::run_recorded).
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "models/unet/unet_blocks.h"
#include "models/unet/unet_config.h"

namespace kiln {

struct UNetInputs {
    const Tensor* sample = nullptr;           // [B, 4, h, w]
    const Tensor* timesteps = nullptr;        // [B] float32
    const Tensor* context = nullptr;          // [B, 77, cross_attention_dim]
    const Tensor* text_embeds = nullptr;      // SDXL: [B, pooled dim]
    const Tensor* time_ids = nullptr;         // SDXL: [B, 6]
    // When set, forward calls it after each block has run, with the prefix of that block's weight names
    // ("down_blocks.1.attentions.0.", "mid_block.resnets.1.", "conv_out.", ...): a memory budget drops the
    // block's pages there (WeightPages::drop), so that a call holds one block's pages at a time. Not part of
    // a recorded call's inputs (list()).
    const std::function<void(const std::string&)>* after_block = nullptr;
    // Likewise before each block runs, with the same prefix: a --vram budget brings the block's weights back
    // to the device there (UNet::stream_in), when the UNet is streamed.
    const std::function<void(const std::string&)>* before_block = nullptr;

    // As a flat list, the form a recorded call takes (Backend::run_recorded): sample, timesteps, context,
    // then text_embeds and time_ids when set.
    std::vector<const Tensor*> list() const;
    static UNetInputs from_list(const std::vector<const Tensor*>& t);
};

class UNet {
public:
    static UNet load(const WeightSource& source, const UNetConfig& config);
    Tensor forward(const UNetInputs& in) const;
    const UNetConfig& config() const { return config_; }
    int64_t parameter_count() const { return parameters_; }
    // The weights' pages in the mapped file (empty unless the weights are views of it: on the CPU).
    const WeightPages& pages() const { return pages_; }
    // The weights' device storage (empty on the CPU), which a --vram budget moves off the device and back.
    const DeviceWeights& device_weights() const { return device_weights_; }
    // The start of the keys its calls are recorded under (Backend::run_recorded), forgotten when its weights move.
    void set_recording_prefix(std::string prefix) { device_weights_.set_recording_prefix(std::move(prefix)); }
    // The most of them a call holds when each block's pages are dropped after it (UNetInputs::after_block):
    // the largest block's, and those no block owns (the time embedding's, the output norm's).
    int64_t streamed_page_bytes() const;
    // The same for its device storage (streamed under --vram): the two largest blocks' (a block's weights come
    // while the one before runs: stream_in) and what no block owns.
    int64_t streamed_device_bytes() const;
    // What a streamed call uploads: the weights of every block (what no block owns stays on the device).
    int64_t streamed_block_bytes() const;
    // The same by block prefix (the names UNetInputs::before_block gives): the memory plans replay the streaming
    // in a dry call with it (pipeline/dry_run_plan.h).
    std::map<std::string, int64_t> streamed_block_sizes() const;
    // Before a streamed call: every block's weights off the device (each comes back just before its block runs,
    // through UNetInputs::before_block), and what no block owns on it.
    void place_for_streaming() const;
    // In a streamed call: a block's weights to the device before it runs, and off it after
    // (UNetInputs::before_block / after_block). stream_in also starts the copies of the block that followed this
    // one last time (Backend::upload_ahead), so that they overlap this block's work.
    void stream_in(const std::string& block) const;
    // Whether a streamed block's weights are all on the device now (fetched ahead or brought by stream_in).
    bool streamed_block_resident(const std::string& block) const;
    void stream_out(const std::string& block) const;

private:
    struct DownLevel {
        std::vector<ResnetBlock> resnets;
        std::vector<SpatialTransformer> attentions;
        bool has_downsampler = false;
        Conv2d downsampler;
    };
    struct UpLevel {
        std::vector<ResnetBlock> resnets;
        std::vector<SpatialTransformer> attentions;
        bool has_upsampler = false;
        Conv2d upsampler;
    };

    UNetConfig config_;
    int64_t parameters_ = 0;
    WeightPages pages_;
    DeviceWeights device_weights_;
    Linear time_linear_1_, time_linear_2_;
    Linear add_linear_1_, add_linear_2_;
    Conv2d conv_in_, conv_out_;
    GroupNorm norm_out_;
    std::vector<DownLevel> down_;
    ResnetBlock mid_resnet_0_, mid_resnet_1_;
    SpatialTransformer mid_attention_;
    std::vector<UpLevel> up_;
    // The resnets' time projections, stacked by output width in the order the blocks run ([k C, temb] for the k
    // blocks of width C): one product per width where there was one per block (SD 1.5: 3 instead of 22, each
    // of which, 2 rows by 320 to 1280 columns, kept 2 to 7 of an H200's 132 multiprocessors busy).
    std::vector<Linear> time_projections_;
    // The cross-attentions' k | v projections of the context, likewise stacked by width ([2 k dim, context]):
    // the context is the same for every block, so they are made at the start of a call with one product per
    // width (SD 1.5: 3 instead of 16 products of 154 rows).
    std::vector<Tensor> kv_projections_;
    // By block prefix, the device storage a streamed call moves (place_for_streaming fills it).
    mutable std::map<std::string, std::vector<DeviceBuffer*>> streamed_blocks_;
    mutable std::map<std::string, std::string> streamed_next_;  // the block stream_in saw after each, in order
    mutable std::string streamed_last_;

    // The block prefix a streamed call brings the entry's weights in at, or "" for those that stay.
    std::string streamed_block(const DeviceWeights::Entry& e) const;
    template <class Fn>
    void for_each_resnet(Fn fn);  // fn(block, its weights' name prefix), in the order they run
    template <class Fn>
    void for_each_cross_attention(Fn fn);  // fn(attention, its weights' name prefix)
};

}  // namespace kiln
