// A stand-in for ExecuTorch's executorch/runtime/core/memory_allocator.h, with
// the members the docs use and the same signatures (ExecuTorch 1.x): enough
// to compile the C++ snippets of README.md and docs/capi.md in CI
// (tests/all/capi_docs.rs) without ExecuTorch. A bump allocator over the
// constructor's buffer, as ExecuTorch's is.
#pragma once

#include <cstddef>
#include <cstdint>

namespace executorch {
namespace runtime {

class MemoryAllocator {
 public:
  static constexpr size_t kDefaultAlignment = alignof(void*);

  MemoryAllocator(uint32_t size, uint8_t* base_address)
      : begin_(base_address), end_(base_address + size), cur_(base_address), size_(size) {}
  virtual ~MemoryAllocator() = default;

  virtual void* allocate(size_t size, size_t alignment = kDefaultAlignment) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) return nullptr;
    uintptr_t start = (reinterpret_cast<uintptr_t>(cur_) + alignment - 1) & ~(alignment - 1);
    uintptr_t end = start + size;
    if (begin_ == nullptr || end > reinterpret_cast<uintptr_t>(end_)) return nullptr;
    cur_ = reinterpret_cast<uint8_t*>(end);
    return reinterpret_cast<void*>(start);
  }

  template <typename T>
  T* allocateInstance(size_t alignment = alignof(T)) {
    return static_cast<T*>(allocate(sizeof(T), alignment));
  }

  template <typename T>
  T* allocateList(size_t size, size_t alignment = alignof(T)) {
    return static_cast<T*>(allocate(size * sizeof(T), alignment));
  }

  virtual void reset() { cur_ = begin_; }

  uint8_t* base_address() const { return begin_; }
  uint32_t size() const { return size_; }

 private:
  uint8_t* const begin_;
  uint8_t* const end_;
  uint8_t* cur_;
  uint32_t const size_;
};

}  // namespace runtime
}  // namespace executorch
