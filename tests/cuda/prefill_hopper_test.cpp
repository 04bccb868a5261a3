// The Hopper warp-specialized prefill kernel (KernelFamily::kWarpSpecializedWgmma, label gpu)
// against the float64 golden: every shape of prefill_shapes.hpp it can run, forced onto it, plus
// shapes that reach what the short list does not (many key tiles through the K/V ring, more work
// tiles than SMs so persistent blocks take several, rows with no visible key (ragged
// sequences with keys 0), long windows, q_len > kv_len,
// ragged batches with long, empty and keyless sequences, BSHD strides). Skips, visibly, without a
// Hopper GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "cuda/hopper_support.hpp"
#include "cuda/prefill_hopper/hopper_config.hpp"
#include "cuda/prefill_shapes.hpp"

namespace attnkit::testing {
namespace {

bool hopper_can_run(const PrefillShape& s) {
  return (s.dtype == DType::kBF16 || s.dtype == DType::kF16) && s.softcap == 0.0f &&
         (s.head_dim == 64 || s.head_dim == 128 || s.head_dim == 256);
}

std::vector<PrefillShape> hopper_shapes() {
  using enum DType;
  std::vector<PrefillShape> shapes;
  for (const PrefillShape& s : prefill_shapes()) {
    if (hopper_can_run(s)) shapes.push_back(s);
  }
  const std::vector<PrefillShape> more = {
      {"hop_noncausal_ring_wraps_d128_bf16", 1, 4, 4, 128, 1000, 1000, false, kBF16, kBF16},
      {"hop_causal_persistent_gqa8_d128_bf16", 2, 16, 2, 128, 700, 900, true, kBF16, kBF16},
      // 9 query tiles x 48 heads: 240 causal pairs, two rounds of the persistent walk (fewer tiles
      // than SMs run unpaired, one per block: most shapes here).
      {"hop_causal_paired_two_rounds_d128_bf16", 3, 16, 4, 128, 1030, 1030, true, kBF16, kBF16},
      {"hop_causal_d64_f16_out_f32", 1, 8, 2, 64, 520, 520, true, kF16, kF32},
      {"hop_noncausal_gqa4_d256_f16", 1, 4, 1, 256, 300, 450, false, kF16, kF16},
      {"hop_causal_window37_q_lt_kv_d128_bf16", 1, 4, 4, 128, 400, 530, true, kBF16, kBF16, 37},
      {"hop_noncausal_window40_q_gt_kv_d128_f16", 1, 2, 2, 128, 300, 100, false, kF16, kF16, 40},
      {"hop_causal_window200_d64_bf16", 1, 4, 4, 64, 900, 900, true, kBF16, kBF16, 200},
      {"hop_noncausal_window90_d256_bf16_out_f32", 1, 2, 2, 256, 333, 600, false, kBF16, kF32, 90},
      {"hop_causal_large_scores_d256_bf16", 1, 4, 2, 256, 200, 260, true, kBF16, kBF16, 0, 0.0f, 6.0f},
      // 80-key tiles (the plan's pick) under a diagonal 300 keys in: warpgroup 0 skips a dead tile
      // in most blocks, at offsets that are no multiple of the tile.
      {"hop_causal_dead_tiles_q_lt_kv_d256_bf16", 1, 4, 2, 256, 700, 1000, true, kBF16, kBF16},
      {"hop_ragged_causal_long_empty_keyless_d128_bf16", 5, 8, 2, 128, 300, 500, true, kBF16, kBF16, 0, 0.0f, 1.0f,
       {{300, 500}, {0, 7}, {1, 1}, {257, 257}, {129, 0}}},
      // d256's staged O (warpgroup 1's tile in the V slot): full 64-row tiles leave by TMA store,
      // a ragged sequence's shorter ones by the copy-out (its box would reach the next sequence).
      {"hop_ragged_causal_staged_o_d256_bf16", 4, 4, 2, 256, 200, 400, true, kBF16, kBF16, 0, 0.0f, 1.0f,
       {{200, 300}, {64, 64}, {193, 400}, {1, 1}}},
      {"hop_ragged_noncausal_d64_f16_out_f32", 3, 4, 1, 64, 260, 390, false, kF16, kF32, 0, 0.0f, 1.0f,
       {{260, 130}, {3, 390}, {128, 128}}},
      // d64 also has 192-row blocks (three consumer warpgroups; every shape runs both, below): one
      // row past a block, an odd number of query tiles (causal pairs leave a middle tile),
      // key-less rows, a window.
      {"hop_causal_q193_window50_gqa3_d64_bf16", 2, 6, 2, 64, 193, 300, true, kBF16, kBF16, 50},
      {"hop_causal_three_tiles_d64_bf16", 1, 4, 4, 64, 577, 577, true, kBF16, kBF16},
      {"hop_ragged_causal_keyless_d64_bf16", 4, 4, 2, 64, 400, 450, true, kBF16, kBF16, 0, 0.0f, 1.0f,
       {{400, 450}, {0, 5}, {191, 192}, {385, 0}}},
      // Few work tiles against long keys: the plan splits keys (units of one tile and one split,
      // states merged after): splits past a tile's visible keys (causal, window) write empty states.
      {"hop_split_causal_q100_gqa4_d128_bf16", 1, 8, 2, 128, 100, 5000, true, kBF16, kBF16},
      {"hop_split_noncausal_q1_d256_f16_out_f32", 2, 2, 1, 256, 1, 3001, false, kF16, kF32},
      {"hop_split_causal_window300_d64_bf16", 1, 4, 4, 64, 130, 4100, true, kBF16, kBF16, 300},
      {"hop_split_ragged_causal_d128_bf16", 3, 4, 2, 128, 200, 2600, true, kBF16, kBF16, 0, 0.0f, 1.0f,
       {{200, 2600}, {1, 1}, {57, 1900}}},
      // GQA packing (q_len x group fits a tile: the group's heads share it): one query row, a
      // window, f32 out, a full tile without key splits, an odd group, a ragged batch whose rows
      // past a sequence's queries belong to the next one.
      {"hop_packed_q1_gqa4_causal_d128_bf16", 2, 8, 2, 128, 1, 3000, true, kBF16, kBF16},
      {"hop_packed_q5_gqa8_window40_d64_bf16", 1, 16, 2, 64, 5, 777, true, kBF16, kBF16, 40},
      {"hop_packed_q16_gqa4_noncausal_d256_f16_out_f32", 2, 8, 2, 256, 16, 500, false, kF16, kF32},
      {"hop_packed_q32_gqa4_causal_square_d128_bf16", 1, 8, 2, 128, 32, 32, true, kBF16, kBF16},
      {"hop_packed_q7_gqa3_causal_window20_d128_f16", 2, 6, 2, 128, 7, 200, true, kF16, kF16, 20},
      {"hop_packed_ragged_causal_gqa4_d128_bf16", 3, 8, 2, 128, 12, 900, true, kBF16, kBF16, 0, 0.0f, 1.0f,
       {{12, 900}, {1, 1}, {7, 300}}},
  };
  shapes.insert(shapes.end(), more.begin(), more.end());
  return shapes;
}

// with_lse false: the call asks for no LSE (c.lse is left as it is).
void run_hopper(PrefillCase& c, const PrefillPlan& plan, bool with_lse = true) {
  DeviceTensor q(c.q), k(c.k), v(c.v), out(c.out), lse(c.lse);
  PrefillTensors t{q.view, k.view, v.view, out.view, with_lse ? lse.view : TensorView{}, {}, {}};
  std::vector<std::unique_ptr<DeviceTensor>> keep;
  if (!c.shape.ragged.empty()) {
    keep.push_back(std::make_unique<DeviceTensor>(c.cu_q));
    keep.push_back(std::make_unique<DeviceTensor>(c.cu_k));
    t.cu_seqlens_q = keep[0]->view;
    t.cu_seqlens_k = keep[1]->view;
  }
  // Key splits keep their states in the workspace (poisoned: every state the merge reads must be written).
  DeviceWorkspace ws(plan.evidence.workspace_bytes, 0xff);
  cuda::prefill(plan, t, ws.view());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << c.note();
  out.copy_to(c.out);
  if (with_lse) lse.copy_to(c.lse);
}

class PrefillHopper : public ::testing::TestWithParam<PrefillShape> {};

TEST_P(PrefillHopper, MatchesGolden) {
  ATTNKIT_SKIP_WITHOUT_HOPPER("warp-specialized kernel");
  PrefillCase c(GetParam());
  const PrefillPlan plan = plan_prefill(c.problem, cuda::target(), KernelFamily::kWarpSpecializedWgmma);
  ASSERT_EQ(plan.partition.family, KernelFamily::kWarpSpecializedWgmma);
  const reference::Result golden = reference::prefill(c.problem, c.tensors());
  run_hopper(c, plan);
  EXPECT_EQ(prefill_parity_failure(c.out, golden.out, c.problem.dtype), "") << c.note() << "\n" << to_table(plan);
  EXPECT_EQ(prefill_lse_failure(c.lse, golden.lse), "") << c.note();
  // Without an LSE the kernel may sum P's rows another way (d64's 192-row blocks: on the tensor
  // core), so the output alone is checked again.
  poison(c.out);
  run_hopper(c, plan, /*with_lse=*/false);
  EXPECT_EQ(prefill_parity_failure(c.out, golden.out, c.problem.dtype), "") << c.note() << " without an LSE";
  // GQA-packed plans run unpacked too (a tile per head); the packed shapes must plan packed.
  if (c.shape.name.rfind("hop_packed", 0) == 0) EXPECT_GT(plan.partition.packed_heads, 1u) << to_table(plan);
  if (plan.partition.packed_heads > 1) {
    PrefillPlan unpacked = plan;
    unpacked.partition.packed_heads = 1;
    poison(c.out);
    poison(c.lse);
    run_hopper(c, unpacked);
    EXPECT_EQ(prefill_parity_failure(c.out, golden.out, c.problem.dtype), "") << c.note() << " unpacked";
    EXPECT_EQ(prefill_lse_failure(c.lse, golden.lse), "") << c.note() << " unpacked";
  }
  // Unsplit causal plans run the other unit shape too (pairs of equal work, or single tiles),
  // whichever the planner picks here: the persistent walk serves any grid. Pairs run with tails of
  // single tiles too (hopper_walk.hpp): one pair, half of them, all of them.
  if (c.problem.causal && plan.partition.sequence_splits == 1) {
    const std::int64_t heads = plan.partition.packed_heads > 1 ? c.problem.kv_heads : c.problem.num_heads;
    const auto pairs = static_cast<std::uint32_t>(c.problem.batch * heads);  // (sequence, tile head) pairs
    std::vector<std::pair<std::uint32_t, std::uint32_t>> walks;  // (tiles per unit, tail pairs)
    if (plan.partition.tiles_per_unit == 2) {
      walks = {{1, 0}, {2, plan.partition.tail_pairs == 0 ? pairs / 2 : 0}, {2, pairs}};
    } else {
      walks = {{2, 0}, {2, 1}, {2, pairs / 2}, {2, pairs}};
    }
    for (const auto& [tiles_per_unit, tail_pairs] : walks) {
      PrefillPlan other = plan;
      other.partition.tiles_per_unit = tiles_per_unit;
      other.partition.tail_pairs = tail_pairs;
      const std::string walk = " with " + std::to_string(tiles_per_unit) + " tile(s) per unit and a tail of " +
                               std::to_string(tail_pairs) + " pairs";
      poison(c.out);
      poison(c.lse);
      run_hopper(c, other);
      EXPECT_EQ(prefill_parity_failure(c.out, golden.out, c.problem.dtype), "") << c.note() << walk;
      EXPECT_EQ(prefill_lse_failure(c.lse, golden.lse), "") << c.note() << walk;
    }
  }
  // Every other compiled config of this head_dim and key tile (d64: 128- and 192-row blocks) runs
  // the same case, whichever the planner prefers for it: the plan's block shape is patched.
  for (const attnkit::cuda_prefill_hopper::HopperConfig& other : attnkit::cuda_prefill_hopper::kHopperConfigs) {
    const auto rows = static_cast<std::uint32_t>(attnkit::cuda_prefill_hopper::rows_per_block(other));
    if (other.head_dim != c.problem.head_dim || other.keys_per_tile != static_cast<int>(plan.partition.tile_size) ||
        rows == plan.partition.rows_per_block) {
      continue;
    }
    PrefillPlan patched = plan;
    patched.partition.rows_per_block = rows;
    // A packed group must fit the patched block (else its heads run a tile each).
    if (c.problem.q_len * c.problem.group_size() > static_cast<std::int64_t>(rows)) patched.partition.packed_heads = 1;
    patched.partition.workgroup_lanes = static_cast<std::uint32_t>(attnkit::cuda_prefill_hopper::threads_per_block(other.consumer_warpgroups));
    patched.partition.warps_per_block = patched.partition.workgroup_lanes / 32;
    poison(c.out);  // poisoned again, so the second run must write every element
    poison(c.lse);
    run_hopper(c, patched);
    EXPECT_EQ(prefill_parity_failure(c.out, golden.out, c.problem.dtype), "") << c.note() << " with " << rows << "-row blocks";
    EXPECT_EQ(prefill_lse_failure(c.lse, golden.lse), "") << c.note() << " with " << rows << "-row blocks";
    poison(c.out);
    run_hopper(c, patched, /*with_lse=*/false);
    EXPECT_EQ(prefill_parity_failure(c.out, golden.out, c.problem.dtype), "")
        << c.note() << " with " << rows << "-row blocks, without an LSE";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PrefillHopper, ::testing::ValuesIn(hopper_shapes()),
                         [](const ::testing::TestParamInfo<PrefillShape>& info) { return info.param.name; });

// The planner's own choice on this device: the Hopper family for the common long-prefill shape.
TEST(PrefillHopperPlan, PlannerPicksItOnHopper) {
  ATTNKIT_SKIP_WITHOUT_HOPPER("warp-specialized kernel");
  const PrefillPlan plan = plan_prefill(PrefillProblem{}, cuda::target());
  EXPECT_EQ(plan.partition.family, KernelFamily::kWarpSpecializedWgmma) << to_table(plan);
}

// BSHD memory ([batch, seq, heads, D]) seen through BHSD strides: the TMA maps take the strides.
TEST(PrefillHopperPlan, BshdStridedViewsMatchGolden) {
  ATTNKIT_SKIP_WITHOUT_HOPPER("warp-specialized kernel");
  const std::int64_t B = 2, H = 8, G = 2, D = 128, S = 301;
  PrefillProblem p;
  p.batch = B, p.num_heads = H, p.kv_heads = G, p.head_dim = D, p.q_len = S, p.kv_len = S;
  p.causal = true, p.dtype = p.out_dtype = DType::kBF16;
  auto bshd = [](HostTensor& t, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
    t = HostTensor(DType::kBF16, {b, s, h, d});
    TensorView v = t.view;
    v.shape = {b, h, s, d, 0};
    v.strides = {s * h * d, d, h * d, 1, 0};
    t.view = v;
  };
  HostTensor q, k, v, out;
  bshd(q, B, S, H, D);
  bshd(k, B, S, G, D);
  bshd(v, B, S, G, D);
  bshd(out, B, S, H, D);
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  fill_normal(q, rng);
  fill_normal(k, rng);
  fill_normal(v, rng);
  poison(out);
  const reference::Result golden = reference::prefill(p, PrefillTensors{q.view, k.view, v.view, out.view, {}, {}, {}});
  DeviceTensor dq(q), dk(k), dv(v), dout(out);
  const PrefillPlan plan = plan_prefill(p, cuda::target(), KernelFamily::kWarpSpecializedWgmma);
  cuda::prefill(plan, PrefillTensors{dq.view, dk.view, dv.view, dout.view, {}, {}, {}}, Workspace{});
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dout.copy_to(out);
  HostTensor flat(DType::kF32, {B * H * S * D});
  std::size_t i = 0;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t s = 0; s < S; ++s)
        for (std::int64_t d = 0; d < D; ++d)
          flat.set(i++, static_cast<float>(load_as_float(
                            out.bytes.data(), DType::kBF16,
                            static_cast<std::size_t>(b * out.view.strides[0] + h * out.view.strides[1] +
                                                     s * out.view.strides[2] + d))));
  EXPECT_EQ(prefill_parity_failure(flat, golden.out, DType::kBF16), "") << "seed " << seed;
}

// Lazy rescaling (d256 and e4m3: a row's running max moves only once a tile passes it by a slack,
// hopper_prefill.cuh): keys whose scale grows along the sequence raise the row maxima a little on
// most key tiles, and two keys 40x larger make them jump by hundreds of log2 units: a max that did
// not move there would overflow P (exp2 past 2^128); causal and not.
TEST(PrefillHopperPlan, LazyRescaleFollowsRisingAndJumpingMaxima) {
  ATTNKIT_SKIP_WITHOUT_HOPPER("warp-specialized kernel");
  for (const bool causal : {false, true}) {
    const std::int64_t S = 900, D = 256, G = 2;
    PrefillCase c(PrefillShape{"rising_maxima_d256_bf16", 1, 4, G, D, 300, S, causal, DType::kBF16, DType::kBF16});
    for (std::int64_t g = 0; g < G; ++g) {
      for (std::int64_t j = 0; j < S; ++j) {
        const float factor = (1.0f + 3.0f * static_cast<float>(j) / S) * (j == 301 || j == 650 ? 40.0f : 1.0f);
        for (std::int64_t d = 0; d < D; ++d) {
          const auto i = static_cast<std::size_t>((g * S + j) * D + d);
          c.k.set(i, c.k.get(i) * factor);
        }
      }
    }
    const reference::Result golden = reference::prefill(c.problem, c.tensors());
    const PrefillPlan plan = plan_prefill(c.problem, cuda::target(), KernelFamily::kWarpSpecializedWgmma);
    ASSERT_EQ(plan.partition.family, KernelFamily::kWarpSpecializedWgmma);
    run_hopper(c, plan);
    EXPECT_EQ(prefill_parity_failure(c.out, golden.out, c.problem.dtype), "") << c.note();
    EXPECT_EQ(prefill_lse_failure(c.lse, golden.lse), "") << c.note();
  }
}

// out rows that start off 16 bytes (a row stride of D + 2) take the kernel's 4-byte stores instead
// of the 16-byte block stores d256 otherwise uses: the same results, and the two padding columns
// keep their poison.
TEST(PrefillHopperPlan, OutRowsOffSixteenBytesMatchGolden) {
  ATTNKIT_SKIP_WITHOUT_HOPPER("warp-specialized kernel");
  for (const std::int64_t D : {64, 128, 256}) {
    const std::int64_t B = 2, H = 4, G = 2, S = 200, pitch = D + 2;
    PrefillShape shape{"out_pitch", B, H, G, D, S, S, true, DType::kBF16, DType::kBF16};
    PrefillCase c(shape);
    HostTensor padded(DType::kBF16, {B, H, S, pitch});
    poison(padded);
    const reference::Result golden =
        reference::prefill(c.problem, PrefillTensors{c.q.view, c.k.view, c.v.view, c.out.view, {}, {}, {}});
    DeviceTensor dq(c.q), dk(c.k), dv(c.v), dout(padded);
    TensorView dview = dout.view;
    dview.shape = {B, H, S, D, 0};
    dview.strides = {H * S * pitch, S * pitch, pitch, 1, 0};
    const PrefillPlan plan = plan_prefill(c.problem, cuda::target(), KernelFamily::kWarpSpecializedWgmma);
    cuda::prefill(plan, PrefillTensors{dq.view, dk.view, dv.view, dview, {}, {}, {}}, Workspace{});
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    dout.copy_to(padded);
    HostTensor flat(DType::kF32, {B * H * S * D});
    std::size_t i = 0;
    int pad_written = 0;
    for (std::int64_t row = 0; row < B * H * S; ++row) {
      for (std::int64_t d = 0; d < pitch; ++d) {
        const double x = load_as_float(padded.bytes.data(), DType::kBF16, static_cast<std::size_t>(row * pitch + d));
        if (d < D) {
          flat.set(i++, static_cast<float>(x));
        } else if (!std::isnan(x)) {
          ++pad_written;
        }
      }
    }
    EXPECT_EQ(prefill_parity_failure(flat, golden.out, DType::kBF16), "") << "D=" << D << " seed " << c.seed;
    EXPECT_EQ(pad_written, 0) << "D=" << D;
  }
}

// Rows TMA cannot describe (a q view one element off 16 bytes) are rejected before any launch,
// and out keeps its poison.
TEST(PrefillHopperPlan, RejectsMisalignedRowsBeforeWriting) {
  ATTNKIT_SKIP_WITHOUT_HOPPER("warp-specialized kernel");
  PrefillShape s{"misaligned", 1, 2, 2, 128, 63, 64, false, DType::kBF16, DType::kBF16};
  PrefillCase c(s);
  DeviceTensor q(c.q), k(c.k), v(c.v), out(c.out);
  PrefillTensors t{q.view, k.view, v.view, out.view, {}, {}, {}};
  t.q.data = static_cast<char*>(t.q.data) + 2;
  t.q.shape[2] -= 1;
  PrefillProblem shorter = c.problem;
  shorter.q_len -= 1;
  const PrefillPlan plan = plan_prefill(shorter, cuda::target(), KernelFamily::kWarpSpecializedWgmma);
  EXPECT_THROW(cuda::prefill(plan, t, Workspace{}), Error);
  HostTensor after(DType::kBF16, {1, 2, 63, 128});
  out.copy_to(after);
  EXPECT_EQ(after.bytes, c.out.bytes);
}

// A plan whose walk the kernel cannot take (a tail longer than the pairs, a tail after single
// tiles) is rejected before any launch, with a fix, and out keeps its poison.
TEST(PrefillHopperPlan, RejectsATailItCannotWalk) {
  ATTNKIT_SKIP_WITHOUT_HOPPER("warp-specialized kernel");
  PrefillShape s{"bad_tail", 1, 2, 2, 128, 300, 300, true, DType::kBF16, DType::kBF16};
  PrefillCase c(s);
  DeviceTensor q(c.q), k(c.k), v(c.v), out(c.out);
  const PrefillTensors t{q.view, k.view, v.view, out.view, {}, {}, {}};
  const PrefillPlan plan = plan_prefill(c.problem, cuda::target(), KernelFamily::kWarpSpecializedWgmma);
  for (const auto& [tiles_per_unit, tail_pairs] : {std::pair{2u, 3u}, {1u, 1u}}) {
    PrefillPlan bad = plan;
    bad.partition.tiles_per_unit = tiles_per_unit;
    bad.partition.tail_pairs = tail_pairs;  // 2 (sequence, head) pairs here
    try {
      cuda::prefill(bad, t, Workspace{});
      ADD_FAILURE() << "a tail of " << tail_pairs << " pairs with " << tiles_per_unit << " tile(s) per unit ran";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("as its tail"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("Fix:"), std::string::npos) << e.what();
    }
    HostTensor after(DType::kBF16, {1, 2, 300, 128});
    out.copy_to(after);
    EXPECT_EQ(after.bytes, c.out.bytes);
  }
}

}  // namespace
}  // namespace attnkit::testing
