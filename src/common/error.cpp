#include "attnkit/error.hpp"

namespace attnkit {

void fail(const std::string& context, const std::string& problem, const std::string& fix) {
  throw Error(context + ": " + problem + ". Fix: " + fix);
}

}  // namespace attnkit
