// The Hopper prefill kernel's staged O layout (hopper_prefill.cuh: staged_o_offset), on the host:
// no GPU needed, so it runs in CI too. The layout must be what a TMA store of 64-row x 128-byte
// boxes with the 128-byte swizzle reads, hold every element of the tile once, and let neither the
// stmatrix rows nor the copy-out's quarter-warps hit one shared-memory bank twice.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>

#include "cuda/prefill_hopper/hopper_prefill.cuh"

namespace {

using attnkit::cuda_prefill_hopper::kStagedBoxBytes;
using attnkit::cuda_prefill_hopper::staged_o_offset;

// The TMA's 128-byte swizzle, from the PTX ISA's description: inside each 1024-byte atom, address
// bits 4-6 (the 16-byte chunk of a 128-byte row) are XORed with bits 7-9 (the row).
std::uint32_t swizzle_128b(std::uint32_t linear) { return linear ^ (((linear >> 7) & 7u) << 4); }

// The four 4-byte banks a 16-byte access at `offset` covers, as the first one (offsets are 16-byte
// aligned, so a group of four banks).
std::uint32_t bank_group(std::uint32_t offset) { return (offset / 4) % 32 / 4; }

void expect_layout(int head_dim) {
  const int chunks = head_dim / 8;  // 16-byte chunks of a 16-bit row
  const std::string what = "head_dim " + std::to_string(head_dim);
  std::set<std::uint32_t> seen;
  for (int row = 0; row < 64; ++row) {
    for (int chunk = 0; chunk < chunks; ++chunk) {
      const std::uint32_t off = staged_o_offset(row, chunk);
      // Box chunk / 8 holds columns [64 (chunk / 8), + 64) of all 64 rows, 128 bytes per row.
      const std::uint32_t linear = static_cast<std::uint32_t>(row * 128 + (chunk % 8) * 16);
      EXPECT_EQ(off, (chunk / 8) * kStagedBoxBytes + swizzle_128b(linear)) << what << " row " << row << " chunk " << chunk;
      EXPECT_EQ(off % 16, 0u) << what;
      EXPECT_LT(off, static_cast<std::uint32_t>(64 * head_dim * 2)) << what;
      seen.insert(off);
    }
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(64 * chunks)) << what << ": two elements share an address";

  // stmatrix: each 8-lane group addresses one chunk of 8 consecutive rows (warp * 16 + 8 h + i).
  for (int warp = 0; warp < 4; ++warp) {
    for (int h = 0; h < 2; ++h) {
      for (int chunk = 0; chunk < chunks; ++chunk) {
        std::set<std::uint32_t> banks;
        for (int i = 0; i < 8; ++i) banks.insert(bank_group(staged_o_offset(warp * 16 + 8 * h + i, chunk)));
        EXPECT_EQ(banks.size(), 8u) << what << ": stmatrix rows of warp " << warp << " chunk " << chunk << " conflict";
      }
    }
  }
  // The copy-out: thread t reads chunk (t + 128 k) % chunks of row (t + 128 k) / chunks; a quarter
  // warp (8 consecutive threads) is one 16-byte wavefront.
  for (int idx0 = 0; idx0 < 64 * chunks; idx0 += 8) {
    std::set<std::uint32_t> banks;
    for (int i = 0; i < 8; ++i) banks.insert(bank_group(staged_o_offset((idx0 + i) / chunks, (idx0 + i) % chunks)));
    EXPECT_EQ(banks.size(), 8u) << what << ": copy-out threads " << idx0 << ".. conflict";
  }
}

TEST(HopperStagedO, LayoutIsTheTmaSwizzleAndConflictFree) {
  expect_layout(128);
  expect_layout(256);
}

}  // namespace
