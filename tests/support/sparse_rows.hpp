// Test support: the K or V rows of one KV head, [1, 1, rows, head_dim], in a reserved address range
// of which only rows [mapped_from, rows) are mapped and filled (random normal values), so a
// sequence can hold 2^25 keys while the test touches only those near its queries, and a read of
// any other row faults. The reservation is address space only (PROT_NONE, MAP_NORESERVE).
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <stdexcept>

#include "attnkit/dtype.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit::testing {

class SparseRows {
 public:
  SparseRows(DType dtype, std::int64_t rows, std::int64_t head_dim, std::int64_t mapped_from, std::mt19937_64& rng) {
    const std::size_t row_bytes = static_cast<std::size_t>(head_dim) * dtype_size(dtype);
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    bytes_ = (static_cast<std::size_t>(rows) * row_bytes + page - 1) / page * page;
    base_ = mmap(nullptr, bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base_ == MAP_FAILED) throw std::runtime_error("mmap of the reservation failed");
    mapped_offset_ = static_cast<std::size_t>(mapped_from) * row_bytes / page * page;
    if (mprotect(static_cast<char*>(base_) + mapped_offset_, bytes_ - mapped_offset_, PROT_READ | PROT_WRITE) != 0)
      throw std::runtime_error("mprotect of the mapped rows failed");
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::int64_t i = mapped_from * head_dim; i < rows * head_dim; ++i)
      store_from_float(base_, dtype, static_cast<std::size_t>(i), normal(rng));
    view = TensorView::contiguous(base_, dtype, {1, 1, rows, head_dim});
  }
  ~SparseRows() { munmap(base_, bytes_); }
  SparseRows(const SparseRows&) = delete;
  SparseRows& operator=(const SparseRows&) = delete;

  // The mapped bytes: [mapped_offset(), total_bytes()) of the view's data.
  std::size_t mapped_offset() const { return mapped_offset_; }
  std::size_t total_bytes() const { return bytes_; }

  TensorView view;

 private:
  void* base_ = nullptr;
  std::size_t bytes_ = 0, mapped_offset_ = 0;
};

}  // namespace attnkit::testing
