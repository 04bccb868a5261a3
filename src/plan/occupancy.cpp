// The occupancy proxy: a cheap stand-in for "how much of the machine is busy", in basis points.
// Lane fill is seed 004's: the work items a block has for its lanes (rows x max(head_dim, tile)),
// over its lanes. Machine fill goes past the seed: a plan with fewer blocks than SMs (or tasks than
// CPU threads) leaves the rest idle, which is exactly what seed 000's one-block-per-head decode did.
#include <algorithm>

#include "plan/evidence.hpp"

namespace attnkit::detail {

std::uint32_t lane_occupancy_bps(std::uint64_t active_lanes, std::uint32_t workgroup_lanes) {
  if (workgroup_lanes == 0) return 0;
  const std::uint64_t active = std::max<std::uint64_t>(1, std::min<std::uint64_t>(active_lanes, workgroup_lanes));
  return static_cast<std::uint32_t>(active * 10000 / workgroup_lanes);
}

std::uint32_t occupancy_proxy_bps(const WorkPartition& p, std::int64_t head_dim, const Target& target) {
  std::uint64_t lane_bps = 10000;  // a CPU rule may leave lanes at 0: one thread is one lane
  if (p.workgroup_lanes > 0) {
    const std::uint64_t per_row = std::max<std::uint64_t>(static_cast<std::uint64_t>(head_dim), p.tile_size);
    const std::uint64_t rows = std::max<std::uint32_t>(1, p.rows_per_block);
    // Saturates at the lane count long before it could overflow: cap each factor first.
    lane_bps = lane_occupancy_bps(std::min<std::uint64_t>(per_row, 1u << 20) * std::min<std::uint64_t>(rows, 1u << 20),
                                  p.workgroup_lanes);
  }
  const std::uint64_t units = target.backend == Backend::kCuda ? static_cast<std::uint64_t>(std::max(0, target.sm_count))
                                                               : static_cast<std::uint64_t>(std::max(0, target.threads));
  std::uint64_t machine_bps = 10000;
  if (units > 0 && p.grid_blocks > 0 && p.grid_blocks < units) machine_bps = p.grid_blocks * 10000 / units;
  return static_cast<std::uint32_t>(lane_bps * machine_bps / 10000);
}

}  // namespace attnkit::detail
