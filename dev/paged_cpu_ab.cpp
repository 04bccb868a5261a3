// Contiguous vs paged CPU decode in one process, call by call (docs/perf-notes.md, "Paged decode on
// the CPU" rounds): on a noisy VM the two kernels' times drift together, so each round times every
// variant once in turn and the report is the median of each variant's time over the contiguous
// call of the same round. Variants: the contiguous cache, then paged pools in HND / NHD with pages
// of P keys dealt in a random or in sequence order ("rand" / "seq"). Every cache is allocated
// twice and the calls alternate between copies (each copy above the LLC at the default size).
//
// Not part of the build (a development probe). Against a CPU-only build (build/exp):
//   g++ -O2 -std=c++20 -fopenmp -Iinclude -Isrc dev/paged_cpu_ab.cpp build/exp/libattnkit.a -o /tmp/paged_cpu_ab
//   /tmp/paged_cpu_ab --rounds 15 --kv-len 65536 --dtype bf16 --variants hnd16rand,hnd16seq,hnd4096seq,nhd16rand
// A variant ending in "+l1" / "-l1" forces the plan's cpu_l1_prefetch on / off (CPU round 35).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attnkit/attnkit.hpp"

using namespace attnkit;

namespace {

struct Region {
  void* data = nullptr;
  std::size_t bytes = 0;
  explicit Region(std::size_t n) : bytes((n + (2u << 20) - 1) / (2u << 20) * (2u << 20)) {
    data = std::aligned_alloc(2u << 20, bytes);
    cpu::advise_huge_pages(data, bytes);
    std::memset(data, 0, bytes);
  }
  ~Region() { std::free(data); }
  Region(const Region&) = delete;
  Region(Region&& o) noexcept : data(o.data), bytes(o.bytes) { o.data = nullptr; }
};

void fill(void* p, std::size_t bytes, std::uint32_t seed) {
  // Small values in any 16-bit or 32-bit float format: bytes below 0x3c with random low bits.
  std::mt19937 rng(seed);
  auto* u = static_cast<std::uint16_t*>(p);
  for (std::size_t i = 0; i < bytes / 2; ++i) u[i] = static_cast<std::uint16_t>(0x3a00 | (rng() & 0x1ff));
}

struct Variant {
  std::string name;
  bool paged = false;
  PageLayout layout = PageLayout::kHND;
  std::int64_t page = 16;
  bool random_order = true;
  std::int64_t pad = 0;  // elements after each row of a page ("...pad": 32), off the power-of-two stride
  int l1_prefetch = -1;  // "...+l1" / "...-l1": the plan's cpu_l1_prefetch forced on / off; -1: the plan's
};

Variant parse_variant(const std::string& s) {
  Variant v;
  v.name = s;
  v.paged = true;
  v.layout = s.rfind("nhd", 0) == 0 ? PageLayout::kNHD : PageLayout::kHND;
  std::size_t i = 3, j = i;
  while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
  v.page = std::stoll(s.substr(i, j - i));
  std::string rest = s.substr(j);
  if (rest.size() > 3 && (rest.compare(rest.size() - 3, 3, "+l1") == 0 || rest.compare(rest.size() - 3, 3, "-l1") == 0)) {
    v.l1_prefetch = rest[rest.size() - 3] == '+';
    rest.resize(rest.size() - 3);
  }
  if (rest.size() > 3 && rest.compare(rest.size() - 3, 3, "pad") == 0) {
    v.pad = 32;
    rest.resize(rest.size() - 3);
  }
  v.random_order = rest != "seq";
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 15, threads = 2;
  std::int64_t kv_len = 65536, batch = 1, heads = 32, kv_heads = 8, d = 128;
  DType dtype = DType::kBF16;
  std::string variants = "hnd16rand,hnd16seq,hnd4096seq,nhd16rand";
  for (int a = 1; a + 1 < argc; a += 2) {
    const std::string k = argv[a], v = argv[a + 1];
    if (k == "--rounds") rounds = std::stoi(v);
    else if (k == "--kv-len") kv_len = std::stoll(v);
    else if (k == "--batch") batch = std::stoll(v);
    else if (k == "--threads") threads = std::stoi(v);
    else if (k == "--heads") heads = std::stoll(v);
    else if (k == "--kv-heads") kv_heads = std::stoll(v);
    else if (k == "--head-dim") d = std::stoll(v);
    else if (k == "--dtype") dtype = v == "f32" ? DType::kF32 : v == "f16" ? DType::kF16 : DType::kBF16;
    else if (k == "--variants") variants = v;
  }
  const std::size_t es = dtype_size(dtype);
  const std::size_t cache_bytes = static_cast<std::size_t>(batch * kv_heads * kv_len * d) * es;
  Target target = cpu_target();
  target.threads = threads;

  std::vector<Variant> vs{{"contiguous"}};
  for (std::size_t p = 0; p <= variants.size();) {
    const std::size_t q = std::min(variants.find(',', p), variants.size());
    if (q > p) vs.push_back(parse_variant(variants.substr(p, q - p)));
    p = q + 1;
  }

  Region q(static_cast<std::size_t>(batch * heads * d) * es), out(static_cast<std::size_t>(batch * heads * d) * es);
  fill(q.data, q.bytes, 1);
  std::vector<std::int32_t> lengths(static_cast<std::size_t>(batch), static_cast<std::int32_t>(kv_len));
  struct Runner {
    std::vector<Region> k, v;
    std::vector<std::int32_t> table;
    std::vector<std::byte> ws;
    DecodePlan plan;
    PagedDecodePlan paged_plan;
  };
  std::vector<Runner> runners(vs.size());
  for (std::size_t i = 0; i < vs.size(); ++i) {
    Runner& r = runners[i];
    // A paged pool holds whole pages: up to a page more than kv_len keys per sequence.
    const std::int64_t rows = vs[i].paged ? (kv_len + vs[i].page - 1) / vs[i].page * vs[i].page : kv_len;
    const std::int64_t row_elems = vs[i].layout == PageLayout::kNHD ? kv_heads * d + vs[i].pad : d + vs[i].pad;
    const std::size_t bytes = static_cast<std::size_t>(batch * (vs[i].layout == PageLayout::kNHD ? 1 : kv_heads) *
                                                       rows * row_elems) * es;
    for (int c = 0; c < 2; ++c) {
      r.k.emplace_back(bytes);
      r.v.emplace_back(bytes);
      fill(r.k.back().data, bytes, 2);
      fill(r.v.back().data, bytes, 3);
    }
    if (!vs[i].paged) {
      DecodeProblem p;
      p.batch = batch, p.num_heads = heads, p.kv_heads = kv_heads, p.head_dim = d;
      p.max_seq = p.kv_len = kv_len;
      p.kv_dtype = p.q_dtype = p.out_dtype = dtype;
      r.plan = plan_decode(p, target);
      r.ws.resize(r.plan.evidence.workspace_bytes);
      continue;
    }
    PagedDecodeProblem p;
    p.batch = batch, p.num_heads = heads, p.kv_heads = kv_heads, p.head_dim = d;
    p.cache.page_size = vs[i].page;
    p.cache.layout = vs[i].layout;
    p.cache.max_pages_per_seq = (kv_len + vs[i].page - 1) / vs[i].page;
    p.cache.num_pages = batch * p.cache.max_pages_per_seq;
    p.kv_len = kv_len;
    p.kv_dtype = p.q_dtype = p.out_dtype = dtype;
    p.expected_total_keys = batch * kv_len;
    r.paged_plan = plan_paged_decode(p, target);
    if (vs[i].l1_prefetch >= 0) r.paged_plan.partition.cpu_l1_prefetch = vs[i].l1_prefetch == 1;
    r.ws.resize(r.paged_plan.evidence.workspace_bytes);
    r.table.resize(static_cast<std::size_t>(p.cache.num_pages));
    std::iota(r.table.begin(), r.table.end(), 0);
    if (vs[i].random_order) std::shuffle(r.table.begin(), r.table.end(), std::mt19937(10));
  }

  auto run = [&](std::size_t i, int copy) {
    Runner& r = runners[i];
    const Workspace ws{r.ws.empty() ? nullptr : r.ws.data(), r.ws.size(), DeviceKind::kCpu};
    const TensorView qv = TensorView::contiguous(q.data, dtype, {batch, heads, d});
    const TensorView ov = TensorView::contiguous(out.data, dtype, {batch, heads, d});
    const TensorView lv = TensorView::contiguous(lengths.data(), DType::kI32, {batch});
    if (!vs[i].paged) {
      cpu::decode(r.plan, {qv, TensorView::contiguous(r.k[copy].data, dtype, {batch, kv_heads, kv_len, d}),
                           TensorView::contiguous(r.v[copy].data, dtype, {batch, kv_heads, kv_len, d}), lv, ov, {}},
                  ws);
      return;
    }
    const std::int64_t pages = r.paged_plan.problem.cache.num_pages, P = vs[i].page;
    auto pool = [&](void* data) {
      const std::int64_t pad = vs[i].pad;
      TensorView t = vs[i].layout == PageLayout::kHND ? TensorView::contiguous(data, dtype, {pages, kv_heads, P, d})
                                                      : TensorView::contiguous(data, dtype, {pages, P, kv_heads, d});
      if (pad > 0 && vs[i].layout == PageLayout::kNHD)
        t.strides = {P * (kv_heads * d + pad), kv_heads * d + pad, d, 1, 0};
      else if (pad > 0)
        t.strides = {kv_heads * P * (d + pad), P * (d + pad), d + pad, 1, 0};
      return t;
    };
    const TensorView table =
        TensorView::contiguous(r.table.data(), DType::kI32, {batch, r.paged_plan.problem.cache.max_pages_per_seq});
    cpu::paged_decode(r.paged_plan, {qv, {pool(r.k[copy].data), pool(r.v[copy].data), table, lv}, ov, {}}, ws);
  };

  using Clock = std::chrono::steady_clock;
  std::vector<std::vector<double>> ms(vs.size());
  for (int round = -2; round < rounds; ++round) {
    for (std::size_t i = 0; i < vs.size(); ++i) {
      for (int copy = 0; copy < 2; ++copy) {
        const auto t0 = Clock::now();
        run(i, copy);
        const double t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (round >= 0) ms[i].push_back(t);
      }
    }
  }
  auto median = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  std::printf("%zu MB K+V, %d threads, %d rounds x 2 copies\n", 2 * cache_bytes >> 20, threads, rounds);
  for (std::size_t i = 0; i < vs.size(); ++i) {
    std::vector<double> ratio(ms[i].size());
    for (std::size_t j = 0; j < ms[i].size(); ++j) ratio[j] = ms[i][j] / ms[0][j];
    std::printf("%-12s median %8.3f ms  min %8.3f ms  %6.2f GB/s  vs contiguous (median of pairs) %.3f\n",
                vs[i].name.c_str(), median(ms[i]), *std::min_element(ms[i].begin(), ms[i].end()),
                2.0 * cache_bytes / median(ms[i]) / 1e6, median(ratio));
  }
}
