// Seed 004's non-matmul FLOP model (softmax bookkeeping, rescales and merges; the two matmuls
// are counted separately as 4 * pairs * head_dim), generalised from seq_len^2 to visible pairs.
//   scalar online: per pair 9 (scale, max, subtract, exp, sum, rescale of the running state),
//                  per row value 4 (rescales and the final divide);
//   tiled / split: per pair 4 (the rescale moves to once per tile), per (row, tile) 8,
//                  per row value 3, per value merged from each extra split 3.
#include "plan/checked_math.hpp"
#include "plan/evidence.hpp"

namespace attnkit::detail {

std::uint64_t non_matmul_flops(KernelFamily family, std::uint64_t pairs, std::uint64_t tile_visits,
                               std::uint64_t rows, std::int64_t head_dim, std::uint32_t sequence_splits,
                               const char* context) {
  const std::string what = "non-matmul FLOPs";
  const std::uint64_t row_values = checked_mul<std::uint64_t>(rows, static_cast<std::uint64_t>(head_dim), context, what);
  if (family == KernelFamily::kScalarOnline) {
    return checked_sum({checked_mul<std::uint64_t>(pairs, 9, context, what),
                        checked_mul<std::uint64_t>(row_values, 4, context, what)},
                       context, what);
  }
  const std::uint64_t extra_splits = sequence_splits > 1 ? sequence_splits - 1 : 0;
  const std::uint64_t merged_values = checked_mul(row_values, extra_splits, context, what);
  return checked_sum({checked_mul<std::uint64_t>(pairs, 4, context, what),
                      checked_mul<std::uint64_t>(tile_visits, 8, context, what),
                      checked_mul<std::uint64_t>(row_values, 3, context, what),
                      checked_mul<std::uint64_t>(merged_values, 3, context, what)},
                     context, what);
}

}  // namespace attnkit::detail
