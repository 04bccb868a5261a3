// The Hopper prefill launcher's entry point (hopper_prefill.cu), called by cuda::prefill
// (src/cuda/prefill/prefill.cu) when the plan names KernelFamily::kWarpSpecializedWgmma.
#pragma once
#include "attnkit/tensors.hpp"
#include "cuda/prefill/prefill_params.cuh"
#include "cuda/prefill_hopper/hopper_config.hpp"

namespace attnkit::cuda_prefill_hopper {

// Builds the TMA descriptors of q, k and v, and launches `grid_blocks` persistent blocks of the
// kernel instantiated for `config` (one of kHopperConfigs for f16/bf16, kHopperFp8Configs for
// e4m3: the plan's) and `dtype`, walking the work tiles in groups of `heads_per_group` (sequence,
// head) pairs (the plan's heads_per_tile_group), `tiles_per_unit` query tiles per unit (the plan's:
// 2 pairs causal tiles of equal work), the last `tail_pairs` pairs as single tiles after them
// (the plan's; hopper_walk.hpp), `packed_heads` query heads per tile (the plan's: > 1 packs a
// GQA group's q_len rows each into one tile). e4m3 inputs first stage V^T in `workspace`
// (hopper_fp8_vt_bytes; the caller has checked its size) and apply t.scales; their 16-bit output
// is `out_dtype`. Throws Error before any launch when a tensor cannot be described to TMA
// (alignment, strides) or no instance exists.
void launch_hopper_prefill(const cuda_prefill::PrefillParams& p, const PrefillTensors& t, DType dtype, DType out_dtype,
                           const HopperConfig& config, std::uint64_t grid_blocks, std::uint32_t heads_per_group,
                           std::uint32_t tiles_per_unit, std::uint32_t tail_pairs, std::uint32_t packed_heads,
                           Workspace workspace, void* stream);

}  // namespace attnkit::cuda_prefill_hopper
