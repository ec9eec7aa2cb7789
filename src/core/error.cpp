#include "core/error.h"

namespace pylon::detail {

void throw_internal(const char* cond, const char* file, int line, const std::string& msg) {
  throw std::logic_error(concat("internal error (a bug in Pylon): ", cond, " failed at ", file, ":",
                                line, msg.empty() ? "" : ": ", msg));
}

}  // namespace pylon::detail
