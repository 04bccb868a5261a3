// Internal: how one shard's device workspace is cut, shared by the planner (sharded_plan.cpp, which
// reports the size) and the run (sharded_decode.cpp, which uses the offsets), so they cannot disagree.
// Plain C++ (no CUDA include), like decode_geometry.hpp.
//   [decode split states (the shard plan's workspace)] [gathered out f32: shards x rows x head_dim]
//   [gathered LSE f32: shards x rows] [local lengths i32: batch]     each part 256-byte aligned
#pragma once
#include <cstdint>

namespace attnkit::context_parallel {

inline constexpr std::uint64_t kWorkspaceAlign = 256;

inline std::uint64_t align_up(std::uint64_t bytes) { return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

struct ShardWorkspaceLayout {
  std::uint64_t decode_offset = 0, decode_bytes = 0;
  std::uint64_t gather_out_offset = 0, gather_out_bytes = 0;
  std::uint64_t gather_lse_offset = 0, gather_lse_bytes = 0;
  std::uint64_t lengths_offset = 0, lengths_bytes = 0;
  std::uint64_t total = 0;
};

inline ShardWorkspaceLayout shard_workspace_layout(std::uint64_t decode_bytes, std::uint64_t shards, std::uint64_t batch,
                                                   std::uint64_t num_heads, std::uint64_t head_dim) {
  ShardWorkspaceLayout l;
  const std::uint64_t rows = batch * num_heads;
  l.decode_bytes = decode_bytes;
  l.gather_out_offset = align_up(decode_bytes);
  l.gather_out_bytes = shards * rows * head_dim * 4;
  l.gather_lse_offset = l.gather_out_offset + align_up(l.gather_out_bytes);
  l.gather_lse_bytes = shards * rows * 4;
  l.lengths_offset = l.gather_lse_offset + align_up(l.gather_lse_bytes);
  l.lengths_bytes = batch * 4;
  l.total = l.lengths_offset + align_up(l.lengths_bytes);
  return l;
}

}  // namespace attnkit::context_parallel
