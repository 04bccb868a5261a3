// Context-parallel decode on the CPU (CI): the planner's shards, shard_slice's masking (exhaustive
// against visible_keys), and a sharded run (each shard's keys copied into its own cache, cpu::decode
// on each shard's slice, cpu::merge_states over the partial states) against the float64 golden.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "attnkit/context_parallel.hpp"
#include "cpu_case.hpp"

namespace attnkit::testing {
namespace {

ShardedDecodeProblem sharded(const DecodeProblem& p) {
  ShardedDecodeProblem s;
  s.decode = p;
  return s;
}

// Shard `s`'s own cache: keys [begin, begin + capacity) of the global cache (past max_seq: poison).
HostTensor shard_cache(const HostTensor& global, const DecodeProblem& p, const ShardSpec& s) {
  HostTensor c(p.kv_dtype, {p.batch, p.kv_heads, s.capacity, p.head_dim});
  poison(c);
  const std::size_t elem = dtype_size(p.kv_dtype);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t g = 0; g < p.kv_heads; ++g) {
      const std::int64_t keys = std::min(s.capacity, p.max_seq - s.begin);
      const std::size_t src = static_cast<std::size_t>(((b * p.kv_heads + g) * p.max_seq + s.begin) * p.head_dim);
      const std::size_t dst = static_cast<std::size_t>(((b * p.kv_heads + g) * s.capacity) * p.head_dim);
      std::memcpy(c.bytes.data() + dst * elem, global.bytes.data() + src * elem,
                  static_cast<std::size_t>(keys * p.head_dim) * elem);
    }
  }
  return c;
}

TensorView batch_slice(TensorView v, std::int64_t b) {
  v.data = static_cast<std::uint8_t*>(v.data) + b * v.strides[0] * static_cast<std::int64_t>(dtype_size(v.dtype));
  v.shape[0] = 1;
  return v;
}

// The sharded run on the CPU: every shard decodes its slice of every sequence (one call per
// sequence: each carries its own local length and window), then the states are merged.
void run_sharded_cpu(const ShardedDecodePlan& plan, const DecodeCase& c, HostTensor& out, HostTensor& lse) {
  const DecodeProblem& p = plan.problem.decode;
  const std::int64_t n = plan.shard_count(), rows = p.batch * p.num_heads;
  HostTensor out_partial(DType::kF32, {n, rows, p.head_dim}), lse_partial(DType::kF32, {n, rows});
  poison(out_partial);
  poison(lse_partial);
  for (const ShardSpec& s : plan.shards) {
    HostTensor k = shard_cache(c.k_cache, p, s), v = shard_cache(c.v_cache, p, s);
    for (std::int64_t b = 0; b < p.batch; ++b) {
      const ShardSlice slice = shard_slice(plan, s.index, c.lengths.view.as<std::int32_t>()[b]);
      DecodeProblem local = s.plan.problem;
      local.batch = 1;
      local.options.window = slice.local_window;
      const DecodePlan lp = plan_decode(local, cpu_target(2));
      HostTensor len(DType::kI32, {1});
      len.i32()[0] = static_cast<std::int32_t>(slice.local_length);
      DecodeTensors t;
      t.q = batch_slice(c.q.view, b);
      t.k_cache = batch_slice(k.view, b);
      t.v_cache = batch_slice(v.view, b);
      t.lengths = len.view;
      t.out = TensorView::contiguous(out_partial.bytes.data() + ((s.index * rows + b * p.num_heads) * p.head_dim) * 4,
                                     DType::kF32, {1, p.num_heads, p.head_dim});
      t.lse = TensorView::contiguous(lse_partial.bytes.data() + (s.index * rows + b * p.num_heads) * 4, DType::kF32,
                                     {1, p.num_heads});
      std::vector<std::uint8_t> ws(lp.evidence.workspace_bytes + 64);
      cpu::decode(lp, t, Workspace{ws.data(), ws.size(), DeviceKind::kCpu});
    }
  }
  MergeTensors m;
  m.out_partial = out_partial.view;
  m.lse_partial = lse_partial.view;
  m.out = TensorView::contiguous(out.bytes.data(), p.out_dtype, {rows, p.head_dim});
  m.lse = TensorView::contiguous(lse.bytes.data(), DType::kF32, {rows});
  cpu::merge_states(m);
}

struct ShardCase {
  const char* name;
  DecodeProblem problem;
  int shards;
  std::vector<std::int32_t> lengths;
};

