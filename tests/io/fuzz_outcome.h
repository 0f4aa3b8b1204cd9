// What a fuzzer's reader did with one mutated file: read it whole (Valid) or refused it with kiln's typed error
// (Rejected). Any other exception escaping is a test failure naming the file, then counts as Rejected.
#pragma once
#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "kiln/error.h"

namespace kiln::test {

enum class Outcome { Valid, Rejected };

template <class Read>
Outcome fuzz_outcome(const std::string& what, Read read) {
    try {
        read();
        return Outcome::Valid;
    } catch (const Error&) {
        return Outcome::Rejected;
    } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": escaped as std::exception: " << e.what();
    } catch (...) {
        ADD_FAILURE() << what << ": escaped as an unknown exception";
    }
    return Outcome::Rejected;
}

}  // namespace kiln::test
