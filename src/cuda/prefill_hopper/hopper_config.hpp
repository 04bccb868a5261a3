// The tile configurations of the Hopper (sm_90a) warp-specialized prefill kernel, in one place.
// Pure C++ (no CUDA): the planner (src/plan/cuda_prefill_rules.cpp) picks from this table and
// the launcher (hopper_prefill.cu) instantiates exactly these, so a plan always names a kernel
// that exists.
#pragma once
#include <cstdint>

namespace attnkit::cuda_prefill_hopper {

// One block: a producer warpgroup (one thread issues TMA loads; the group gives its registers
// away with setmaxnreg) and `consumer_warpgroups` consumer warpgroups of 64 query rows each
// (wgmma's M), so a block covers 64 * consumer_warpgroups query rows. K and V tiles of
// keys_per_tile keys stream through a ring of `stages` shared-memory slots guarded by mbarriers.
struct HopperConfig {
  int head_dim;
  int keys_per_tile;  // wgmma N of S = Q K^T (a multiple of 16: 64, 80 or 128, dev/hopper/gen_wgmma.py)
  int stages;         // K/V ring slots
  // Measured speed of this config's tile work relative to 1.0 for its head_dim's first config: the
  // planner divides each config's padded tile work (masked tile rows included) by it and takes
  // the smaller.
  double relative_rate;
  // 2: the consumers take turns in pairs (one's softmax under the other's matrix work); 3: in a
  // round, so each softmax runs under two warpgroups' matrix work (registers allow it where S, P
  // and O are small: head_dim 64).
  int consumer_warpgroups = 2;
};

constexpr int rows_per_block(const HopperConfig& c) { return 64 * c.consumer_warpgroups; }
constexpr int threads_per_block(int consumer_warpgroups) { return 128 * (consumer_warpgroups + 1); }
inline constexpr int kProducerRegisters = 24;  // setmaxnreg.dec for the producer warpgroup
// setmaxnreg.inc for the consumers: 128 * 24 + 128 * consumers * regs <= 65536, a multiple of 8.
constexpr int consumer_registers(int consumer_warpgroups) { return consumer_warpgroups == 2 ? 240 : 160; }

// Causal work tiles: a block's last key tiles can lie wholly past its first warpgroups' rows
// (they end up to rows_per_block - 64 rows before the block's); those warpgroups skip them. Where a
// block's rows are exactly one key tile (d64's 128-row blocks, d128, e4m3) an aligned causal
// diagonal (q_len == kv_len) never leaves a warpgroup a dead tile, and the skip's bookkeeping cost
// 2-3% at d64 512-1k, so those configs keep the full walk (docs/perf-notes.md, "Hopper prefill
// round 22"). (Before the warpgroup index was broadcast from lane 0, d256's key loop spilled with it.)
constexpr bool skips_dead_key_tiles(int keys_per_tile, int consumer_warpgroups) {
  return 64 * consumer_warpgroups != keys_per_tile;
}

// The kernel's input element type (q, k and v): 16-bit floats, or fp8 e4m3 with per-tensor scales.
enum class HopperInput : int { kF16, kBF16, kE4M3 };
constexpr int input_bytes(HopperInput in) { return in == HopperInput::kE4M3 ? 1 : 2; }

inline constexpr int kSwizzleElements = 64;  // 128-byte swizzle: 64 16-bit elements per row chunk

// Registers per consumer thread decide the key tile: S (keys_per_tile / 2 f32), P (keys_per_tile / 4)
// and O (head_dim / 2) must fit consumer_registers (240, or 160 with three consumer warpgroups)
// with room for addresses and the softmax state.
inline constexpr HopperConfig kHopperConfigs[] = {
    {64, 128, 3, 1.0},  // S 64 + P 32 + O 32 registers; 32 KiB per stage + 16 KiB Q
    // d64 with three consumer warpgroups (192-row blocks; S 64 + P 32 + O 32 of 160 registers):
    // the softmax, not the matrix work, bounds d64, and each softmax now runs under two
    // warpgroups' matrix work: 1.15x the tile work per second of the 128-row blocks (measured
    // 1.13-1.17x non-causal; docs/perf-notes.md, "Hopper prefill round 6"), but a 192-row block
    // pads short sequences and causal diagonals more, which the planner's cost counts.
    {64, 128, 3, 1.15, 3},  // 32 KiB per stage + 24 KiB Q
    {128, 128, 3, 1.0},  // S 64 + P 32 + O 64; 64 KiB per stage + 32 KiB Q = 224 KiB (of 227)
    {256, 64, 2, 1.0},   // S 32 + P 16 + O 128; 64 KiB per stage + 64 KiB Q = 192 KiB
    // d256 with 80-key tiles: S = Q K^T reads Q and K from shared memory, and at N = 64 each wgmma
    // needs 128 B per clock, all the bandwidth there is; N = 80 needs 112 (docs/perf-notes.md,
    // "Hopper prefill round 3"): 8-12% faster on long sequences, but a causal diagonal of 128-row
    // blocks wastes more of an 80-key tile (causal 512 ran 8% slower). 80 KiB per stage + 64 KiB Q
    // = 224 KiB.
    {256, 80, 2, 1.09},  // S 40 + P 20 + O 128
};

// The config a plan names: its head_dim, keys per tile and query rows per block (nullptr: none
// compiled).
inline constexpr const HopperConfig* find_hopper_config(std::int64_t head_dim, std::int64_t keys_per_tile,
                                                        std::int64_t rows) {
  for (const HopperConfig& c : kHopperConfigs) {
    if (c.head_dim == head_dim && c.keys_per_tile == keys_per_tile && rows_per_block(c) == rows) return &c;
  }
  return nullptr;
}

// A plan names its config by (head_dim, key tile, block rows), so no two configs may share them.
constexpr bool hopper_configs_are_distinct() {
  for (const HopperConfig& a : kHopperConfigs) {
    if (find_hopper_config(a.head_dim, a.keys_per_tile, rows_per_block(a)) != &a) return false;
  }
  return true;
}
static_assert(hopper_configs_are_distinct(), "two Hopper configs share (head_dim, keys_per_tile, rows_per_block)");

// fp8 (e4m3) inputs with per-tensor scales. wgmma reads 8-bit B operands K-major only, so O += P V
// needs V transposed ([head_dim][keys]): the launcher stages V^T in the caller's workspace first
// (hopper_fp8_vt_bytes; a 128-key tile is one 128-byte swizzle row per head_dim row). Row chunks
// hold 128 elements (128 bytes), so Q and K tiles of head_dim 128 are one chunk.
inline constexpr HopperConfig kHopperFp8Configs[] = {
    {128, 128, 3, 1.0},  // S 64 + P 16 + O 64 registers; 32 KiB per stage + 16 KiB Q
    {256, 128, 2, 1.0},  // S 64 + P 16 + O 128; 64 KiB per stage + 32 KiB Q
};
inline constexpr int kFp8KeyAlignment = 128;  // V^T rows are padded to whole 128-key tiles

inline constexpr const HopperConfig* find_hopper_fp8_config(std::int64_t head_dim) {
  for (const HopperConfig& c : kHopperFp8Configs) {
    if (c.head_dim == head_dim) return &c;
  }
  return nullptr;
}

// The V^T staging of an fp8 plan: e4m3 [batch][kv_heads][head_dim][keys padded to 128] (a ragged
// batch: sequence b's keys in slot b, so the plan's batch and longest kv_len bound it), at the
// start of the caller's workspace.
inline constexpr std::int64_t hopper_fp8_vt_row_keys(std::int64_t kv_len) {
  return (kv_len + kFp8KeyAlignment - 1) / kFp8KeyAlignment * kFp8KeyAlignment;
}
inline constexpr std::int64_t hopper_fp8_vt_bytes(std::int64_t batch, std::int64_t kv_heads, std::int64_t head_dim,
                                                  std::int64_t kv_len) {
  return batch * kv_heads * head_dim * hopper_fp8_vt_row_keys(kv_len);
}

// Row sums of P on the tensor core (16-bit inputs, head_dim 64 with three consumer warpgroups):
// O += P [V | 1], the V tile's 8-column extension read from a constant chunk of ones beside each V
// slot (one 128-byte swizzle row per key), so the accumulator's extra columns hold each row's
// running sum, rescaled with O, and the softmax adds no scores (64 FADD per thread per 128-key
// tile; d64's key loop 685 -> 625 instructions) for 8 / 64 more P V work on the tensor core. With
// three warpgroups sharing each SM sub-partition's issue slots that pays (+2-6% from 1k); the
// 128-row blocks of two lost 8-10% (causal 512 / 1k), and at head_dim 128 three slots leave no room
// for the ones (docs/perf-notes.md, "Hopper prefill round 25"). Calls that write an LSE or split
// states run the config's other instance, which sums P in f32 (hopper_prefill.cu).
inline constexpr bool kTensorRowSumsEnabled = true;
constexpr bool tensor_row_sums(int head_dim, int consumer_warpgroups) {
  return kTensorRowSumsEnabled && head_dim == 64 && consumer_warpgroups == 3;
}

// d128 holds Q's wgmma A fragments in registers for the whole work tile (32 per consumer thread
// for 16-bit inputs, 16 for e4m3), so S = Q K^T reads only K from shared memory: bf16 +0-2.6%
// under the power cap; d64's 160-register blocks spill with it and d256 would need 64
// (docs/perf-notes.md, "Hopper prefill round 26").
constexpr bool q_in_registers(int head_dim, int keys_per_tile) { return head_dim == 128 && keys_per_tile == 128; }
constexpr std::int64_t ones_chunk_bytes(const HopperConfig& c) {
  return tensor_row_sums(c.head_dim, c.consumer_warpgroups) ? 128LL * c.keys_per_tile : 0;
}

// Dynamic shared memory of one block: Q tile, `stages` K and V tiles (16-bit elements, no padding:
// the swizzle avoids bank conflicts) and the V slots' ones chunks, the mbarriers, and 1 KiB of
// slack to align the tiles to the 1024-byte swizzle atom.
// Barriers: Q full / empty, the staged O's K and V slots, and per stage K full, V full, K empty,
// V empty.
inline constexpr std::int64_t hopper_barrier_bytes(const HopperConfig& c) { return 8 * (4 + 4 * c.stages); }
inline constexpr std::int64_t hopper_shared_bytes(const HopperConfig& c) {
  return 2LL * c.head_dim * (rows_per_block(c) + 2LL * c.stages * c.keys_per_tile) + c.stages * ones_chunk_bytes(c) +
         hopper_barrier_bytes(c) + 1024;
}

// The same for fp8 inputs (one byte per element).
inline constexpr std::int64_t hopper_fp8_shared_bytes(const HopperConfig& c) {
  return 1LL * c.head_dim * (rows_per_block(c) + 2LL * c.stages * c.keys_per_tile) + hopper_barrier_bytes(c) + 1024;
}

}  // namespace attnkit::cuda_prefill_hopper
