// A C++ runtime that takes kernel scratch from tempalloc through
// tempalloc.hpp, built by examples/cmake/CMakeLists.txt. Exits non-zero if a
// check fails.
#include <cstdint>
#include <cstdio>

#include "tempalloc.hpp"

namespace {

// The runtime's temp allocator interface (ExecuTorch's MemoryAllocator has
// this shape).
class TempAllocator {
 public:
  static constexpr size_t kDefaultAlignment = alignof(void*);
  virtual ~TempAllocator() = default;
  virtual void* allocate(size_t size, size_t alignment = kDefaultAlignment) = 0;
  virtual void reset() = 0;
};

// A kernel: a prefix sum of `n` values through a 64-byte aligned tile.
bool prefix_sum(TempAllocator& temp, const int* in, int* out, size_t n) {
  auto* tile = static_cast<int64_t*>(temp.allocate(n * sizeof(int64_t), 64));
  if (tile == nullptr) return false;
  int64_t sum = 0;
  for (size_t i = 0; i < n; ++i) tile[i] = sum += in[i];
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<int>(tile[i]);
  return reinterpret_cast<uintptr_t>(tile) % 64 == 0;
}

}  // namespace

int main() {
  tempalloc_config config = tempalloc_config_default();
  config.max_bytes = 64u << 20;
  tempalloc::TempallocAllocator<TempAllocator> temp(config);
  if (!temp.valid()) {
    std::fprintf(stderr, "create: %s\n", temp.last_error_message());
    return 1;
  }
  int in[1000];
  int out[1000];
  for (int i = 0; i < 1000; ++i) in[i] = i;
  uint64_t warm = 0;
  for (int inference = 0; inference < 10; ++inference) {
    if (!prefix_sum(temp, in, out, 1000) || out[999] != 999 * 1000 / 2) {
      std::fprintf(stderr, "inference %d: %s\n", inference, temp.last_error_message());
      return 1;
    }
    temp.reset();
    if (inference == 0) warm = temp.stats().system_allocations;
  }
  if (temp.stats().system_allocations != warm) {
    std::fprintf(stderr, "system allocations after warm-up\n");
    return 1;
  }
  // A refused request says why, with the numbers.
  if (temp.allocate(128u << 20) != nullptr ||
      temp.last_error_detail().limit != (64u << 20)) {
    std::fprintf(stderr, "the limit was not enforced\n");
    return 1;
  }
  std::printf("cmake example: %s; all checks passed\n",
              temp.last_error_description().c_str());
  return 0;
}
