#include "build_info.hpp"

#include <cstdlib>

namespace attnkit::cli {
std::string git_commit() {
  if (const char* commit = std::getenv("ATTNKIT_COMMIT"); commit != nullptr && *commit != '\0') return commit;
  return built_git_commit();
}
}  // namespace attnkit::cli
