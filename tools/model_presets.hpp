// Attention shapes of well-known models, so `attnkit plan --model llama3-8b` needs no arithmetic.
// The table lives in model_presets.cpp; explicit shape flags override a preset's values.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attnkit::cli {

struct ModelPreset {
  std::string_view name;
  std::int64_t num_heads;
  std::int64_t kv_heads;
  std::int64_t head_dim;
  std::int64_t window;      // sliding window in keys, 0 = none
  float softcap;            // logit soft-cap, 0 = none
  std::int64_t context;     // trained context length (the default max_seq)
  std::string_view note;    // where the numbers come from / what is simplified
};

const std::vector<ModelPreset>& model_presets();
// Throws attnkit::Error listing the known names when `name` is not one of them.
const ModelPreset& find_model_preset(std::string_view name);
std::string model_preset_names();  // "llama3-8b, llama3-70b, ..."

}  // namespace attnkit::cli
