// Internal: the units of the bf16 row-block decode body (fast_body_bf16_rows4.hpp) on the amx
// level: the scores on AMX tiles, P V on FMAs. Included by fast_isa_amx.cpp after
// fast_body_amx.hpp and fast_body_bf16_rows4.hpp (same namespace).
//
// Why: on the AMX Xeons vdpbf16ps issues at a quarter of the FMA rate (0.53 against 0.13 ns per
// instruction on one core), so Q K^T of a group-4 key at head_dim 128 takes 10.8 ns on the vector
// unit and 2.8 ns on the tiles (K in L1; docs/perf-notes.md, CPU round 15), and P V's 16 vdpbf16ps
// per key become 32 FMAs over even / odd columns, with V rows fetched into L1 three quarters of a
// tile ahead (8 rows: no faster from DRAM than vdpbf16ps; 12: 6-9% faster; 14 and more: slower;
// CPU round 16).
// How: a tile of 16 keys is the A operand read straight from the cache rows (16 rows x 32 columns
//   per tileloadd, the cache's row stride as the tile stride), q of a block of 4 heads the B
//   operand (its column pairs packed once per task into L.qt), and C (16 keys x 4 heads f32) is
//   stored as [key][head], the layout softmax_rows4 reads. The body's prefetches are issued as
//   the vector scores issue them (K rows ahead into L1, the tile's V rows into L2), but V's start
//   a quarter of a tile in (kVRowsFetched).
// The vector scores remain for tiles of fewer than 16 keys (a task's last), head_dim not a multiple
//   of 32 (the A rows would run past a row) and split q (an f32 or f16 q on a bf16 cache).
// Tile registers: 0 = C, 1 = A, 2 = B; configured at a task's start and released at its end.

namespace attnkit::cpu::detail::ATTNKIT_ISA_NS {

inline const AmxTileConfig& amx_decode_tile_config() {
  static const AmxTileConfig config = [] {
    AmxTileConfig c;
    c.rows[0] = c.rows[1] = c.rows[2] = 16;
    c.colsb[0] = 4 * sizeof(float);          // C: 16 keys x 4 heads
    c.colsb[1] = 32 * sizeof(std::uint16_t);  // A: 16 keys x 32 columns
    c.colsb[2] = 4 * sizeof(std::uint32_t);   // B: 16 column pairs x 4 heads
    return c;
  }();
  return config;
}

struct AmxTileUnits {
  static constexpr std::int64_t kKeys = 16, kChunk = 32;
  static constexpr bool kPvOnFma = true;
  static std::int64_t v_prefetch_rows(const DecodeTask& t) { return imax(3 * t.tile / 4, 1); }
  // The previous tile's P V fetched this tile's first V rows into L1 (v_prefetch_rows ahead), so the
  // scores' L2 prefetch of V starts a quarter of a tile in (0 / 2 / 4 / 6 / 8 / 12 / 16 rows in: 2-6
  // fastest, 3-4% ahead of 0; CPU round 16).
  static constexpr std::int64_t kVRowsFetched = kKeys / 4;

  // L.qt[block b][chunk c][pair r][head n] = the bf16 pair (q[4b + n][32c + 2r], q[4b + n][32c + 2r + 1]):
  // column pair w of a head is (chunk w / 16, pair w % 16), so a block is [w][n].
  static void begin(const DecodeTask& t, const DecodeLayoutRows4& L) {
    _tile_loadconfig(&amx_decode_tile_config());
    for (std::int64_t g = 0; g < t.group; ++g) {
      std::uint32_t* block = L.qt + g / 4 * (L.dp / 2) * 4;
      for (std::int64_t w = 0; w < L.dp / 2; ++w) {
        std::uint32_t pair;
        std::memcpy(&pair, L.qh + g * L.dp + 2 * w, sizeof pair);
        block[w * 4 + g % 4] = pair;
      }
    }
  }

  static void end() { _tile_release(); }

  template <bool kSplit, int kD>
  static void scores(const DecodeTask& t, const DecodeLayoutRows4& L, std::int64_t h0, std::int64_t j0, std::int64_t n,
                   bool prefetch) {
    const std::int64_t d = head_dim_of<kD>(t);
    if (kSplit || n != kKeys || d % kChunk != 0) {
      scores_rows4<kSplit, kD>(t, L, h0, j0, n, prefetch);
      return;
    }
    constexpr std::int64_t kRowBytes = kD * 2;  // 0: not known at compile time
    const std::int64_t stride = t.k.row_stride, last = t.key_end - 1;
    if (prefetch) {
      const PrefetchRows pk(t.k, 2, 0, d * 2, last, j0), pv(t.v, 2, 0, d * 2, last, j0);
#pragma GCC unroll 4
      for (std::int64_t j = 0; j < kKeys; j += 4) {
        pk.rows<3, 4, kRowBytes>(j0 + j + kRows4PrefetchRows);
        pv.rows<2, 4, kRowBytes>(j0 + j + kVRowsFetched);
      }
    }
    const std::uint16_t* k = static_cast<const std::uint16_t*>(t.k.data) + row_offset(t.k, j0);
    const std::uint32_t* q = L.qt + h0 / 4 * (L.dp / 2) * 4;
    _tile_zero(0);
    for (std::int64_t c = 0; c < d; c += kChunk, q += kKeys * 4) {
      _tile_loadd(1, k + c, stride * static_cast<std::int64_t>(sizeof(std::uint16_t)));
      _tile_loadd(2, q, 4 * sizeof(std::uint32_t));
      _tile_dpbf16ps(0, 1, 2);
    }
    _tile_stored(0, L.s, 4 * sizeof(float));
  }
};

// The amx level's decode entry. A bf16 row-block task whose tiles are shorter than the score tile
// (the plan's 8-key tiles of rows wider than 128 columns) would score with vdpbf16ps, a quarter of
// the FMA rate on these cores, so it takes the f32-arithmetic row-block body (bf16 widened, FMAs),
// as the avx512 level does: b4 x 64k at head_dim 256 (CPU round 24).
inline void decode_amx(const DecodeTask& t) {
  if (uses_rows4(t) && t.tile < AmxTileUnits::kKeys) {
    decode_or_rows4(t);
    return;
  }
  decode_bf16_or_rows4<AmxTileUnits>(t);
}

}  // namespace attnkit::cpu::detail::ATTNKIT_ISA_NS
