// Host memory for the CPU bench's inputs and its read probe: 2 MiB-aligned and advised onto huge
// pages (cpu::advise_huge_pages, before the first touch) where asked and at least 2 MiB long, as an
// engine would place its KV cache; else 64-byte aligned. The caller touches the pages (the inputs
// at once, the probe from the thread that reads each slice).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "attnkit/cpu.hpp"
#include "attnkit/error.hpp"

namespace attnkit::bench {

struct HostBytes {
  struct Free {
    void operator()(std::uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<std::uint8_t, Free> memory;
  std::size_t bytes = 0;
  HostBytes(std::size_t n, bool huge_pages) : bytes(n) {
    constexpr std::size_t kHugePage = std::size_t{2} << 20;
    huge_pages = huge_pages && n >= kHugePage;  // a small q or output would pin a whole huge page
    const std::size_t align = huge_pages ? kHugePage : 64;
    const std::size_t allocated = std::max(align, (n + align - 1) / align * align);
    memory.reset(static_cast<std::uint8_t*>(std::aligned_alloc(align, allocated)));
    if (memory == nullptr)
      fail("bench", "cannot allocate " + std::to_string(n >> 20) + " MiB",
           "free memory, or bench smaller shapes (a smaller --ceiling-mib for the read probe)");
    if (huge_pages) cpu::advise_huge_pages(memory.get(), allocated);
  }
  std::uint8_t* data() const { return memory.get(); }
  std::size_t size() const { return bytes; }
};

}  // namespace attnkit::bench
