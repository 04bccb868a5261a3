// One exception type for every rejected call. Its message says what was wrong and how to fix it:
//   "decode: head_dim=100 is not a multiple of 8. Fix: use a head_dim that is a multiple of 8."
// Validation happens at the public boundary, before anything is written.
#pragma once
#include <stdexcept>
#include <string>

namespace attnkit {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws Error("<context>: <problem>. Fix: <fix>").
[[noreturn]] void fail(const std::string& context, const std::string& problem, const std::string& fix);

inline void require(bool ok, const std::string& context, const std::string& problem, const std::string& fix) {
  if (!ok) fail(context, problem, fix);
}

}  // namespace attnkit
