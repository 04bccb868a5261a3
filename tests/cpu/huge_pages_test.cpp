// cpu::advise_huge_pages: the advice lands on the whole 2 MiB pages inside a range (Linux), and a
// range with none in it is a no-op; the memory's contents are untouched either way.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "attnkit/cpu.hpp"

namespace {

// The system's transparent-huge-page mode: "always", "madvise", "never", or "" where unknown.
std::string thp_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(f, line)) return "";
  const auto open = line.find('['), close = line.find(']');
  return open == std::string::npos || close == std::string::npos ? "" : line.substr(open + 1, close - open - 1);
}

struct Free {
  void operator()(std::uint8_t* p) const { std::free(p); }
};

}  // namespace

TEST(HugePages, AdviceKeepsContentsAndSucceedsWhereTheSystemAllowsIt) {
  constexpr std::size_t kHuge = std::size_t{2} << 20, kBytes = 4 * kHuge;
  std::unique_ptr<std::uint8_t, Free> memory(static_cast<std::uint8_t*>(std::aligned_alloc(kHuge, kBytes)));
  ASSERT_NE(memory, nullptr);
  std::uint8_t* p = memory.get();
  for (std::size_t i = 0; i < kBytes; i += 4096) p[i] = static_cast<std::uint8_t>(i / 4096 * 7 + 1);
  const std::string mode = thp_mode();
  // A range that holds no whole huge page (unaligned start, under 2 MiB): nothing to advise.
  EXPECT_TRUE(attnkit::cpu::advise_huge_pages(p + 4096, kHuge - 8192));
  EXPECT_TRUE(attnkit::cpu::advise_huge_pages(p, 0));
  const bool advised = attnkit::cpu::advise_huge_pages(p + 100, kBytes - 100);  // three whole pages inside
  for (std::size_t i = 0; i < kBytes; i += 4096) ASSERT_EQ(p[i], static_cast<std::uint8_t>(i / 4096 * 7 + 1)) << i;
#if defined(__linux__)
  if (mode == "always" || mode == "madvise") {
    EXPECT_TRUE(advised) << "THP mode " << mode;
  } else {
    GTEST_SKIP() << "transparent huge pages are '" << mode << "' here: whether the advice is taken is not checked";
  }
#else
  EXPECT_FALSE(advised);
#endif
}
