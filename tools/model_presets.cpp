// The one table of model presets. Numbers are the attention layers' public configurations
// (num_attention_heads, num_key_value_heads, head_dim, sliding_window, attn_logit_softcapping).
#include "model_presets.hpp"

#include "attnkit/error.hpp"

namespace attnkit::cli {

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> kPresets = {
      {"llama3-8b", 32, 8, 128, 0, 0.0f, 8192, "Llama 3 / 3.1 8B"},
      {"llama3-70b", 64, 8, 128, 0, 0.0f, 8192, "Llama 3 / 3.1 70B"},
      {"llama2-7b", 32, 32, 128, 0, 0.0f, 4096, "Llama 2 7B (multi-head, no GQA)"},
      {"mistral-7b", 32, 8, 128, 4096, 0.0f, 32768, "Mistral 7B v0.1 (sliding window 4096)"},
      {"qwen2-7b", 28, 4, 128, 0, 0.0f, 32768, "Qwen2 7B"},
      {"gemma2-9b", 16, 8, 256, 0, 50.0f, 8192,
       "Gemma 2 9B global layers (soft-cap 50 on logits; its local layers add window 4096)"},
      {"phi3-mini", 32, 32, 96, 0, 0.0f, 4096, "Phi-3 mini 4k"},
  };
  return kPresets;
}

std::string model_preset_names() {
  std::string names;
  for (const ModelPreset& p : model_presets()) {
    if (!names.empty()) names += ", ";
    names += p.name;
  }
  return names;
}

const ModelPreset& find_model_preset(std::string_view name) {
  for (const ModelPreset& p : model_presets()) {
    if (p.name == name) return p;
  }
  fail("attnkit --model", "unknown model '" + std::string(name) + "'",
       "use one of: " + model_preset_names() + " (or give --heads/--kv-heads/--head-dim)");
}

}  // namespace attnkit::cli
