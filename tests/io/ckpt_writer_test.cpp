// The test-side checkpoint writer (ckpt_test_writer.h) against torch's own file, then whole fixture models
// written as .ckpt: every tensor read back from the .ckpt is the safetensors file's tensor, byte for byte.
// (The fixture models' .ckpt files are too large to commit, so they are made here.)
#include <gtest/gtest.h>

#include <cstring>

#include "common/fixtures.h"
#include "io/safetensors.h"
#include "ckpt_test_writer.h"
#include "io_test_util.h"

using namespace kiln;
using namespace kiln::test;

namespace {

void expect_same_tensors(const SafetensorsFile& a, const SafetensorsFile& b) {
    ASSERT_EQ(a.names(), b.names()) << a.path() << " vs " << b.path();
    for (const std::string& name : a.names()) {
        const TensorInfo &x = a.info(name), &y = b.info(name);
        ASSERT_EQ(x.dtype, y.dtype) << name;
        ASSERT_EQ(x.shape, y.shape) << name;
        ASSERT_EQ(x.nbytes, y.nbytes) << name;
        ASSERT_EQ(std::memcmp(a.raw(name), b.raw(name), x.nbytes), 0) << name;
    }
}

}  // namespace

// The writer lays out what torch.save lays out: torch's flat.ckpt rewritten by it reads back the same.
TEST(CkptWriter, RewritesTorchsFileToTheSameTensors) {
    TempDir dir;
    const SafetensorsFile torch_file = SafetensorsFile::open(std::string(KILN_CKPT_DATA) + "/small.ckpt");
    for (bool zip64 : {false, true}) {
        for (const char* nest : {"", "state_dict"}) {
            CkptOptions o;
            o.zip64 = zip64;
            o.nest = nest;
            const std::string path = dir.file("rewritten.ckpt");
            write_bytes(path, ckpt_bytes(ckpt_tensors(torch_file), o));
            const SafetensorsFile ours = SafetensorsFile::open(path);
            expect_same_tensors(torch_file, ours);
            for (const std::string& name : ours.names()) EXPECT_EQ(ours.info(name).offset % 64, 0u) << name;
        }
    }
}

class CkptFixtureModel : public ::testing::TestWithParam<std::string> {};

TEST_P(CkptFixtureModel, TensorsAreTheSafetensorsFilesTensors) {
    TempDir dir;
    const SafetensorsFile st = SafetensorsFile::open(data_path(GetParam() + "/" + GetParam() + ".safetensors"));
    CkptOptions o;
    o.zip64 = GetParam() == "sdxl-mini";  // as torch writes files over 4 GiB, SDXL's
    const std::string path = dir.file(GetParam() + ".ckpt");
    write_bytes(path, ckpt_bytes(ckpt_tensors(st), o));
    const SafetensorsFile ckpt = SafetensorsFile::open(path);
    EXPECT_TRUE(ckpt.is_torch_checkpoint());
    expect_same_tensors(st, ckpt);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CkptFixtureModel, ::testing::Values("sd15-mini", "sd2-mini", "sdxl-mini"),
                         [](const auto& info) { return info.param.substr(0, info.param.find('-')); });
