// Exact sums over query rows of how many keys each row sees, in closed form.
//
// Row r sits at position pos = r + (kv_len - q_len) and sees keys [begin(pos), end(pos)) with
//   begin = window > 0 ? max(0, pos - window + 1) : 0,   end = causal ? pos + 1 : kv_len
// (pos <= kv_len - 1 always, so the causal end never clamps). The count end - begin is therefore
// linear in pos with slope +1, 0 or -1 on each side of one kink at pos = window - 1, so each side
// is an arithmetic run: its sum, and its sum of ceil(count / tile), have closed forms. That keeps
// planning O(1) for q_len in the millions while staying exact (tests compare with brute force).
#include <algorithm>

#include "attnkit/error.hpp"
#include "plan/evidence.hpp"

namespace attnkit::detail {
namespace {

using Wide = __int128;

struct Mask {
  std::int64_t kv_len;
  bool causal;
  std::int64_t window;
  Wide begin(Wide pos) const { return window > 0 ? std::max<Wide>(0, pos - window + 1) : 0; }
  Wide end(Wide pos) const { return causal ? std::min<Wide>(kv_len, pos + 1) : kv_len; }
  Wide count(Wide pos) const { return std::max<Wide>(0, end(pos) - begin(pos)); }
};

// sum_{x=0}^{n} floor(x / t), for n >= -1.
Wide floor_prefix(Wide n, Wide t) {
  if (n < 0) return 0;
  const Wide m = n + 1, q = m / t, r = m % t;
  return t * q * (q - 1) / 2 + q * r;
}

// sum_{v=lo}^{hi} ceil(v / t), for 0 <= lo <= hi.
Wide ceil_range_sum(Wide lo, Wide hi, Wide t) { return floor_prefix(hi + t - 1, t) - floor_prefix(lo + t - 2, t); }

std::uint64_t to_u64(Wide v, const char* what) {
  if (!(v >= 0 && v <= static_cast<Wide>(UINT64_MAX)))
    fail("plan", std::string(what) + " overflows 64 bits",
         "use smaller dimensions (or split the call into smaller batches / shorter sequences)");
  return static_cast<std::uint64_t>(v);
}

}  // namespace

VisibleRows sum_visible_rows(std::int64_t q_len, std::int64_t kv_len, bool causal, std::int64_t window,
                             std::uint32_t tile_size) {
  if (!(q_len > 0 && kv_len > 0 && window >= 0 && tile_size > 0))
    fail("plan", "visible-row sums need q_len, kv_len, tile_size >= 1 and window >= 0",
         "validate the problem before planning");
  const Mask mask{kv_len, causal, window};
  const Wide first = static_cast<Wide>(kv_len) - q_len, last = static_cast<Wide>(kv_len) - 1;
  const Wide t = tile_size;

  Wide pairs = 0, tiles = 0;
  auto add_run = [&](Wide a, Wide b) {  // positions a..b inclusive, count linear on it
    if (a > b) return;
    const Wide n = b - a + 1, va = mask.count(a), vb = mask.count(b);
    const Wide rise = vb - va;
    if (!(rise == 0 || rise == n - 1 || rise == -(n - 1)))
      fail("plan", "visible-key counts are not linear on a run (internal)", "report this shape to the planner's owner");
    pairs += n * (va + vb) / 2;
    tiles += rise == 0 ? n * ((va + t - 1) / t) : ceil_range_sum(std::min(va, vb), std::max(va, vb), t);
  };
  if (window > 0) {
    const Wide kink = static_cast<Wide>(window) - 1;  // begin(pos) = 0 up to here, pos - window + 1 after
    add_run(first, std::min(last, kink));
    add_run(std::max(first, kink + 1), last);
  } else {
    add_run(first, last);
  }

  VisibleRows out;
  out.pairs = to_u64(pairs, "visible query-key pairs");
  out.tile_visits = to_u64(tiles, "key tile visits");
  // Every row's range ends at kv_len or at its own position + 1, and ranges slide forward with the
  // row, so the union is [begin(first row), end(last row)).
  out.keys_seen = to_u64(std::max<Wide>(0, mask.end(last) - mask.begin(first)), "keys seen");
  return out;
}

}  // namespace attnkit::detail