DecodeProblem problem(std::int64_t B, std::int64_t H, std::int64_t G, std::int64_t D, std::int64_t max_seq,
                      std::int64_t kv_len, DType kv, std::int64_t window = 0, float softcap = 0) {
  DecodeProblem p = decode_problem(B, H, G, D, max_seq, kv);
  p.kv_len = kv_len;
  p.q_dtype = DType::kF32;
  p.out_dtype = kv;
  p.options.window = window;
  p.options.softcap = softcap;
  return p;
}

TEST(ShardedDecodeCpu, MergedShardsMatchTheGolden) {
  const std::vector<ShardCase> cases = {
      {"f32 3 shards ragged", problem(3, 8, 2, 64, 1000, 1000, DType::kF32), 3, {1000, 517, 1}},
      {"f32 window across shard boundaries", problem(4, 4, 4, 40, 1000, 1000, DType::kF32, 100), 3, {800, 300, 50, 768}},
      {"f32 window wider than a shard", problem(2, 6, 3, 72, 1100, 1100, DType::kF32, 700), 4, {1100, 901}},
      {"bf16 gqa4 softcap 4 shards", problem(2, 16, 4, 128, 1536, 1536, DType::kBF16, 0, 30.0f), 4, {1536, 1029}},
      {"f16 growth past kv_len into the last shard", problem(2, 8, 8, 32, 1300, 900, DType::kF16), 2, {1250, 0}},
      {"f32 one shard", problem(1, 4, 1, 16, 333, 333, DType::kF32, 17), 1, {333}},
      {"f32 tiny kv_len, granule 1", problem(1, 2, 1, 8, 7, 7, DType::kF32), 5, {7}},
  };
  for (const ShardCase& sc : cases) {
    const std::uint64_t seed = fresh_seed();
    const std::string note = std::string(sc.name) + seed_note(seed);
    const DecodeCase c(sc.problem, sc.lengths, 1.0f, seed);
    const ShardedDecodePlan plan = plan_sharded_decode(sharded(sc.problem), cpu_target(2), sc.shards);
    ASSERT_EQ(plan.shard_count(), sc.shards) << note;
    HostTensor out(sc.problem.out_dtype, {sc.problem.batch, sc.problem.num_heads, sc.problem.head_dim});
    HostTensor lse(DType::kF32, {sc.problem.batch, sc.problem.num_heads});
    poison(out);
    poison(lse);
    run_sharded_cpu(plan, c, out, lse);
    const reference::Result golden = reference::decode(sc.problem, c.tensors());
    expect_matches_golden(out, golden.out, coarsest({sc.problem.kv_dtype, sc.problem.out_dtype}), note);
    expect_lse_matches(lse, golden.lse, note);
  }
}

// Adversarial: one shard holds keys whose scores dwarf the others' (the merge must weight by LSE,
// not average), and near-equal scores everywhere else.
TEST(ShardedDecodeCpu, ADominantShardIsWeightedByItsLse) {
  const std::uint64_t seed = fresh_seed();
  const DecodeProblem p = problem(1, 4, 2, 64, 1024, 1024, DType::kF32);
  DecodeCase c(p, {1024}, 0.05f, seed);
  for (std::int64_t g = 0; g < p.kv_heads; ++g) {
    for (std::int64_t d = 0; d < p.head_dim; ++d) {  // key 700 aligns with q: a huge score
      const std::size_t i = static_cast<std::size_t>((g * p.max_seq + 700) * p.head_dim + d);
      c.k_cache.set(i, 40.0f * c.q.get(static_cast<std::size_t>(g * 2 * p.head_dim + d)));
    }
  }
  const ShardedDecodePlan plan = plan_sharded_decode(sharded(p), cpu_target(2), 4);
  HostTensor out(p.out_dtype, {1, p.num_heads, p.head_dim}), lse(DType::kF32, {1, p.num_heads});
  poison(out);
  poison(lse);
  run_sharded_cpu(plan, c, out, lse);
  const reference::Result golden = reference::decode(p, c.tensors());
  expect_matches_golden(out, golden.out, DType::kF32, "dominant shard" + seed_note(seed));
  expect_lse_matches(lse, golden.lse, "dominant shard" + seed_note(seed));
}

