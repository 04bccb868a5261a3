// Shared device helpers (decode and prefill): Ampere+ asynchronous 16-byte global->shared copies.
// A copy with valid == false writes 16 zero bytes and reads nothing (cp.async's src-size 0).
#pragma once
#include <cstdint>

namespace attnkit::cuda_common {

__device__ __forceinline__ void cp_async_16(void* shared_dst, const void* global_src, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_src), "r"(src_bytes)
               : "memory");
}
// The same with an L2 cache policy (createpolicy's 64-bit handle) for the line it brings in.
__device__ __forceinline__ void cp_async_16(void* shared_dst, const void* global_src, bool valid, std::uint64_t l2_policy) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::128B [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(global_src),
               "r"(src_bytes), "l"(l2_policy)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
// Wait until at most `pending` groups are in flight (pending is a run-time value < 4).
__device__ __forceinline__ void cp_async_wait_dynamic(int pending) {
  switch (pending) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    default: cp_async_wait<3>(); break;
  }
}

}  // namespace attnkit::cuda_common
