// Bad input at every CPU entry point: an attnkit::Error whose message names the problem and
// carries a "Fix:", and the caches and outputs byte-for-byte unchanged afterwards.
#include <gtest/gtest.h>

#include <functional>

#include "cpu_case.hpp"

namespace attnkit::testing {
namespace {

// Runs `call`, expects an Error mentioning `needle` with a Fix, and the watched buffers intact.
void expect_rejected(const std::function<void()>& call, const std::vector<const HostTensor*>& watched,
                     const std::string& needle) {
  std::vector<std::vector<std::uint8_t>> before;
  for (const HostTensor* t : watched) before.push_back(t->bytes);
  try {
    call();
    ADD_FAILURE() << "no Error for: " << needle;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("Fix:"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "expected '" << needle << "' in: " << msg;
  }
  for (std::size_t i = 0; i < watched.size(); ++i) {
    EXPECT_TRUE(watched[i]->bytes == before[i]) << "buffer " << i << " changed by a rejected call (" << needle << ")";
  }
}

struct DecodeSetup {
  DecodeProblem p = [] {
    DecodeProblem d = decode_problem(2, 8, 2, 64, 40);
    d.kv_len = 32;
    return d;
  }();
  DecodeCase c{p, {32, 5}};
  DecodePlan plan = scalar_decode_plan(p);
  std::vector<const HostTensor*> watched() const { return {&c.k_cache, &c.v_cache, &c.out, &c.lse}; }
  void expect(const std::function<void(DecodePlan&, DecodeTensors&, Workspace&)>& edit, const std::string& needle) {
    DecodePlan bad_plan = plan;
    DecodeTensors t = c.tensors();
    Workspace ws;
    edit(bad_plan, t, ws);
    expect_rejected([&] { cpu::decode(bad_plan, t, ws); }, watched(), needle);
  }
};

TEST(Validation, DecodeRejectsBadInput) {
  DecodeSetup s;
  s.expect([](DecodePlan& p, DecodeTensors&, Workspace&) { p.problem.batch = 0; }, "batch=0");
  s.expect([](DecodePlan& p, DecodeTensors&, Workspace&) { p.problem.head_dim = -64; }, "head_dim=-64");
  s.expect([](DecodePlan& p, DecodeTensors&, Workspace&) { p.problem.kv_heads = 3; }, "not divisible by kv_heads");
  s.expect([](DecodePlan& p, DecodeTensors&, Workspace&) {
    p.problem.batch = std::int64_t{1} << 40;
    p.problem.max_seq = p.problem.kv_len = std::int64_t{1} << 30;
  }, "overflow");
  s.expect([](DecodePlan&, DecodeTensors& t, Workspace&) { t.q.shape[1] = 7; }, "q has shape");
  s.expect([](DecodePlan&, DecodeTensors& t, Workspace&) { t.v_cache.rank = 3; }, "v_cache has rank 3");
  s.expect([](DecodePlan&, DecodeTensors& t, Workspace&) { t.q.dtype = DType::kBF16; }, "q has dtype bf16");
  s.expect([](DecodePlan&, DecodeTensors& t, Workspace&) { t.lse.dtype = DType::kF16; }, "lse has dtype f16");
  s.expect([](DecodePlan&, DecodeTensors& t, Workspace&) { t.lengths.dtype = DType::kF32; }, "lengths has dtype f32");
  s.expect([](DecodePlan&, DecodeTensors& t, Workspace&) { t.k_cache.data = nullptr; }, "k_cache has a null data pointer");
  s.expect([](DecodePlan&, DecodeTensors& t, Workspace&) { t.out.data = nullptr; }, "out has a null data pointer");
  s.expect([](DecodePlan&, DecodeTensors& t, Workspace&) { t.out.device = DeviceKind::kCuda; }, "out lives on cuda");
  s.expect([](DecodePlan&, DecodeTensors& t, Workspace&) { t.q.strides[2] = 2; }, "last dimension");
  s.expect([](DecodePlan&, DecodeTensors& t, Workspace&) { t.k_cache.strides[1] = -t.k_cache.strides[1]; },
           "stride -");
  s.expect([](DecodePlan& p, DecodeTensors&, Workspace&) { p.target.backend = Backend::kCuda; }, "cuda backend");
  s.expect([](DecodePlan& p, DecodeTensors&, Workspace&) { p.evidence.workspace_bytes = 4096; }, "workspace");
  std::vector<std::uint8_t> small(100);
  s.expect([&](DecodePlan& p, DecodeTensors&, Workspace& ws) {
    p.evidence.workspace_bytes = 4096;
    ws = {small.data(), small.size(), DeviceKind::kCpu};
  }, "100 bytes given");
  // lengths above the plan's kv_len (the cache could hold them, the plan does not cover them).
  s.c.lengths.i32()[1] = 33;
  s.expect([](DecodePlan&, DecodeTensors&, Workspace&) {}, "lengths[1]=33");
  s.c.lengths.i32()[1] = -1;
  s.expect([](DecodePlan&, DecodeTensors&, Workspace&) {}, "lengths[1]=-1");
}

TEST(Validation, PrefillRejectsBadInput) {
  const PrefillProblem p = prefill_problem(3, 4, 2, 64, 6, 10, true);
  const PrefillPlan plan = scalar_prefill_plan(p);
  HostTensor q(DType::kF32, {1, 4, 12, 64}), k(DType::kF32, {1, 2, 20, 64}), v(DType::kF32, {1, 2, 20, 64});
  HostTensor out(DType::kF32, {1, 4, 12, 64}), cu_q(DType::kI32, {4}), cu_k(DType::kI32, {4});
  poison(out);
  auto run = [&](std::vector<std::int32_t> cq, std::vector<std::int32_t> ck, const std::string& needle,
                 bool drop_k = false) {
    std::copy(cq.begin(), cq.end(), cu_q.i32());
    std::copy(ck.begin(), ck.end(), cu_k.i32());
    PrefillTensors t{q.view, k.view, v.view, out.view, {}, cu_q.view, drop_k ? TensorView{} : cu_k.view};
    expect_rejected([&] { cpu::prefill(plan, t); }, {&out, &k, &v}, needle);
  };
  run({0, 6, 6, 12}, {0, 10, 10, 20}, "only one of cu_seqlens", true);
  run({1, 6, 6, 12}, {0, 10, 10, 20}, "cu_seqlens_q[0]=1");
  run({0, 6, 5, 12}, {0, 10, 10, 20}, "cu_seqlens_q decreases");
  run({0, 6, 6, 11}, {0, 10, 10, 20}, "cu_seqlens_q[batch]=11");
  run({0, 2, 5, 12}, {0, 5, 10, 20}, "above the problem's q_len=6");   // query rows 2, 3, 7
  run({0, 4, 8, 12}, {0, 4, 8, 20}, "above the problem's kv_len=10");  // keys 4, 4, 12
  run({0, 6, 9, 12}, {0, 10, 11, 20}, "has 3 queries but only 1 keys");
  // Dense layout: k with the wrong number of keys.
  HostTensor dq(DType::kF32, {3, 4, 6, 64}), dk(DType::kF32, {3, 2, 9, 64}), dout(DType::kF32, {3, 4, 6, 64});
  poison(dout);
  PrefillTensors dense{dq.view, dk.view, dk.view, dout.view, {}, {}, {}};
  expect_rejected([&] { cpu::prefill(plan, dense); }, {&dout}, "k has shape");
}

// A ragged prefill whose sequences are all empty has no rows and no keys; its tensors may come
// without memory (torch.empty(0, ...) has a null data pointer): accepted on every family, nothing
// written. With rows to compute a null q is still rejected.
TEST(Validation, PrefillOfEmptySequencesTakesRowlessTensorsWithoutMemory) {
  const PrefillProblem p = prefill_problem(2, 4, 2, 16, 8, 8, true);
  HostTensor cu(DType::kI32, {3});
  cu.i32()[0] = cu.i32()[1] = cu.i32()[2] = 0;
  const TensorView q = TensorView::contiguous(nullptr, DType::kF32, {1, 4, 0, 16});
  const TensorView kv = TensorView::contiguous(nullptr, DType::kF32, {1, 2, 0, 16});
  for (const PrefillPlan& plan : {plan_prefill(p, cpu_target(2)), plan_prefill(p, cpu_target(2), KernelFamily::kScalarOnline)}) {
    std::vector<std::uint8_t> ws(plan.evidence.workspace_bytes);
    EXPECT_NO_THROW(cpu::prefill(plan, {q, kv, kv, q, {}, cu.view, cu.view}, Workspace{ws.data(), ws.size()}))
        << to_string(plan.partition.family);
    EXPECT_TRUE(reference::prefill(p, {q, kv, kv, q, {}, cu.view, cu.view}).out.empty());
  }
  HostTensor cu_one(DType::kI32, {3}), k(DType::kF32, {1, 2, 1, 16}), out(DType::kF32, {1, 4, 1, 16});
  cu_one.i32()[0] = 0;
  cu_one.i32()[1] = cu_one.i32()[2] = 1;
  const PrefillPlan plan = plan_prefill(p, cpu_target(2));
  expect_rejected([&] {
    cpu::prefill(plan, {TensorView::contiguous(nullptr, DType::kF32, {1, 4, 1, 16}), k.view, k.view, out.view, {},
                        cu_one.view, cu_one.view}, {});
  }, {&out}, "null data pointer");
}

TEST(Validation, AppendRejectsBadInputBeforeWritingAnything) {
  HostTensor kc(DType::kF16, {2, 2, 8, 16}), vc(DType::kF16, {2, 2, 8, 16});
  HostTensor kn(DType::kF16, {2, 2, 16}), vn(DType::kF16, {2, 2, 16}), pos(DType::kI32, {2});
  std::mt19937_64 rng(fresh_seed());
  fill_normal(kc, rng), fill_normal(vc, rng), fill_normal(kn, rng), fill_normal(vn, rng);
  const std::vector<const HostTensor*> caches = {&kc, &vc};
  // Sequence 0's position is valid, sequence 1's is not: nothing may be written for either.
  pos.i32()[0] = 3, pos.i32()[1] = 8;
  expect_rejected([&] { cpu::append_kv({kn.view, vn.view, kc.view, vc.view, pos.view}); }, caches,
                  "positions[1]=8 is outside the cache");
  pos.i32()[1] = -2;
  expect_rejected([&] { cpu::append_kv({kn.view, {}, kc.view, {}, pos.view}); }, caches, "positions[1]=-2");
  pos.i32()[1] = 1;
  expect_rejected([&] { cpu::append_kv({{}, {}, kc.view, vc.view, pos.view}); }, caches, "neither k_new nor v_new");
  HostTensor kn32(DType::kF32, {2, 2, 16});
  expect_rejected([&] { cpu::append_kv({kn32.view, {}, kc.view, {}, pos.view}); }, caches, "k_new has dtype f32");
  HostTensor kn_heads(DType::kF16, {2, 3, 16});
  expect_rejected([&] { cpu::append_kv({kn_heads.view, {}, kc.view, {}, pos.view}); }, caches, "k_new has shape");
  expect_rejected([&] { cpu::append_kv({{}, vn.view, {}, {}, pos.view}); }, caches, "v_cache has a null data pointer");
  expect_rejected([&] { cpu::append_kv({kn.view, {}, kc.view, {}, {}}); }, caches, "positions has a null");
}

TEST(Validation, FusedRejectsBadPositionsAndTables) {
  DecodeProblem p = decode_problem(2, 4, 2, 32, 16);
  p.kv_len = 12;
  const DecodePlan plan = scalar_decode_plan(p);
  HostTensor q(DType::kF32, {2, 4, 32}), kn(DType::kF32, {2, 2, 32}), vn(DType::kF32, {2, 2, 32});
  HostTensor kc(DType::kF32, {2, 2, 16, 32}), vc(DType::kF32, {2, 2, 16, 32}), pos(DType::kI32, {2});
  HostTensor out(DType::kF32, {2, 4, 32});
  std::mt19937_64 rng(fresh_seed());
  fill_normal(q, rng), fill_normal(kn, rng), fill_normal(vn, rng), fill_normal(kc, rng), fill_normal(vc, rng);
  poison(out);
  const std::vector<const HostTensor*> watched = {&q, &kn, &kc, &vc, &out};
  FusedDecodeTensors t{q.view, kn.view, vn.view, kc.view, vc.view, pos.view, out.view, {}};
  pos.i32()[0] = 2, pos.i32()[1] = 16;
  expect_rejected([&] { cpu::fused_rope_append_decode(plan, t, RopeSpec{}); }, watched, "positions[1]=16 is outside");
  pos.i32()[1] = 12;  // fits the cache, not the plan
  expect_rejected([&] { cpu::fused_rope_append_decode(plan, t, RopeSpec{}); }, watched, "plan covers kv_len=12");
  pos.i32()[1] = 5;
  std::vector<float> table(4 * 16, 1.0f);
  RopeSpec short_tables;
  short_tables.cos_table = table.data();
  short_tables.sin_table = table.data();
  short_tables.table_positions = 4;
  expect_rejected([&] { cpu::fused_rope_append_decode(plan, t, short_tables); }, watched, "beyond the RoPE tables");
  RopeSpec one_table;
  one_table.cos_table = table.data();
  one_table.table_positions = 4;
  expect_rejected([&] { cpu::fused_rope_append_decode(plan, t, one_table); }, watched, "only one of the RoPE");
  FusedDecodeTensors no_v = t;
  no_v.v_new = {};
  expect_rejected([&] { cpu::fused_rope_append_decode(plan, no_v, RopeSpec{}); }, watched, "v_new has a null");
}

TEST(Validation, RopeAndMergeRejectBadInput) {
  HostTensor x(DType::kF32, {2, 3, 16}), pos(DType::kI32, {2});
  std::mt19937_64 rng(fresh_seed());
  fill_normal(x, rng);
  std::vector<float> table(10 * 8, 0.5f);
  RopeSpec tables;
  tables.cos_table = tables.sin_table = table.data();
  tables.table_positions = 10;
  pos.i32()[0] = 9, pos.i32()[1] = 10;
  expect_rejected([&] { cpu::apply_rope(x.view, pos.view, tables); }, {&x}, "positions[1]=10 is beyond");
  pos.i32()[1] = -1;
  expect_rejected([&] { cpu::apply_rope(x.view, pos.view, RopeSpec{}); }, {&x}, "positions[1]=-1 is negative");
  HostTensor odd(DType::kF32, {2, 3, 15});
  pos.i32()[1] = 0;
  expect_rejected([&] { cpu::apply_rope(odd.view, pos.view, RopeSpec{}); }, {&odd}, "head_dim=15 is odd");

  HostTensor op(DType::kF32, {2, 4, 8}), lp(DType::kF32, {2, 4}), out(DType::kF32, {4, 8}), lse(DType::kF32, {4});
  HostTensor lp16(DType::kF16, {2, 4}), out_short(DType::kF32, {3, 8});
  poison(out);
  expect_rejected([&] { cpu::merge_states({op.view, lp16.view, out.view, lse.view}); }, {&out}, "lse_partial has dtype f16");
  expect_rejected([&] { cpu::merge_states({op.view, lp.view, out_short.view, {}}); }, {&out_short}, "out has shape");
}

}  // namespace
}  // namespace attnkit::testing
