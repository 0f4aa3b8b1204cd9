// Pickles that would run code or reach outside a state dict (make_ckpt_fixtures.py, tools/ckpt-ti, made them with
// Python's pickle and __reduce__, malicious/ in the same archive): each is refused with an error naming what
// it tried, before anything of it is used; and the same inside a .ckpt zip, through SafetensorsFile::open.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "io/safetensors.h"
#include "io/torch_pickle.h"
#include "ckpt_test_writer.h"
#include "io_test_util.h"

using namespace kiln;
using namespace kiln::test;

namespace {

const std::string kDir = std::string(KILN_CKPT_DATA) + "/malicious/";

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in.good()) << path;
    return std::string(std::istreambuf_iterator<char>(in), {});
}

Error pickle_error(const std::string& bytes) {
    return expect_error([&] {
        read_torch_pickle(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "test.pkl");
    });
}

// Each file and the name its error must carry: the global or opcode it used (os.system pickles as
// posix.system on Linux; Python 3 writes builtins as __builtin__ in protocol 2).
const std::vector<std::pair<std::string, std::string>> kMalicious = {
    {"os_system.pkl", "'posix.system'"},
    {"builtins_eval.pkl", "'builtins.eval'"},
    {"unknown_global.pkl", "'evil_module.Payload'"},
    {"nested_reduce.pkl", "'posix.system'"},
    {"subprocess.pkl", "'subprocess.check_output'"},
    {"storage_call.pkl", "refused to call 'torch.FloatStorage'"},
    {"reduce_non_callable.pkl", "REDUCE of a str"},
    {"bad_opcode_inst.pkl", "(INST)"},
    {"bad_opcode_stack_global.pkl", "(STACK_GLOBAL)"},
};

}  // namespace

TEST(CkptMalicious, EveryPickleIsRefusedNamingWhatItTried) {
    for (const auto& [file, name] : kMalicious) {
        SCOPED_TRACE(file);
        const Error e = pickle_error(read_file(kDir + file));
        EXPECT_EQ(e.kind(), ErrorKind::InvalidModel);
        EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
}

TEST(CkptMalicious, RefusedInsideACheckpointToo) {
    TempDir dir;
    const std::string pkl = read_file(kDir + "os_system.pkl");
    write_bytes(dir.file("evil.ckpt"), ckpt_zip({{"archive/data.pkl", pkl}, {"archive/version", "3\n"}}, false));
    const Error e = expect_error([&] { SafetensorsFile::open(dir.file("evil.ckpt")); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidModel);
    EXPECT_NE(std::string(e.what()).find("evil.ckpt: archive/data.pkl: refused global 'posix.system'"), std::string::npos)
        << e.what();
}

TEST(CkptMalicious, HandWrittenTricksAreRefused) {
    struct Case {
        std::string bytes, message;
    };
    // Bytes spelled as adjacent literals where a hex escape is followed by a hex digit; B() keeps NULs.
#define B(literal) std::string(literal, sizeof(literal) - 1)
    const std::vector<Case> cases = {
        {B("\x80\x02]q\x00h\x00" "a."), ""},                             // a list holding itself: harmless
        {B("\x80\x02]]b."), "BUILD on a list"},
        {B("\x80\x02(K\x01K\x02tb."), "BUILD needs"},                    // BUILD with nothing left to build
        {B("\x80\x02h\x05."), "memo entry 5 read before it was written"},
        {B("\x80\x02K\x01" "a."), "APPEND needs"},                         // APPEND without a list
        {B("\x80\x02K\x01K\x02s."), "SETITEM needs"},
        {B("\x80\x02)K\x01" "a."), "APPEND to a tuple"},
        {B("\x80\x02X\x05\x00\x00\x00" "ab"), "ends early"},             // truncated string
        {B("\x80\x02K\x01"), "ends early"},                                 // no STOP
        {B("\x80\x06."), "protocol 6"},
        {B("\x80\x02(K\x01t(" "ctorch\nFloatStorage\nX\x01\x00\x00\x00" "0X\x03\x00\x00\x00" "cpuK\x01tQ."),
         "persistent id that is not"},                                       // a persistent id not of a storage
        {B("\x80\x02" "ccollections\nOrderedDict\nK\x01\x85R."), "OrderedDict of a int"},
        {B("\x80\x02" "c") + std::string(300, 'a') + "\nb\n.", "longer than 256"},
        {B("\x80\x02") + std::string(5000, '(') + ".", "MARKs nested deeper"},
        {B("\x80\x02" "cbuiltins\nexec\n."), "'builtins.exec'"},               // refused at GLOBAL, before any call
        {B("\x80\x02" "ctorch.serialization\n_get_layout\n."), "'torch.serialization._get_layout'"},  // torch's, not kiln's
    };
#undef B
    for (const Case& c : cases) {
        SCOPED_TRACE(c.message);
        if (c.message.empty()) {
            EXPECT_NO_THROW(read_torch_pickle(reinterpret_cast<const uint8_t*>(c.bytes.data()), c.bytes.size(), "t"));
            continue;
        }
        const Error e = pickle_error(c.bytes);
        EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
}

TEST(CkptMalicious, CopiesOfALongListCannotExhaustMemory) {
    // One list of 2,000 items turned into a set 10,000 times would make 20 million items from 200 KB.
    std::string p = "\x80\x02]q";
    p += std::string(1, '\0') + "(" + std::string(2000, 'N') + "e](";
    for (int i = 0; i < 10000; ++i) p += std::string("cbuiltins\nset\nh") + '\0' + "\x85R";
    p += "e.";
    const Error e = pickle_error(p);
    EXPECT_NE(std::string(e.what()).find("copies more container items"), std::string::npos) << e.what();
}
