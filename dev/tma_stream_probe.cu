// How fast can a decode-shaped TMA stream read device memory, with no math? (development tool, not
// built by CMake). Each block streams one (sequence, KV head)'s K and V rows, bf16 [64, 8, 16384,
// 128] each (the b64 x 16k decode point: 4.3 GB), through a ring of mbarrier-guarded slots filled
// by one producer lane; four consumer warps only wait for each slot and release it (optionally
// after a spin of `work` cycles, standing in for the math). Variants change the copy: the box shape
// (the decode's 136-column padded box, an unpadded 128-column box, two 64-column boxes with the
// 128-byte swizzle, the same two segments as one 5-D box, 128-row boxes), the L2 promotion, the
// ring depth, blocks per SM, and 1-D bulk copies of whole contiguous tiles. A plain 16-byte-load read kernel over the same bytes is the
// ceiling of the run. Bench protocol: L2 flushed before each repetition, CUDA events, medians.
//   nvcc -std=c++20 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc \
//     dev/tma_stream_probe.cu -lcuda -o tma_stream_probe
//   ./tma_stream_probe [reps] [batch]   (batch 64 = the b64 x 16k point; 256 = b256 x 16k, 2048 blocks)
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/common/sm90_primitives.cuh"

namespace {
using namespace attnkit::cuda_common;

constexpr int kH = 8, kS = 16384, kD = 128;
int kB = 64;  // sequences (argv[2]); one block per (sequence, KV head)
constexpr int kMaxStages = 8;

struct Variant {
  const char* name;
  int box_cols;       // columns of one box (elements)
  int box_rows;       // rows per box = keys per tile
  int col_boxes;      // boxes across a row (128 / box_cols, or 1 for the padded 136)
  CUtensorMapSwizzle swizzle;
  CUtensorMapL2promotion promo;
  int stages;
  int blocks_per_sm;  // forced through the shared-memory request
  bool bulk;          // 1-D cp.async.bulk of the contiguous tile instead of a tensor box
  int work;           // consumer spin per tile (SM cycles)
  bool one_box = false;  // the col_boxes segments as one 5-D box (cols, rows, segment, head, batch)
  int k_work = -1;       // >= 0: K and V released apart, K after this many cycles of the tile's work
};

struct Args {
  CUtensorMap k_map, v_map;
  const unsigned char* k;
  const unsigned char* v;
  int box_cols, box_rows, col_boxes, stages, tiles, work, k_work;
  int slot_bytes;  // one K (or V) tile in shared memory
  bool bulk, one_box;
};

__device__ __forceinline__ void tma_load_5d(void* dst, const CUtensorMap* map, std::uint64_t* bar, int c0, int c1,
                                            int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, %7}], "
      "[%2];" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

__device__ __forceinline__ void bulk_load(void* dst, const void* src, std::uint32_t bytes, std::uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

__global__ void __launch_bounds__(160) stream_kernel(const __grid_constant__ Args a) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ std::uint64_t full[kMaxStages], empty[kMaxStages], empty_v[kMaxStages];
  unsigned char* ring = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(smem) + 1023) & ~std::uintptr_t{1023});
  const int b = blockIdx.x / kH, h = blockIdx.x % kH;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(&a.k_map);
    tma_prefetch_descriptor(&a.v_map);
    for (int s = 0; s < a.stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 4);
      mbar_init(&empty_v[s], 4);
    }
    mbar_init_fence();
  }
  __syncthreads();
  const std::uint32_t tile_bytes = 2u * a.slot_bytes;
  if (warp == 4) {
    if (lane == 0) {
      const std::int64_t head_off = (static_cast<std::int64_t>(b) * kH + h) * kS * kD * 2;
      for (int t = 0; t < a.tiles; ++t) {
        const int slot = t % a.stages;
        if (t >= a.stages) mbar_wait(&empty[slot], ((t / a.stages) - 1) & 1);
        mbar_arrive_expect_tx(&full[slot], tile_bytes);
        unsigned char* kd = ring + slot * 2 * a.slot_bytes;
        unsigned char* vd = kd + a.slot_bytes;
        const int key0 = t * a.box_rows;
        if (a.k_work >= 0) {  // K as soon as its half is free, V when its own is
          for (int c = 0; c < a.col_boxes; ++c) {
            tma_load_4d(kd + c * (a.slot_bytes / a.col_boxes), &a.k_map, &full[slot], c * a.box_cols, key0, h, b);
          }
          if (t >= a.stages) mbar_wait(&empty_v[slot], ((t / a.stages) - 1) & 1);
          for (int c = 0; c < a.col_boxes; ++c) {
            tma_load_4d(vd + c * (a.slot_bytes / a.col_boxes), &a.v_map, &full[slot], c * a.box_cols, key0, h, b);
          }
        } else if (a.bulk) {
          const std::int64_t off = head_off + static_cast<std::int64_t>(key0) * kD * 2;
          bulk_load(kd, a.k + off, a.slot_bytes, &full[slot]);
          bulk_load(vd, a.v + off, a.slot_bytes, &full[slot]);
        } else if (a.one_box) {
          tma_load_5d(kd, &a.k_map, &full[slot], 0, key0, 0, h, b);
          tma_load_5d(vd, &a.v_map, &full[slot], 0, key0, 0, h, b);
        } else {
          const int box_bytes = a.slot_bytes / a.col_boxes;
          for (int c = 0; c < a.col_boxes; ++c) {
            tma_load_4d(kd + c * box_bytes, &a.k_map, &full[slot], c * a.box_cols, key0, h, b);
            tma_load_4d(vd + c * box_bytes, &a.v_map, &full[slot], c * a.box_cols, key0, h, b);
          }
        }
      }
    }
    return;
  }
  for (int t = 0; t < a.tiles; ++t) {
    const int slot = t % a.stages;
    mbar_wait(&full[slot], (t / a.stages) & 1);
    const long long start = clock64();
    if (a.k_work >= 0) {
      while (clock64() - start < a.k_work) {
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);
    }
    while (clock64() - start < a.work) {
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(a.k_work >= 0 ? &empty_v[slot] : &empty[slot]);
  }
}

