// System allocations, counted where every library in the process makes
// them: hooks.cpp defines malloc, calloc, realloc, free, posix_memalign,
// aligned_alloc, memalign and mmap in the executable, so they interpose on
// every shared library's calls (ExecuTorch's, libstdc++'s operator new, the
// Rust standard library's and tempalloc's own), count, and forward to glibc.
#ifndef TEMPALLOC_ET_HOOKS_HPP
#define TEMPALLOC_ET_HOOKS_HPP

#include <cstddef>
#include <cstdint>

namespace hooks {

// Calls that reserved memory from the system (the malloc family and mmap),
// every thread, since the process started.
uint64_t system_allocations();

// The same calls made inside an InTemp scope: by the temp allocator.
uint64_t temp_system_allocations();

// Heap bytes (malloc_usable_size) reserved minus returned by calls made
// inside an InTemp scope: what a temp allocator that takes its memory from
// malloc holds (its blocks and its bookkeeping), by the same measure for
// every allocator. mmap'd memory is not in it.
int64_t temp_heap_bytes();

// Marks the calling thread as inside the temp allocator for its lifetime.
class InTemp {
 public:
  InTemp();
  ~InTemp();
  InTemp(const InTemp&) = delete;
  InTemp& operator=(const InTemp&) = delete;
};

}  // namespace hooks

#endif  // TEMPALLOC_ET_HOOKS_HPP
