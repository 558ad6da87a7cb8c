// See hooks.hpp. glibc's own entry points (__libc_malloc and friends, and
// the mmap system call) do the work, so nothing here allocates.
#include "hooks.hpp"

#include <malloc.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

extern "C" void* __libc_malloc(size_t);
extern "C" void* __libc_calloc(size_t, size_t);
extern "C" void* __libc_realloc(void*, size_t);
extern "C" void __libc_free(void*);
extern "C" void* __libc_memalign(size_t, size_t);

namespace {

std::atomic<uint64_t> g_allocations{0};
std::atomic<uint64_t> g_temp_allocations{0};
std::atomic<int64_t> g_temp_heap{0};
// constinit and trivially destructible: readable from inside malloc, at
// any point of a thread's life.
thread_local int t_in_temp = 0;

void count() {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (t_in_temp != 0) g_temp_allocations.fetch_add(1, std::memory_order_relaxed);
}

// Counts one reservation of `p` and, inside the temp allocator, its bytes.
void* counted(void* p) {
  if (p != nullptr) {
    count();
    if (t_in_temp != 0) {
      g_temp_heap.fetch_add(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
    }
  }
  return p;
}

void uncounted(void* p) {
  if (p != nullptr && t_in_temp != 0) {
    g_temp_heap.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  }
}

}  // namespace

namespace hooks {

uint64_t system_allocations() { return g_allocations.load(std::memory_order_relaxed); }
uint64_t temp_system_allocations() { return g_temp_allocations.load(std::memory_order_relaxed); }
int64_t temp_heap_bytes() { return g_temp_heap.load(std::memory_order_relaxed); }
InTemp::InTemp() { ++t_in_temp; }
InTemp::~InTemp() { --t_in_temp; }

}  // namespace hooks

extern "C" {

void* malloc(size_t n) { return counted(__libc_malloc(n)); }
void* calloc(size_t n, size_t size) { return counted(__libc_calloc(n, size)); }
void free(void* p) {
  uncounted(p);
  __libc_free(p);
}
void* realloc(void* p, size_t n) {
  uncounted(p);
  return counted(__libc_realloc(p, n));
}
void* memalign(size_t align, size_t n) { return counted(__libc_memalign(align, n)); }
void* aligned_alloc(size_t align, size_t n) { return counted(__libc_memalign(align, n)); }
int posix_memalign(void** out, size_t align, size_t n) {
  if (align < sizeof(void*) || (align & (align - 1)) != 0) {
    return EINVAL;
  }
  void* p = counted(__libc_memalign(align, n));
  if (p == nullptr) {
    return ENOMEM;
  }
  *out = p;
  return 0;
}

// tempalloc reserves its regions with mmap: a system allocation too.
void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  long r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);
  if (r == -1) {
    return MAP_FAILED;
  }
  count();
  return reinterpret_cast<void*>(r);
}
void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off_t off)
    __attribute__((alias("mmap")));

}  // extern "C"
