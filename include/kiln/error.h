// Typed errors: the library never exits the process; callers decide what a failure means.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace kiln {

enum class ErrorKind {
    InvalidModel,     // a model file or folder that is malformed, incomplete or of an unknown kind
    InvalidArgument,  // a request that cannot be honoured as given (sizes, steps, names)
    Unsupported,      // valid input that kiln does not handle yet
    OutOfMemory,      // an allocation failed; recoverable (a planner may retry smaller)
    IO,               // a file that cannot be opened, read or written
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
public:
    Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
    ErrorKind kind() const { return kind_; }

private:
    ErrorKind kind_;
};

[[noreturn]] inline void fail(ErrorKind kind, const std::string& message) { throw Error(kind, message); }

// Checks a condition that depends on user input (files, arguments); internal invariants use assert.
inline void require(bool ok, ErrorKind kind, const std::string& message) {
    if (!ok) fail(kind, message);
}

}  // namespace kiln