__global__ void read_kernel(const int4* __restrict__ x, std::int64_t n, int* sink) {
  int4 acc = make_int4(0, 0, 0, 0);
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const int4 v = __ldcs(x + i);
    acc.x ^= v.x, acc.y ^= v.y, acc.z ^= v.z, acc.w ^= v.w;
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x7fffffff) *sink = 1;
}

__global__ void flush_kernel(int4* x, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    x[i] = make_int4(static_cast<int>(i), 0, 0, 0);
  }
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

CUtensorMap make_map(void* data, const Variant& v) {
  CUtensorMap map;
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], elem_strides[5] = {1, 1, 1, 1, 1};
  int rank = 4;
  if (v.one_box) {  // (cols of a segment, rows, segment, head, batch): segments 128 bytes apart
    rank = 5;
    const cuuint64_t d[5] = {static_cast<cuuint64_t>(v.box_cols), kS, static_cast<cuuint64_t>(v.col_boxes), kH, static_cast<cuuint64_t>(kB)};
    const cuuint64_t st[4] = {kD * 2, static_cast<cuuint64_t>(v.box_cols) * 2, static_cast<cuuint64_t>(kS) * kD * 2,
                              static_cast<cuuint64_t>(kH) * kS * kD * 2};
    const cuuint32_t bx[5] = {static_cast<cuuint32_t>(v.box_cols), static_cast<cuuint32_t>(v.box_rows),
                              static_cast<cuuint32_t>(v.col_boxes), 1, 1};
    std::copy(d, d + 5, dims), std::copy(st, st + 4, strides), std::copy(bx, bx + 5, box);
  } else {
    const cuuint64_t d[4] = {kD, kS, kH, static_cast<cuuint64_t>(kB)};
    const cuuint64_t st[3] = {kD * 2, static_cast<cuuint64_t>(kS) * kD * 2, static_cast<cuuint64_t>(kH) * kS * kD * 2};
    const cuuint32_t bx[4] = {static_cast<cuuint32_t>(v.box_cols), static_cast<cuuint32_t>(v.box_rows), 1, 1};
    std::copy(d, d + 4, dims), std::copy(st, st + 3, strides), std::copy(bx, bx + 4, box);
  }
  const CUresult r = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, data, dims, strides, box,
                                            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, v.swizzle, v.promo,
                                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "%s: cuTensorMapEncodeTiled failed (%d)\n", v.name, static_cast<int>(r));
    std::exit(1);
  }
  return map;
}

