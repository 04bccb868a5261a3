// The tile configurations of the CUDA prefill kernels, in one place. Pure C++ (no CUDA): the
// planner (src/plan/cuda_prefill_rules.cpp) picks from this table and the launcher
// (prefill.cu) instantiates exactly these, so a plan always names a kernel that exists.
#pragma once
#include <cstdint>

namespace attnkit::cuda_prefill {

// Tiled family (tensor cores, mma.sync m16n8k16): each warp owns 16 * row_tiles query rows
// (row_tiles m16 tiles share every K/V fragment it loads), so rows_per_block = 16 * row_tiles *
// warps. K and V tiles of keys_per_tile rows stream through shared memory in `stages` buffers
// each; shared rows are padded by 8 elements so ldmatrix reads are conflict-free.
struct TiledConfig {
  int head_dim;
  int rows_per_block;
  int keys_per_tile;
  int warps;
  int row_tiles;        // m16 tiles per warp (1 or 2)
  int stages;
  bool q_in_registers;  // Q fragments kept in registers (else re-read from shared memory per k-step)
  int registers;        // per thread, measured with `nvcc -Xptxas -v` for sm_90a (bf16 instance)
};

inline constexpr int kSharedRowPad = 8;  // elements added to each shared-memory row

// Two m16 tiles per warp halve the shared-memory bytes per mma (256 -> 128 B for P V), the limit
// of one-tile warps on the H200. Registers decide the rest: d128 at two tiles holds a 32x128 f32
// accumulator (128 registers) and 64 score registers, so Q is re-read per k-step; d256's 16x256
// accumulator already takes 128 registers, so it stays at one tile, with 8 warps and 64-key tiles
// (one 198 KiB block per SM; measured 10 % faster than 4 warps x 32 keys at two blocks per SM).
inline constexpr TiledConfig kTiledConfigs[] = {
    {64, 128, 64, 4, 2, 2, true, 243},
    {96, 128, 64, 4, 2, 2, false, 255},
    {128, 128, 64, 4, 2, 2, false, 255},
    {256, 128, 64, 8, 1, 2, false, 246},
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

// Registers per thread (the planner's occupancy estimate; update when the kernel changes).
inline constexpr int tiled_registers_per_thread(const TiledConfig& c) { return c.registers; }

// The same family without tensor cores (f32 inputs, or head dims without a tensor-core config):
// one warp per query row, kSimtWarpsPerBlock rows per block sharing f32 K/V tiles of
// kSimtKeysPerTile keys in shared memory (2 * 16 * 256 * 4 = 32 KiB static).
inline constexpr int kSimtWarpsPerBlock = 8;
inline constexpr int kSimtKeysPerTile = 16;
inline constexpr int kSimtMaxHeadDim = 256;

// Upper bound on key splits (each split's partial state costs a workspace row).
inline constexpr int kMaxKeySplits = 64;

}  // namespace attnkit::cuda_prefill