// Every global length and window: the shards' slices tile exactly the visible keys, each slice is
// what the kernel's own rule ([len - w, len) on local keys) reads, and no slice leaves its shard.
TEST(ShardedPlan, SlicesTileTheVisibleKeysExactly) {
  for (std::int64_t window : {0, 1, 5, 64, 300, 2000}) {
    DecodeProblem p = problem(1, 2, 1, 8, 1100, 1000, DType::kF32, window);
    const ShardedDecodePlan plan = plan_sharded_decode(sharded(p), known_target("h200"), 3);
    for (std::int64_t len = 0; len <= p.max_seq; ++len) {
      const KeyRange want = visible_keys(len - 1, len, true, window);
      std::int64_t covered = 0, next = want.begin;
      for (const ShardSpec& s : plan.shards) {
        const ShardSlice sl = shard_slice(plan, s.index, len);
        if (sl.visible.size() == 0) {
          EXPECT_EQ(sl.local_length, 0) << "len " << len << " shard " << s.index;
          continue;
        }
        EXPECT_EQ(sl.visible.begin, next) << "len " << len << " window " << window << " shard " << s.index;
        EXPECT_GE(sl.visible.begin, s.begin);
        EXPECT_LE(sl.visible.end, s.end());
        EXPECT_LE(sl.local_length, s.capacity);
        const std::int64_t lo = sl.local_window > 0 && sl.local_length > sl.local_window ? sl.local_length - sl.local_window : 0;
        EXPECT_EQ(lo + s.begin, sl.visible.begin) << "len " << len << " window " << window;
        EXPECT_EQ(sl.local_length + s.begin, sl.visible.end) << "len " << len << " window " << window;
        covered += sl.visible.size();
        next = sl.visible.end;
      }
      EXPECT_EQ(covered, want.size()) << "len " << len << " window " << window;
      if (want.size() > 0) EXPECT_EQ(next, want.end) << "len " << len;
    }
  }
}

TEST(ShardedPlan, ShardsCoverTheCacheOnGranulesAndFollowBandwidth) {
  DecodeProblem p = problem(1, 32, 8, 128, 1 << 20, 1 << 20, DType::kBF16);
  for (int n : {1, 2, 3, 4, 7, 8}) {
    const ShardedDecodePlan plan = plan_sharded_decode(sharded(p), known_target("h200"), n);
    ASSERT_EQ(plan.shard_count(), n);
    std::int64_t expect_begin = 0, smallest = p.kv_len, largest = 0;
    for (const ShardSpec& s : plan.shards) {
      EXPECT_EQ(s.begin, expect_begin) << n;
      EXPECT_EQ(s.begin % kShardGranuleKeys, 0) << n;
      EXPECT_GT(s.capacity, 0) << n;
      EXPECT_EQ(s.plan.problem.max_seq, s.capacity);
      EXPECT_EQ(s.plan.problem.out_dtype, DType::kF32);
      for (std::int64_t pos : {s.begin, s.end() - 1}) EXPECT_EQ(plan.owner(pos), s.index);
      smallest = std::min(smallest, s.planned_keys);
      largest = std::max(largest, s.planned_keys);
      expect_begin = s.end();
    }
    EXPECT_EQ(expect_begin, p.max_seq) << n;
    EXPECT_LE(largest - smallest, kShardGranuleKeys) << n;  // balanced within one granule
  }
  // A target with twice the bandwidth gets about twice the keys.
  Target slow = known_target("h200"), fast = slow;
  fast.peak_read_bytes_per_s *= 2;
  const ShardedDecodePlan skewed = plan_sharded_decode(sharded(p), std::vector<Target>{slow, fast});
  const double ratio = static_cast<double>(skewed.shards[1].planned_keys) / static_cast<double>(skewed.shards[0].planned_keys);
  EXPECT_NEAR(ratio, 2.0, 0.01);
  // Leads near DBL_MAX keep their proportion (their sum overflowed before: a fuzzer finding);
  // a non-finite or missing lead makes the shares equal.
  Target huge = slow, huger = slow;
  huge.peak_read_bytes_per_s = std::numeric_limits<double>::max() / 2;
  huger.peak_read_bytes_per_s = std::numeric_limits<double>::max();
  const ShardedDecodePlan extreme = plan_sharded_decode(sharded(p), std::vector<Target>{huge, huger});
  EXPECT_NEAR(static_cast<double>(extreme.shards[1].planned_keys) / static_cast<double>(extreme.shards[0].planned_keys),
              2.0, 0.01);
  for (double lead : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(), 0.0}) {
    Target odd = slow;
    odd.peak_read_bytes_per_s = lead;
    const ShardedDecodePlan equal = plan_sharded_decode(sharded(p), std::vector<Target>{slow, odd});
    EXPECT_EQ(equal.shards[0].planned_keys, equal.shards[1].planned_keys) << lead;
  }
}

