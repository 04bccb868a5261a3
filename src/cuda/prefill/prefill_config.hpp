// The tile configurations of the CUDA prefill kernels, in one place. Pure C++ (no CUDA): the
// planner (src/plan/cuda_prefill_rules.cpp) picks from this table and the launcher
// (tiled_prefill.cu) instantiates exactly these, so a plan always names a kernel that exists.
//
// Tiled family (tensor cores, mma.sync m16n8k16): each warp owns 16 query rows, so
// rows_per_block = 16 * warps. K and V tiles of keys_per_tile rows stream through shared memory in
// `stages` buffers each; shared rows are padded by 8 elements so ldmatrix reads are conflict-free.
#pragma once
#include <cstdint>

namespace attnkit::cuda_prefill {

struct TiledConfig {
  int head_dim;
  int rows_per_block;
  int keys_per_tile;
  int warps;
  int stages;
  bool q_in_registers;  // Q fragments kept in registers (else re-read from shared memory per tile)
};

inline constexpr int kSharedRowPad = 8;  // elements added to each shared-memory row

// Register budget decides q_in_registers: at head_dim 256 the 16x256 output accumulator alone
// takes 128 registers per thread, so Q is re-read from shared memory instead.
inline constexpr TiledConfig kTiledConfigs[] = {
    {64, 64, 128, 4, 2, true},
    {96, 64, 64, 4, 2, true},
    {128, 64, 64, 4, 2, true},
    {256, 64, 32, 4, 2, false},
};

inline constexpr const TiledConfig* find_tiled_config(std::int64_t head_dim) {
  for (const TiledConfig& c : kTiledConfigs) {
    if (c.head_dim == head_dim) return &c;
  }
  return nullptr;
}

// Shared memory of one block: Q tile plus `stages` K and V tiles, 2-byte elements, padded rows.
inline constexpr std::int64_t tiled_shared_bytes(const TiledConfig& c) {
  const std::int64_t pitch = c.head_dim + kSharedRowPad;
  return 2 * pitch * (c.rows_per_block + 2LL * c.stages * c.keys_per_tile);
}

// Registers per thread measured with `nvcc -Xptxas -v` for sm_90a (the planner's occupancy
// estimate; update when the kernel changes).
inline constexpr int tiled_registers_per_thread(const TiledConfig& c) {
  return c.head_dim == 64 ? 210 : c.head_dim == 96 ? 192 : c.head_dim == 128 ? 217 : 246;
}

// The same family without tensor cores (f32 inputs, or head dims without a tensor-core config):
// one warp per query row, kSimtWarpsPerBlock rows per block sharing f32 K/V tiles of
// kSimtKeysPerTile keys in shared memory (2 * 16 * 256 * 4 = 32 KiB static).
inline constexpr int kSimtWarpsPerBlock = 8;
inline constexpr int kSimtKeysPerTile = 16;
inline constexpr int kSimtMaxHeadDim = 256;

// Upper bound on key splits (each split's partial state costs a workspace row).
inline constexpr int kMaxKeySplits = 64;

}  // namespace attnkit::cuda_prefill
