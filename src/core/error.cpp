#include "kiln/error.h"

namespace kiln {

const char* error_kind_name(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::InvalidModel: return "invalid model";
        case ErrorKind::InvalidArgument: return "invalid argument";
        case ErrorKind::Unsupported: return "unsupported";
        case ErrorKind::OutOfMemory: return "out of memory";
        case ErrorKind::IO: return "I/O error";
    }
    return "error";
}

}  // namespace kiln
