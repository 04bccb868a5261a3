// Shared pieces of `attnkit check`: result rows, DESIGN.md's tolerances, comparison against the
// float64 golden, and staging host tensors onto the backend under test (CPU: the host buffers
// themselves; CUDA: device copies, fetched back after the run).
#pragma once
#include <cstdlib>  // random_tensors.hpp reads ATTNKIT_TEST_SEED
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "attnkit/plan.hpp"
#include "attnkit/reference.hpp"
#include "attnkit/tensor.hpp"
#include "attnkit/tensors.hpp"
#include "device_memory.hpp"
#include "support/random_tensors.hpp"

namespace attnkit::cli {

using testing::HostTensor;

enum class Status { kPass, kFail, kSkipped };

struct CheckRow {
  std::string backend;  // "cpu" or "cuda"
  std::string kernel;   // e.g. "decode/split-kv"
  std::string shape;
  std::string dtype;    // "bf16->bf16" (inputs -> output)
  double max_abs = 0, rel_l2 = 0;
  double tol_abs = std::numeric_limits<double>::infinity();  // inf: not bounded for this dtype
  double tol_rel = 0;
  std::size_t nan_count = 0;
  Status status = Status::kSkipped;
  std::string note;  // why it failed or was skipped, and extra evidence (LSE, cache rows)
};

struct Tolerance {
  double abs = std::numeric_limits<double>::infinity();
  double rel = 0;
};
// DESIGN.md: f32 max-abs 1e-3 and rel-L2 1e-5; f16 rel-L2 2e-3; bf16 1e-2; e4m3 inputs 5e-2
// (docs/architecture.md) (the coarser of the inputs' and the output's dtype decides, since rounding
// the output is part of the result).
Tolerance tolerance_for(DType input, DType output);
// LSE (f32 for every dtype): |lse - golden| <= max(1e-3, rel * max(1, |golden|)), with `rel` the
// dtype's rel-L2 tolerance: f16/bf16 inputs move every score by their rounding, and a kernel may
// legitimately round an intermediate (rotated q) to the storage dtype.
inline constexpr double kLseToleranceAbs = 1e-3;
inline Tolerance exact_tolerance() { return {0.0, 0.0}; }

// Fills max_abs / rel_l2 / nan_count and sets PASS or FAIL (NaN never passes).
void judge(CheckRow& row, const testing::Comparison& c, const Tolerance& tol);
// LSE (f32) against the golden, with -inf rows (no visible key) required to stay -inf.
// Returns an empty string when it passes, else what was wrong.
std::string check_lse(const HostTensor& lse, const std::vector<double>& golden, double rel);
// Runs `make` (a planner call) into `plan`; a rejected plan makes the row SKIPPED with the
// planner's reason (the backend cannot take that problem) and returns false.
template <class Plan, class Make>
bool try_plan(CheckRow& row, Make make, Plan& plan) {
  try {
    plan = make();
    return true;
  } catch (const Error& e) {
    row.status = Status::kSkipped;
    row.note = std::string("plan: ") + e.what();
    return false;
  }
}

// A decode's output and LSE (contiguous or paged cache of `kv_dtype`, q / out of that dtype, bf16
// for e4m3) against the golden: an e4m3 cache takes the plan's tolerance (its quantization is in the
// golden too; what remains is the q / out dtype's and the kernels' rounding), not the looser one of
// e4m3 prefill inputs; other caches their dtype's.
void judge_decode(CheckRow& row, const HostTensor& out, const HostTensor& lse, const reference::Result& golden,
                  DType kv_dtype, double plan_tolerance);

std::string dtype_pair(DType input, DType output);
// Sets a NaN bit pattern in every element of a tensor's [begin, end) range along one row.
void poison_range(HostTensor& t, std::size_t begin, std::size_t end);

// Host tensors made visible to the backend under test.
class Staging {
 public:
  explicit Staging(bool cuda) : cuda_(cuda) {}
  TensorView put(HostTensor& t);  // copy to the backend, return the backend's view
  Workspace workspace(std::uint64_t bytes);
  void take_back();  // synchronise, then copy every put tensor back to its host buffer
  bool cuda() const { return cuda_; }

 private:
  bool cuda_;
  std::vector<std::pair<HostTensor*, std::unique_ptr<DeviceBuffer>>> staged_;
  std::vector<std::unique_ptr<DeviceBuffer>> scratch_;
  std::vector<std::vector<std::uint8_t>> host_scratch_;
};

struct CheckContext {
  bool cuda = false;  // backend under test
  bool quick = false;
  std::string op = "all";     // all, decode, prefill, fused, kv (append, RoPE, merge) or paged
  std::vector<DType> dtypes;  // input dtypes to check (empty: the default set, e4m3 prefill included)
  Target target;
  std::mt19937_64 rng;
  std::function<void(CheckRow)> report;
};

// Runs `body`, turning an Error that says a kernel or a plan is not there into SKIPPED and any
// other exception into FAIL, so nothing unimplemented can pass.
void guarded(CheckContext& ctx, CheckRow row, const std::function<void(CheckRow&)>& body);

// Whether the context's --op / --dtype filters select an op, or an input dtype (`default_set`:
// whether the dtype is one the op checks when no --dtype was given).
bool wants_op(const CheckContext& ctx, const std::string& op);
bool wants_dtype(const CheckContext& ctx, DType dtype, bool default_set = true);
// The storage dtypes (f32, f16, bf16) to check: --dtype's, else all three (--quick: f32, bf16).
std::vector<DType> storage_dtypes(const CheckContext& ctx);

void check_attention(CheckContext& ctx);  // decode, prefill (e4m3 too), fused rope+append+decode
void check_kv(CheckContext& ctx);         // append, RoPE, merge
void check_paged(CheckContext& ctx);      // paged decode (e4m3 pools too), paged append (into e4m3 pools too)

}  // namespace attnkit::cli
