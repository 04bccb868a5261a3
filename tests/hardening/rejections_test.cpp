// Rejections the validation suite (tests/cpu/validation_test.cpp) does not cover: the planner's
// problem checks, names (targets, dtypes), the golden's host-only inputs, and reproducers of the
// fuzzers' findings (each was failing until its fix landed; docs/errors.md lists them).
#include <functional>

#include "hardening_support.hpp"

namespace attnkit::testing {
namespace {

void expect_error_with_fix(const std::function<void()>& call, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "no Error for: " << needle;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(". Fix: "), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "expected '" << needle << "' in: " << msg;
  }
}

TEST(Rejections, PlannerRejectsBadProblemsWithAFix) {
  const DecodeProblem good_decode = decode_problem(2, 8, 2, 64, 40);
  const PrefillProblem good_prefill = prefill_problem(1, 4, 2, 64, 20, 30, true);
  for (const Target& target : {cpu_target(2), known_target("h200")}) {
    auto decode = [&](const std::function<void(DecodeProblem&)>& edit, const std::string& needle) {
      DecodeProblem p = good_decode;
      edit(p);
      expect_error_with_fix([&] { plan_decode(p, target); }, needle);
    };
    decode([](DecodeProblem& p) { p.head_dim = 100; }, "head_dim=100 is not a multiple of 8");
    decode([](DecodeProblem& p) { p.head_dim = 264; }, "head_dim=264");
    decode([](DecodeProblem& p) { p.kv_len = 41; }, "kv_len=41 is above max_seq=40");
    decode([](DecodeProblem& p) { p.options.window = -1; }, "window=-1 is negative");
    decode([](DecodeProblem& p) { p.options.scale = std::nanf(""); }, "scale is negative or not finite");
    decode([](DecodeProblem& p) { p.options.scale = -1.0f; }, "scale is negative or not finite");
    decode([](DecodeProblem& p) { p.options.softcap = INFINITY; }, "softcap is negative or not finite");
    decode([](DecodeProblem& p) { p.options.softcap = -2.0f; }, "softcap is negative or not finite");
    decode([](DecodeProblem& p) { p.kv_dtype = DType::kI32; }, "kv_dtype is i32");
    decode([](DecodeProblem& p) { p.num_heads = -8; }, "num_heads=-8 is not positive");
    decode([](DecodeProblem& p) { p.batch = std::int64_t{1} << 62; }, "overflow");
    auto prefill = [&](const std::function<void(PrefillProblem&)>& edit, const std::string& needle) {
      PrefillProblem p = good_prefill;
      edit(p);
      expect_error_with_fix([&] { plan_prefill(p, target); }, needle);
    };
    prefill([](PrefillProblem& p) { p.q_len = 31; }, "causal with q_len=31 > kv_len=30");
    prefill([](PrefillProblem& p) { p.q_len = 0; }, "q_len=0 is not positive");
    prefill([](PrefillProblem& p) { p.out_dtype = DType::kI32; }, "out_dtype is i32");
    prefill([](PrefillProblem& p) { p.kv_heads = 3; }, "not divisible by kv_heads=3");
    prefill([](PrefillProblem& p) { p.q_len = p.kv_len = std::int64_t{1} << 40; }, "2^31-1 tokens");
    prefill([](PrefillProblem& p) { p.batch = std::int64_t{1} << 40; p.q_len = p.kv_len = std::int64_t{1} << 30; }, "overflow");
  }
}

TEST(Rejections, UnknownNamesAreRejectedWithTheAcceptedOnes) {
  expect_error_with_fix([] { known_target("h300"); }, "h300");
  expect_error_with_fix([] { parse_dtype("f64"); }, "unknown dtype 'f64'");
}

TEST(Rejections, TheGoldenReadsOnlyHostTensors) {
  const DecodeProblem p = decode_problem(1, 2, 1, 16, 8);
  DecodeCase c(p, {8});
  DecodeTensors t = c.tensors();
  t.k_cache.device = DeviceKind::kCuda;
  expect_error_with_fix([&] { reference::decode(p, t); }, "k_cache is not a host tensor");
}

// Found by fuzz_validate in strict mode (ATTNKIT_FUZZ_STRICT=1): a pointer that is not aligned to
// its element size is accepted on the CPU, and the validator and kernels then load and store
// through it (undefined behaviour; UBSan reports it in validate.cpp's read_i32 and the LSE store).
// Fixed: check_tensor in src/common/validate.cpp rejects it.
TEST(Rejections, CpuEntryPointsRejectPointersNotAlignedToTheirElement) {
  const DecodeProblem p = decode_problem(1, 2, 1, 16, 8);
  DecodeCase c(p, {8});
  const DecodePlan plan = plan_decode(p, cpu_target(1), KernelFamily::kScalarOnline);
  std::vector<std::uint8_t> shifted(c.out.bytes.size() + 4);
  DecodeTensors t = c.tensors();
  t.out.data = shifted.data() + 1;  // f32 at an odd address
  const std::vector<std::uint8_t> before = shifted;
  expect_error_with_fix([&] { run_decode(plan, t); }, "aligned");
  EXPECT_EQ(shifted, before) << "a rejected call wrote to out";
}

// Found by fuzz_planner: a decode plan for the CUDA backend with kv_len = 2^32 - 1 or 2^32 leaves
// the planner with keys_per_split = 0 (the key count rounded up to whole tiles no longer fits
// WorkPartition's 32-bit fields), a plan no kernel can run. The planner must reject key counts
// its partition cannot hold, or hold them.
// Fixed: DecodeProblem::validate caps a sequence at 2^31-1 tokens.
TEST(Rejections, PlannerNeverTruncatesKeyCountsBeyond32Bits) {
  for (std::int64_t kv_len : {(std::int64_t{1} << 32) - 1, std::int64_t{1} << 32})
  for (const Target& target : {known_target("h200"), cpu_target(2)}) {
    const DecodeProblem p = decode_problem(257, 7, 7, 8, kv_len);
    try {
      const DecodePlan plan = plan_decode(p, target);
      EXPECT_GE(std::uint64_t{plan.partition.sequence_splits} * plan.partition.keys_per_split,
                static_cast<std::uint64_t>(kv_len))
          << to_string(target.backend) << ": the splits do not cover kv_len: " << to_json(plan);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(". Fix: "), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace attnkit::testing
