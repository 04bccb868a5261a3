// The CPU read-bandwidth probe (bench/cpu_ceilings.cpp): every thread XOR-reduces its slice of a
// buffer above the last-level cache in one of patterns() access patterns. The ceiling is its best
// pass over patterns and page kinds; the same probe then runs beside each decode repetition
// (bench/run_cpu.cpp), so a decode is also held against what DRAM gave at that moment, which on
// a shared VM moves by 2x within a sweep.
#pragma once
#include <cstdint>

#include "bench.hpp"
#include "host_bytes.hpp"

namespace attnkit::bench {

class ReadProbe {
 public:
  ReadProbe(std::size_t slice, int threads, bool huge_pages);
  static int patterns();
  double pass(int pattern);  // bytes/s of one pass over the whole buffer

 private:
  HostBytes buffer_;
  std::size_t slice_;
  int threads_;
  volatile std::uint64_t sink_ = 0;
};

// The best pass, and the probe that gave it.
struct ReadCeiling {
  double value = 0;  // bytes/s
  int pattern = 0;
  bool huge_pages = false;
  std::size_t slice = 0;
  int threads = 1;
};
ReadCeiling cpu_read_ceiling(const Options& options);

}  // namespace attnkit::bench
