// Argument validation shared by every backend: shapes, dtypes, strides, devices and pointers
// against the problem. Each check throws Error with a Fix before any kernel writes anything.
#pragma once
#include "attnkit/problem.hpp"
#include "attnkit/tensors.hpp"

namespace attnkit {

// `device` is where the kernel runs; every tensor must live there.
void validate_decode(const DecodeProblem& problem, const DecodeTensors& t, DeviceKind device);
void validate_prefill(const PrefillProblem& problem, const PrefillTensors& t, DeviceKind device);
// The e4m3 scales of a prefill call (part of validate_prefill; the golden calls it too): finite
// and > 0, and exactly 1 unless the problem's dtype is e4m3.
void validate_fp8_scales(const PrefillProblem& problem, const Fp8Scales& scales, const char* context);
void validate_append(const AppendTensors& t, DeviceKind device);
// The e4m3 cache scales of a decode (part of validate_decode; the golden calls it too): finite and
// > 0, and exactly 1 unless kv_dtype is e4m3.
void validate_kv_scales(DType kv_dtype, const KvScales& scales, const char* context);
// One of them ("k" or "v"), for a call that writes one side only (append).
void validate_kv_scale(const char* name, float value, DType cache, const char* context);
// Ops that take DecodeProblem-shaped caches but no e4m3 (fused step, sharded): an Error
// with a Fix when kv_dtype is e4m3.
void reject_fp8_cache(DType kv_dtype, const char* context);
void validate_fused(const DecodeProblem& problem, const FusedDecodeTensors& t, const RopeSpec& rope,
                    DeviceKind device);
// RoPE in place on x [batch, heads, head_dim] (storage dtype) at i32 positions[batch].
void validate_rope(const TensorView& x, const TensorView& positions, const RopeSpec& rope, DeviceKind device);
void validate_merge(const MergeTensors& t, DeviceKind device);
void validate_workspace(const Workspace& ws, std::uint64_t needed_bytes, DeviceKind device);

// Optional attention-sink logits: f32 [num_heads] on `device`; on the host each finite or -inf
// (NaN and +inf are rejected). Device sinks are read only by the kernels (documented, unchecked).
void validate_sinks(const TensorView& sinks, std::int64_t num_heads, DeviceKind device, const char* context);

// Host-side checks of i32 index tensors (CPU runs, or device runs given host copies).
void validate_lengths_host(const TensorView& lengths, std::int64_t batch, std::int64_t max_len,
                           const char* context);

}  // namespace attnkit
