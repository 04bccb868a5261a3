// Shape and target flags -> validated problems and a Target.
#include "shape_flags.hpp"

#include "attnkit/cuda.hpp"
#include "attnkit/error.hpp"
#include "model_presets.hpp"

namespace attnkit::cli {
namespace {

// A preset value applies unless the user passed the flag explicitly.
template <class T>
void apply_preset(T& value, const CLI::Option* opt, T preset_value) {
  if (opt == nullptr || opt->count() == 0) value = preset_value;
}

ShapeFlags with_preset(const ShapeFlags& flags) {
  ShapeFlags f = flags;
  if (f.model.empty()) return f;
  const ModelPreset& p = find_model_preset(f.model);
  apply_preset(f.heads, f.heads_opt, p.num_heads);
  apply_preset(f.kv_heads, f.kv_heads_opt, p.kv_heads);
  apply_preset(f.head_dim, f.head_dim_opt, p.head_dim);
  apply_preset(f.window, f.window_opt, p.window);
  apply_preset(f.softcap, f.softcap_opt, p.softcap);
  return f;
}

AttentionOptions options_of(const ShapeFlags& f) {
  AttentionOptions o;
  o.window = f.window;
  o.softcap = f.softcap;
  o.scale = f.scale;
  return o;
}

}  // namespace

void add_shape_flags(CLI::App& app, ShapeFlags& f, bool with_op, const std::vector<std::string>& ops) {
  if (with_op) {
    std::string choices;
    for (const std::string& op : ops) choices += (choices.empty() ? "" : ", ") + op;
    app.add_option("--op", f.op, "decode (one new token against a KV cache), prefill; all: " + choices)
        ->check(CLI::IsMember(ops))
        ->capture_default_str();
  }
  app.add_option("--model", f.model, "model preset: " + model_preset_names() + " (flags override it)");
  app.add_option("--batch", f.batch, "sequences in the batch")->capture_default_str();
  f.heads_opt = app.add_option("--heads", f.heads, "query heads")->capture_default_str();
  f.kv_heads_opt = app.add_option("--kv-heads", f.kv_heads, "KV heads (divides --heads)")->capture_default_str();
  f.head_dim_opt = app.add_option("--head-dim", f.head_dim, "head dimension (multiple of 8, <= 256)")
                       ->capture_default_str();
  app.add_option("--kv-len", f.kv_len, "keys per sequence")->capture_default_str();
  app.add_option("--q-len", f.q_len, "prefill query rows (default: --kv-len); extend: most new tokens per sequence (16)");
  f.max_seq_opt = app.add_option("--max-seq", f.max_seq, "decode cache capacity (default: --kv-len)");
  app.add_flag("--causal,!--no-causal", f.causal, "prefill causal mask (default on)");
  f.window_opt = app.add_option("--window", f.window, "sliding window in keys (0 = none)")->capture_default_str();
  f.softcap_opt = app.add_option("--softcap", f.softcap, "logit soft-cap c: s = c*tanh(s/c) (0 = none)");
  app.add_option("--scale", f.scale, "score scale (0 = 1/sqrt(head_dim))");
  app.add_option("--dtype", f.dtype,
                 "storage dtype of q, k, v: f32, f16, bf16, or e4m3 (decode: an fp8 KV cache, q and out bf16 or "
                 "--out-dtype; prefill: fp8 q/k/v on Hopper; per-tensor scales are a run-time input)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "e4m3"}))
      ->capture_default_str();
  app.add_option("--out-dtype", f.out_dtype,
                 "output dtype (default: --dtype; bf16 for e4m3, and q too for an e4m3 cache)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
}

void add_target_flags(CLI::App& app, TargetFlags& t) {
  app.add_option("--family", t.family,
                 "kernel family: scalar, tiled, split-kv, wgmma (Hopper prefill) (default: planner's choice)")
      ->check(CLI::IsMember({"scalar", "tiled", "split-kv", "wgmma"}));
  app.add_option("--backend", t.backend, "cpu or cuda (default: from --device, else cpu)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--device", t.device,
                 "plan for a known machine without needing it: h200, h100, cpu (default: this machine)");
  app.add_option("--threads", t.threads, "CPU worker threads (0 = all cores)")->capture_default_str();
}

DecodeProblem decode_problem(const ShapeFlags& flags) {
  const ShapeFlags f = with_preset(flags);
  DecodeProblem p;
  p.batch = f.batch;
  p.num_heads = f.heads;
  p.kv_heads = f.kv_heads;
  p.head_dim = f.head_dim;
  p.kv_len = f.kv_len;
  p.max_seq = f.max_seq > 0 ? f.max_seq : f.kv_len;
  p.kv_dtype = p.q_dtype = parse_dtype(f.dtype);
  p.out_dtype = f.out_dtype.empty() ? p.kv_dtype : parse_dtype(f.out_dtype);
  // e4m3 is a cache dtype: q and the output are bf16 (or --out-dtype's), the usual fp8-cache setup.
  if (is_fp8(p.kv_dtype)) p.q_dtype = p.out_dtype = f.out_dtype.empty() ? DType::kBF16 : parse_dtype(f.out_dtype);
  p.options = options_of(f);
  p.validate();
  return p;
}

PrefillProblem prefill_problem(const ShapeFlags& flags) {
  const ShapeFlags f = with_preset(flags);
  if (!(f.max_seq_opt == nullptr || f.max_seq_opt->count() == 0))
    fail("attnkit prefill", "--max-seq describes a decode cache", "drop --max-seq, or pass --op decode");
  PrefillProblem p;
  p.batch = f.batch;
  p.num_heads = f.heads;
  p.kv_heads = f.kv_heads;
  p.head_dim = f.head_dim;
  p.kv_len = f.kv_len;
  p.q_len = f.q_len > 0 ? f.q_len : f.kv_len;
  p.causal = f.causal;
  p.dtype = parse_dtype(f.dtype);
  // e4m3 is input-only: its default output is bf16, the usual fp8 attention output.
  p.out_dtype = !f.out_dtype.empty() ? parse_dtype(f.out_dtype) : is_fp8(p.dtype) ? DType::kBF16 : p.dtype;
  p.options = options_of(f);
  p.validate();
  return p;
}

Target resolve_target(const TargetFlags& t) {
  const bool device_is_cpu = t.device == "cpu";
  if (!t.device.empty()) {
    const std::string implied = device_is_cpu ? "cpu" : "cuda";
    if (!(t.backend.empty() || t.backend == implied))
      fail("attnkit --device", "--device " + t.device + " is a " + implied + " target but --backend is " + t.backend,
           "drop --backend, or pass a --device of that backend");
    if (device_is_cpu) return cpu_target(t.threads);
    Target target = known_target(t.device);
    return target;
  }
  if (t.backend.empty() || t.backend == "cpu") return cpu_target(t.threads);
  if (!(cuda::built() && cuda::device_count() > 0))
    fail("attnkit --backend cuda", cuda::built() ? "no CUDA device is visible" : "attnkit was built without CUDA",
         "pass --device h200 (or h100) to plan for a known GPU without having one");
  return cuda::target();
}

std::optional<KernelFamily> parse_family(const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (name == "scalar") return KernelFamily::kScalarOnline;
  if (name == "tiled") return KernelFamily::kCooperativeTiled;
  if (name == "split-kv") return KernelFamily::kSplitKvDecode;
  if (name == "wgmma") return KernelFamily::kWarpSpecializedWgmma;
  fail("attnkit --family", "unknown family '" + name + "'", "use scalar, tiled, split-kv or wgmma");
}

std::string family_flag_name(KernelFamily family) {
  switch (family) {
    case KernelFamily::kScalarOnline: return "scalar";
    case KernelFamily::kCooperativeTiled: return "tiled";
    case KernelFamily::kSplitKvDecode: return "split-kv";
    case KernelFamily::kWarpSpecializedWgmma: return "wgmma";
  }
  return "?";
}

}  // namespace attnkit::cli