TEST(ShardedPlan, BytesAndPredictionFollowTheModel) {
  DecodeProblem p = problem(1, 32, 8, 128, 1 << 20, 1 << 20, DType::kBF16);
  const ShardedDecodePlan one = plan_sharded_decode(sharded(p), known_target("h200"), 1);
  EXPECT_EQ(one.bytes_communicated, 0u);
  EXPECT_EQ(one.predicted_comm_seconds, 0.0);
  for (int n : {2, 4, 8}) {
    const ShardedDecodePlan plan = plan_sharded_decode(sharded(p), known_target("h200"), n);
    const std::uint64_t state = static_cast<std::uint64_t>(p.batch * p.num_heads * (p.head_dim + 1) * 4);
    EXPECT_EQ(plan.partial_state_bytes, state);
    EXPECT_EQ(plan.bytes_received_per_gpu, static_cast<std::uint64_t>(n - 1) * state);
    EXPECT_EQ(plan.bytes_communicated, static_cast<std::uint64_t>(n * (n - 1)) * state);
    EXPECT_NEAR(plan.predicted_comm_seconds,
                kCollectiveLatencySeconds + static_cast<double>((n - 1) * state) / kNvlinkBytesPerS, 1e-12);
    // Each shard reads its share of the K/V cache: 2 * keys * kv_heads * head_dim * 2 bytes at least.
    std::uint64_t kv_bytes = 0;
    for (const ShardSpec& s : plan.shards) {
      const std::uint64_t own = 2ull * static_cast<std::uint64_t>(s.planned_keys * p.kv_heads * p.head_dim) * 2;
      EXPECT_GE(s.read_bytes, own);
      EXPECT_LE(s.read_bytes, own + (16u << 20));  // plus q and split states
      EXPECT_EQ(s.cache_bytes, 2ull * static_cast<std::uint64_t>(s.capacity * p.kv_heads * p.head_dim) * 2);
      kv_bytes += own;
    }
    EXPECT_EQ(kv_bytes, 2ull * static_cast<std::uint64_t>(p.kv_len * p.kv_heads * p.head_dim) * 2);
    EXPECT_NEAR(plan.predicted_decode_seconds, one.predicted_decode_seconds / n, one.predicted_decode_seconds * 0.01);
    EXPECT_NEAR(plan.predicted_seconds,
                plan.predicted_decode_seconds + plan.predicted_comm_seconds + plan.predicted_merge_seconds, 1e-15);
  }
  const std::string json = to_json(plan_sharded_decode(sharded(p), known_target("h200"), 2));
  EXPECT_NE(json.find("\"bytes_communicated\""), std::string::npos);
  EXPECT_NE(to_table(one).find("predicted"), std::string::npos);
}

TEST(ShardedPlan, RejectsWithAFix) {
  DecodeProblem p = problem(1, 2, 1, 8, 100, 4, DType::kF32);
  auto expect_fix = [](auto&& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("Fix:"), std::string::npos) << what << ": " << e.what();
    }
  };
  expect_fix([&] { plan_sharded_decode(sharded(p), cpu_target(1), 0); }, "zero shards");
  expect_fix([&] { plan_sharded_decode(sharded(p), cpu_target(1), 5); }, "more shards than keys");
  expect_fix([&] { plan_sharded_decode(sharded(p), std::vector<Target>{}); }, "no targets");
  const ShardedDecodePlan plan = plan_sharded_decode(sharded(p), cpu_target(1), 2);
  expect_fix([&] { (void)plan.owner(100); }, "owner past max_seq");
  expect_fix([&] { (void)plan.owner(-1); }, "negative owner");
  expect_fix([&] { (void)shard_slice(plan, 2, 3); }, "shard out of range");
  expect_fix([&] { (void)shard_slice(plan, 0, 101); }, "length past max_seq");
  DecodeProblem bad = p;
  bad.head_dim = 7;
  expect_fix([&] { plan_sharded_decode(sharded(bad), cpu_target(1), 1); }, "invalid decode problem");
}

}  // namespace
}  // namespace attnkit::testing
