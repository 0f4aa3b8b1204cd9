// The kiln program runs OpenBLAS's kernels for the CPU's vector units even where Debian's OpenBLAS does not know
// the CPU and picks its generic ones (runtime/openblas_core.h: the program starts again with OPENBLAS_CORETYPE).
#include <gtest/gtest.h>

#include <string>

#include "cli/cli_expectations.h"
#include "cli/run_process.h"

using namespace kiln::test;

TEST(OpenblasKernels, TheProgramRunsMoreThanTheGenericOnesWhereTheCpuHasAvx2) {
    // Without the setting that scripts/test.sh and run_kiln give the program: what a user's shell gives it.
    const ProcessResult r = run_process("/usr/bin/env", {"-u", "OPENBLAS_CORETYPE", KILN_CLI, "info", "--devices"});
    expect_success(r);
    const std::string tag = "OpenBLAS's ";
    const size_t at = r.out.find(tag);
    if (at == std::string::npos) GTEST_SKIP() << "the BLAS is not OpenBLAS:\n" << r.out;
    const std::string core = r.out.substr(at + tag.size(), r.out.find(' ', at + tag.size()) - at - tag.size());
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2: " << core;
    for (const char* generic : {"Prescott", "Core2", "Nehalem"}) EXPECT_NE(core, generic) << r.out;
}
