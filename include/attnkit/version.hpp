// attnkit's version: the one place it is written. CMake's project(), the Python package's metadata
// (pyproject.toml reads this line) and attnkit.__version__ all take it from here.
#pragma once

#define ATTNKIT_VERSION_STRING "0.1.0"
#define ATTNKIT_VERSION_MAJOR 0
#define ATTNKIT_VERSION_MINOR 1
#define ATTNKIT_VERSION_PATCH 0
// One integer for #if comparisons: major * 10000 + minor * 100 + patch.
#define ATTNKIT_VERSION (ATTNKIT_VERSION_MAJOR * 10000 + ATTNKIT_VERSION_MINOR * 100 + ATTNKIT_VERSION_PATCH)
