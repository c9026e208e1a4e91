// glibc malloc settings for a process that builds and drops large op graphs: vramsim's main() and
// vramsim_bench's (so that the benchmarks time predictions as the CLI runs them). No effect under another C
// library or allocator.
#pragma once

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace vramsim {

// A prediction builds and drops graphs of tens of megabytes (a plan does it per configuration): with
// glibc's defaults their large vectors are mmap'ed and unmapped each time and the heap top is trimmed after
// each, so every prediction faults its pages in again (a tenth of predict's time, profiled on the
// quick-start step). Keep freed memory in the heap instead: what a process holds stays what its largest
// prediction needed. Fastbins are turned off (M_MXFAST 0): a graph is hundreds of thousands of small
// strings and vectors, and each free of a large block (a graph's arrays) made glibc consolidate every
// fastbin chunk (malloc_consolidate: a tenth of the issue-40 one-GPU plan's time under perf; 10 % less CPU
// without, bench/RESULTS.md). Small blocks still go through glibc's per-thread cache first.
// (glibc's mallopt, malloc/malloc.c.)
inline void tune_malloc_for_graphs() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 16 << 20);
  mallopt(M_MXFAST, 0);
#endif
}

}  // namespace vramsim
