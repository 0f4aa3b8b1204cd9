// PyTorch checkpoints made by torch.save itself (make_ckpt_fixtures.py in tools/ckpt-ti/scripts.tar.xz; packed
// in tests/data/ckpt/ckpt-fixtures.tar.xz) read
// through SafetensorsFile: dtypes, shapes, values, shared storages with offsets, the 'state_dict' level,
// the legacy pre-1.6 format, and the refusal of strided views.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/dtype_convert.h"
#include "io/mapped_tensor.h"
#include "io/safetensors.h"
#include "io_test_util.h"

using namespace kiln;
using namespace kiln::test;

namespace {

const std::string kDir = std::string(KILN_CKPT_DATA) + "/";

// The fixture script's formula: value i of tensor k is (i - 5) * 0.25 + k (exact in every float dtype used).
float fixture_value(int k, int64_t i) { return static_cast<float>((static_cast<double>(i) - 5) * 0.25 + k); }

struct Expected {
    std::string name;
    DType dtype;
    Shape shape;
    int k;
    int64_t first;
};

std::vector<Expected> read_expected(const std::string& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << path;
    std::vector<Expected> out;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream fields(line);
        std::string name, dtype, shape, extra;
        Expected e;
        fields >> name >> dtype;
        // The shape field is empty for 0-d tensors, so four or five fields follow the name.
        std::vector<std::string> rest;
        while (fields >> extra) rest.push_back(extra);
        if (rest.size() == 3) shape = rest[0];
        e.name = name;
        e.dtype = dtype == "float16" ? DType::F16 : dtype == "bfloat16" ? DType::BF16 : DType::F32;
        std::istringstream dims(shape);
        for (std::string d; std::getline(dims, d, ',');) e.shape.push_back(std::stoll(d));
        e.k = std::stoi(rest[rest.size() - 2]);
        e.first = std::stoll(rest.back());
        out.push_back(e);
    }
    return out;
}

void expect_values(const SafetensorsFile& f, const std::string& name, int k, int64_t first) {
    const Tensor t = f.load(name);
    for (int64_t i = 0; i < t.numel(); ++i)
        ASSERT_EQ(t.data()[i], fixture_value(k, first + i)) << name << " element " << i;
}

}  // namespace

TEST(CkptFixture, TrainingCheckpointTensorsMatchTorch) {
    const SafetensorsFile f = SafetensorsFile::open(kDir + "small.ckpt");
    EXPECT_TRUE(f.is_torch_checkpoint());
    const std::vector<Expected> expected = read_expected(kDir + "small.expected");
    ASSERT_EQ(expected.size(), 9u);
    for (const Expected& e : expected) {
        SCOPED_TRACE(e.name);
        ASSERT_TRUE(f.has(e.name));
        EXPECT_EQ(f.info(e.name).dtype, e.dtype);
        EXPECT_EQ(f.info(e.name).shape, e.shape);
        expect_values(f, e.name, e.k, e.first);
    }
    // The int32 buffer is a tensor too; global_step, epoch and the note are not tensors and are skipped.
    EXPECT_EQ(f.info("model_ema.num_updates").dtype, DType::I32);
    EXPECT_EQ(f.load("model_ema.num_updates").data()[0], 7.0f);
    EXPECT_EQ(f.names().size(), expected.size() + 1);
    EXPECT_FALSE(f.has("global_step"));
    // Three views of one storage: the same bytes of the file, at their storage offsets.
    const TensorInfo& whole = f.info("model.diffusion_model.whole");
    EXPECT_EQ(f.info("model.diffusion_model.rows").offset, whole.offset + 4 * sizeof(float));
    EXPECT_EQ(f.info("model.diffusion_model.row2").offset, whole.offset + 8 * sizeof(float));
}

TEST(CkptFixture, StoragesAreMappedInPlace) {
    // torch.save aligns every storage to 64 bytes, so tensors are views of the mapping, not copies.
    auto f = std::make_shared<const SafetensorsFile>(SafetensorsFile::open(kDir + "small.ckpt"));
    for (const char* name : {"model.diffusion_model.a", "model.diffusion_model.c", "model.diffusion_model.rows"}) {
        const std::optional<Tensor> view = mapped_tensor(f, name);
        ASSERT_TRUE(view.has_value()) << name;
        const Tensor copy = f->load_stored(name);
        EXPECT_EQ(view->shape(), copy.shape()) << name;
    }
}

TEST(CkptFixture, FlatAndLegacyFormatsHoldTheSameTensors) {
    for (const std::string file : {"flat.ckpt", "legacy.ckpt"}) {
        SCOPED_TRACE(file);
        const SafetensorsFile f = SafetensorsFile::open(kDir + file);
        EXPECT_EQ(f.names(), (std::vector<std::string>{"w16", "w32"}));
        EXPECT_EQ(f.info("w16").dtype, DType::F16);
        EXPECT_EQ(f.info("w16").shape, (Shape{5}));
        EXPECT_EQ(f.info("w32").shape, (Shape{2, 2}));
        expect_values(f, "w16", 0, 0);
        expect_values(f, "w32", 1, 0);
    }
}

TEST(CkptFixture, StridedViewIsRefusedNamingTheTensor) {
    const Error e = expect_error([&] { SafetensorsFile::open(kDir + "strided.ckpt"); });
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("'t'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("non-contiguous"), std::string::npos) << e.what();
}
