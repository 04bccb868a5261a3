// Tolerances, judging and staging for `attnkit check`.
#include "check_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>

#include "attnkit/error.hpp"

namespace attnkit::cli {

Tolerance tolerance_for(DType input, DType output) {
  Tolerance t;
  t.rel = std::max(rel_l2_tolerance_for(input), rel_l2_tolerance_for(output));
  if (input == DType::kF32 && output == DType::kF32) t.abs = kFlashAttentionOutputToleranceAbs;
  return t;
}

bool wants_op(const CheckContext& ctx, const std::string& op) { return ctx.op == "all" || ctx.op == op; }

bool wants_dtype(const CheckContext& ctx, DType dtype, bool default_set) {
  if (ctx.dtypes.empty()) return default_set;
  return std::find(ctx.dtypes.begin(), ctx.dtypes.end(), dtype) != ctx.dtypes.end();
}

std::vector<DType> storage_dtypes(const CheckContext& ctx) {
  std::vector<DType> all = {DType::kF32, DType::kF16, DType::kBF16};
  if (ctx.dtypes.empty() && ctx.quick) all = {DType::kF32, DType::kBF16};
  std::vector<DType> wanted;
  for (DType t : all) {
    if (wants_dtype(ctx, t)) wanted.push_back(t);
  }
  return wanted;
}

void judge(CheckRow& row, const testing::Comparison& c, const Tolerance& tol) {
  row.max_abs = c.max_abs;
  row.rel_l2 = c.rel_l2;
  row.nan_count = c.nan_count;
  row.tol_abs = tol.abs;
  row.tol_rel = tol.rel;
  // Written as "within" so that a NaN error measure fails too.
  const bool within = c.nan_count == 0 && c.max_abs <= tol.abs && c.rel_l2 <= tol.rel;
  row.status = within ? Status::kPass : Status::kFail;
  if (c.nan_count > 0) row.note += "NaN in " + std::to_string(c.nan_count) + " elements (unwritten or poisoned input read); ";
  if (!within && c.nan_count == 0) row.note += "worst element " + std::to_string(c.worst_index) + "; ";
}

std::string check_lse(const HostTensor& lse, const std::vector<double>& golden, double rel) {
  double worst = 0, worst_excess = 0;
  std::size_t worst_index = 0, mismatched_inf = 0, nans = 0;
  for (std::size_t i = 0; i < golden.size(); ++i) {
    const double a = lse.get(i);
    if (std::isnan(a)) {
      ++nans;
    } else if (std::isinf(golden[i]) || std::isinf(a)) {
      if (a != golden[i]) ++mismatched_inf;
    } else {
      const double error = std::abs(a - golden[i]);
      const double allowed = std::max(kLseToleranceAbs, rel * std::max(1.0, std::abs(golden[i])));
      if (!(error <= allowed) && error - allowed >= worst_excess) {
        worst_excess = error - allowed;
        worst = error;
        worst_index = i;
      }
    }
  }
  if (nans == 0 && mismatched_inf == 0 && worst_excess == 0) return {};
  return "LSE: error " + std::to_string(worst) + " at " + std::to_string(worst_index) + " above max(1e-3, " +
         std::to_string(rel) + " * |lse|), " + std::to_string(nans) + " NaN, " + std::to_string(mismatched_inf) +
         " wrong +-inf; ";
}

void judge_decode(CheckRow& row, const HostTensor& out, const HostTensor& lse, const reference::Result& golden,
                  DType kv_dtype, double plan_tolerance) {
  const Tolerance tol = is_fp8(kv_dtype) ? Tolerance{std::numeric_limits<double>::infinity(), plan_tolerance}
                                         : tolerance_for(kv_dtype, kv_dtype);
  judge(row, testing::compare(out, golden.out), tol);
  const std::string lse_problem = check_lse(lse, golden.lse, tol.rel);
  if (!lse_problem.empty()) {
    row.status = Status::kFail;
    row.note += lse_problem;
  }
}

std::string dtype_pair(DType input, DType output) {
  return std::string(dtype_name(input)) + "->" + std::string(dtype_name(output));
}

void poison_range(HostTensor& t, std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) t.set(i, std::numeric_limits<float>::quiet_NaN());
}

TensorView Staging::put(HostTensor& t) {
  if (!cuda_) return t.view;
  auto buffer = std::make_unique<DeviceBuffer>(t.bytes.size());
  buffer->upload(t.bytes.data());
  TensorView view = t.view;
  view.data = buffer->data();
  view.device = DeviceKind::kCuda;
  view.device_index = current_device();
  staged_.emplace_back(&t, std::move(buffer));
  return view;
}

Workspace Staging::workspace(std::uint64_t bytes) {
  Workspace ws;
  ws.bytes = static_cast<std::size_t>(bytes);
  if (bytes == 0) return ws;
  if (cuda_) {
    scratch_.push_back(std::make_unique<DeviceBuffer>(ws.bytes));
    scratch_.back()->fill_bytes(0xFF);  // NaN patterns: a split state read before written shows
    ws.data = scratch_.back()->data();
    ws.device = DeviceKind::kCuda;
  } else {
    host_scratch_.emplace_back(ws.bytes, std::uint8_t{0xFF});
    ws.data = host_scratch_.back().data();
  }
  return ws;
}

void Staging::take_back() {
  if (!cuda_) return;
  device_synchronize("check: cuda kernel");
  for (auto& [host, buffer] : staged_) buffer->download(host->bytes.data());
}

void guarded(CheckContext& ctx, CheckRow row, const std::function<void(CheckRow&)>& body) {
  row.backend = ctx.cuda ? "cuda" : "cpu";
  try {
    body(row);
  } catch (const Error& e) {
    const std::string what = e.what();
    row.status = what.find("not implemented") != std::string::npos ? Status::kSkipped : Status::kFail;
    row.note += what;
  } catch (const std::exception& e) {
    row.status = Status::kFail;
    row.note += std::string("unexpected exception: ") + e.what();
  }
  ctx.report(std::move(row));
}

}  // namespace attnkit::cli
