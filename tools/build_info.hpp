// What the binary was built from: `git rev-parse HEAD` at build time (with "-dirty" when tracked
// files differed), written by git_commit.cmake. ATTNKIT_COMMIT in the environment overrides it
// (a build from a copy of the tree without .git reports "unknown").
#pragma once
#include <string>

namespace attnkit::cli {
const char* built_git_commit();  // generated
std::string git_commit();        // ATTNKIT_COMMIT or built_git_commit()
}
