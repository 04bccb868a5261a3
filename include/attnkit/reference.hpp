// The float64 golden reference: every option, no shortcuts, slow on purpose.
// It reads inputs through views (any dtype, any strides) and returns float64 results, so tests
// compare kernels against the exact answer rather than against another rounded kernel.
#pragma once
#include <vector>

#include "attnkit/paged.hpp"
#include "attnkit/problem.hpp"
#include "attnkit/tensors.hpp"

namespace attnkit::reference {

struct Result {
  std::vector<double> out;  // row-major, same logical shape as the call's out
  std::vector<double> lse;  // one per query row; -inf for a row with no visible key
};

// Inputs must be host views. `lengths` of the tensors gives each sequence's valid keys.
Result decode(const DecodeProblem& problem, const DecodeTensors& tensors);
// e4m3 inputs are read as their stored values times tensors.scales (q, k, v), in float64.
Result prefill(const PrefillProblem& problem, const PrefillTensors& tensors);

// Paged cache (paged.hpp): keys read through the page table. paged_decode's out is
// [batch, num_heads, head_dim]; extend's out is [cu_seqlens_q[batch], num_heads, head_dim], lse
// [rows, num_heads]. Index tensors are validated (host views only).
Result paged_decode(const PagedDecodeProblem& problem, const PagedDecodeTensors& tensors);
Result extend(const ExtendProblem& problem, const ExtendTensors& tensors);

// The log-sum-exp merge of partial states (tensors.hpp's MergeTensors; out and lse unused): out
// [rows * head_dim], lse [rows]; a split whose LSE is -inf is skipped, a row with no key gets
// zeros and -inf.
Result merge_states(const MergeTensors& tensors);

// Rotate one vector of head_dim elements for position `pos` (float64).
void rope(double* x, std::int64_t head_dim, std::int64_t pos, const RopeSpec& spec);

}  // namespace attnkit::reference
