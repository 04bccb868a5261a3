// Test support: a call that must throw attnkit::Error whose message names the problem and a Fix.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "attnkit/error.hpp"

namespace attnkit::testing {

inline std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "no Error";
}

inline void expect_error(const std::function<void()>& call, const std::string& needle) {
  const std::string message = error_of(call);
  EXPECT_NE(message.find(needle), std::string::npos) << "expected '" << needle << "' in: " << message;
  EXPECT_NE(message.find("Fix:"), std::string::npos) << message;
}

}  // namespace attnkit::testing
