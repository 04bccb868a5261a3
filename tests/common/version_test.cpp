// The version macros agree with each other and with what CMake's project() read from them.
#include <gtest/gtest.h>

#include <string>

#include "attnkit/attnkit.hpp"

namespace {

TEST(Version, MacrosAgree) {
  const std::string parts = std::to_string(ATTNKIT_VERSION_MAJOR) + "." + std::to_string(ATTNKIT_VERSION_MINOR) + "." +
                            std::to_string(ATTNKIT_VERSION_PATCH);
  EXPECT_EQ(parts, ATTNKIT_VERSION_STRING);
  EXPECT_EQ(ATTNKIT_VERSION, ATTNKIT_VERSION_MAJOR * 10000 + ATTNKIT_VERSION_MINOR * 100 + ATTNKIT_VERSION_PATCH);
  EXPECT_EQ(std::string(ATTNKIT_TEST_PROJECT_VERSION), ATTNKIT_VERSION_STRING);
}

}  // namespace