template <class F>
float median_ms(int reps, int4* flush, std::int64_t flush_n, F&& launch) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> t;
  launch();  // warm-up
  for (int r = 0; r < reps; ++r) {
    flush_kernel<<<1024, 256>>>(flush, flush_n);
    cudaEventRecord(e0);
    launch();
    cudaEventRecord(e1);
    check(cudaEventSynchronize(e1), "run");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 15;
  if (argc > 2) kB = std::atoi(argv[2]);
  std::printf("batch %d: %d blocks\n", kB, kB * kH);
  const std::int64_t bytes = static_cast<std::int64_t>(kB) * kH * kS * kD * 2;
  unsigned char *k, *v;
  int4* flush;
  int* sink;
  const std::int64_t flush_bytes = 256LL << 20;
  check(cudaMalloc(&k, bytes), "malloc k");
  check(cudaMalloc(&v, bytes), "malloc v");
  check(cudaMalloc(&flush, flush_bytes), "malloc flush");
  check(cudaMalloc(&sink, 4), "malloc sink");
  cudaMemset(k, 1, bytes);
  cudaMemset(v, 2, bytes);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const double total = 2.0 * bytes;

  // Ceiling: plain 16-byte loads over K then V (two launches, as one stream of 2 x bytes).
  const float ceil_ms = median_ms(reps, flush, flush_bytes / 16, [&] {
    read_kernel<<<sms * 8, 512>>>(reinterpret_cast<const int4*>(k), bytes / 16, sink);
    read_kernel<<<sms * 8, 512>>>(reinterpret_cast<const int4*>(v), bytes / 16, sink);
  });
  std::printf("%-44s %8.3f ms %6.3f TB/s\n", "read ceiling (16-byte loads)", ceil_ms, total / ceil_ms / 1e9);

  constexpr auto P128 = CU_TENSOR_MAP_L2_PROMOTION_L2_128B, P256 = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  constexpr auto SWNONE = CU_TENSOR_MAP_SWIZZLE_NONE, SW128 = CU_TENSOR_MAP_SWIZZLE_128B;
  // Every variant once per round, two rounds, so drift between them shows.
  const Variant variants[] = {
      {"decode today: 2 x 64x64 swizzle-128B", 64, 64, 2, SW128, P128, 3, 2, false, 0},
      {"one 5-D box {64,64,2} swizzle-128B", 64, 64, 2, SW128, P128, 3, 2, false, 0, true},
      {"one 5-D box, 256B promo", 64, 64, 2, SW128, P256, 3, 2, false, 0, true},
      {"128x64 unpadded", 128, 64, 1, SWNONE, P128, 3, 2, false, 0},
      {"bulk 1-D 16 KiB tiles, 3 st", 128, 64, 1, SWNONE, P128, 3, 2, true, 0},
      {"today + 1000 cycles of work per tile", 64, 64, 2, SW128, P128, 3, 2, false, 1000},
      {"today + 1500 cycles of work per tile", 64, 64, 2, SW128, P128, 3, 2, false, 1500},
      {"today + 2500 cycles of work per tile", 64, 64, 2, SW128, P128, 3, 2, false, 2500},
      {"1500 cycles, K released at 300", 64, 64, 2, SW128, P128, 3, 2, false, 1500, false, 300},
      {"2500 cycles, K released at 500", 64, 64, 2, SW128, P128, 3, 2, false, 2500, false, 500},
  };
  for (int round = 0; round < 2; ++round) {
    for (const Variant& var : variants) {
      Args a{};
      a.k_map = make_map(k, var);
      a.v_map = make_map(v, var);
      a.k = k;
      a.v = v;
      a.box_cols = var.box_cols;
      a.box_rows = var.box_rows;
      a.col_boxes = var.col_boxes;
      a.stages = var.stages;
      a.tiles = kS / var.box_rows;
      a.work = var.work;
      a.bulk = var.bulk;
      a.one_box = var.one_box;
      a.k_work = var.k_work;
      a.slot_bytes = var.box_rows * var.box_cols * 2 * var.col_boxes;
      const int ring = 2 * a.slot_bytes * var.stages + 1024;
      const int smem = std::max(ring, var.blocks_per_sm == 1 ? 120 << 10 : 100 << 10);
      check(cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "smem attr");
      int per_sm = 0;
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, stream_kernel, 160, smem);
      const float ms = median_ms(reps, flush, flush_bytes / 16, [&] { stream_kernel<<<kB * kH, 160, smem>>>(a); });
      check(cudaGetLastError(), var.name);
      std::printf("%-44s %8.3f ms %6.3f TB/s  (%.1f%% of ceiling, %d blocks/SM)\n", var.name, ms, total / ms / 1e9,
                  100.0 * ceil_ms / ms, per_sm);
    }
  }
  return 0;
}
