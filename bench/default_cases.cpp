// The default benchmark: Llama-3-8B-like attention (32 query heads, 8 KV heads, head_dim 128, bf16).
// Decode at batch 1 (latency) and 8 (throughput) over a 4096-key cache; a 1024-token causal prefill.
#include "bench.hpp"

namespace attnkit::bench {

std::vector<Case> default_cases() {
  std::vector<Case> cases;
  for (std::int64_t batch : {1, 8}) {
    Case c;
    c.op = "decode";
    c.batch = batch;
    c.q_len = 1;
    c.kv_len = 4096;
    cases.push_back(c);
  }
  Case prefill;
  prefill.op = "prefill";
  prefill.batch = 1;
  prefill.q_len = 1024;
  prefill.kv_len = 1024;
  prefill.causal = true;
  cases.push_back(prefill);
  return cases;
}

}  // namespace attnkit::bench
