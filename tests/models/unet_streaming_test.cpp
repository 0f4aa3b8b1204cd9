// A UNet call that drops each block's weight pages after the block (what a --memory budget asks on the CPU)
// computes the same output bit for bit, reports every block that owns pages, and holds fewer pages at once.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>

#include "common/fixtures.h"
#include "io/safetensors.h"
#include "models/unet/unet.h"

using namespace kiln;
using kiln::test::data_path;

TEST(UNetStreaming, DroppingEachBlocksPagesGivesTheSameOutput) {
    for (const std::string model : {"sd15-mini", "sdxl-mini"}) {
        auto file = std::make_shared<const SafetensorsFile>(
            SafetensorsFile::open(data_path(model + "/diffusers/unet/diffusion_pytorch_model.safetensors")));
        const UNetConfig config =
            unet_config_from_json(kiln::test::read_json(data_path(model + "/diffusers/unet/config.json")));
        const UNet unet = UNet::load(FileSource(file), config);
        ASSERT_FALSE(unet.pages().empty()) << model << ": the fixture's matrices should be views of the file";
        EXPECT_LT(unet.streamed_page_bytes(), unet.pages().bytes()) << model;

        SafetensorsFile ref = SafetensorsFile::open(data_path(model + "/modules.safetensors"));
        const std::string p = "unet.sq.";
        Tensor sample = ref.load(p + "sample"), context = ref.load(p + "context"), t = ref.load(p + "timestep");
        Tensor text_embeds, time_ids;
        UNetInputs in{&sample, &t, &context};
        if (ref.has(p + "text_embeds")) {
            text_embeds = ref.load(p + "text_embeds");
            time_ids = ref.load(p + "time_ids");
            in.text_embeds = &text_embeds;
            in.time_ids = &time_ids;
        }
        const Tensor resident = unet.forward(in);

        std::vector<std::string> blocks;
        const std::function<void(const std::string&)> drop = [&](const std::string& block) {
            blocks.push_back(block);
            unet.pages().drop(block);
        };
        in.after_block = &drop;
        const Tensor streamed = unet.forward(in);
        EXPECT_EQ(streamed.values(), resident.values()) << model;

        // Each block once, and every page range of a block (a name under down_blocks, mid_block, up_blocks,
        // conv_in or conv_out) belongs to a reported block.
        EXPECT_EQ(std::set<std::string>(blocks.begin(), blocks.end()).size(), blocks.size()) << model;
        for (const WeightPages::Range& r : unet.pages().ranges()) {
            bool owned = false;
            for (const std::string& b : blocks) owned = owned || r.name.rfind(b, 0) == 0;
            const bool in_a_block = r.name.rfind("down_blocks.", 0) == 0 || r.name.rfind("mid_block.", 0) == 0 ||
                                    r.name.rfind("up_blocks.", 0) == 0 || r.name.rfind("conv_in.", 0) == 0 ||
                                    r.name.rfind("conv_out.", 0) == 0;
            EXPECT_EQ(owned, in_a_block) << model << ": " << r.name;
        }
    }
}
