// The three temp allocators the runner compares, each behind one counting
// decorator so all three are measured the same way:
//
//   tempalloc   tempalloc::TempallocAllocator<MemoryAllocator> (include/tempalloc.hpp)
//   malloc      ExecuTorch's MallocMemoryAllocator (a malloc per request, freed at reset)
//   et-caching  the released CPUCachingAllocator, from the executorch wheel's
//               _llm_runner extension (its header is not in the wheel): the
//               object is built by the library's own constructor and called
//               through its own vtable, as ExecuTorch's LLM runner uses it
#ifndef TEMPALLOC_ET_ALLOCATORS_HPP
#define TEMPALLOC_ET_ALLOCATORS_HPP

#include <executorch/extension/memory_allocator/malloc_memory_allocator.h>
#include <executorch/runtime/core/memory_allocator.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "hooks.hpp"
#include "tempalloc.hpp"

namespace et_runner {

using executorch::runtime::MemoryAllocator;

// What the runtime did with the temp allocator, and what it held.
struct TempCounts {
  uint64_t requests = 0;
  uint64_t bytes = 0;
  uint64_t resets = 0;
  uint64_t nanos = 0;  // inside allocate and reset
};

// Forwards to `inner` and counts. `allocate` may run on the threadpool's
// threads (the C++ adapter allows it), so its counters are atomic.
class Counted final : public MemoryAllocator {
 public:
  explicit Counted(MemoryAllocator* inner) : MemoryAllocator(0, nullptr), inner_(inner) {}

  void* allocate(size_t size, size_t alignment) override {
    auto t0 = std::chrono::steady_clock::now();
    void* p;
    {
      hooks::InTemp in;
      p = inner_->allocate(size, alignment);
    }
    add_nanos(t0);
    requests_.fetch_add(1, std::memory_order_relaxed);
    bytes_.fetch_add(size, std::memory_order_relaxed);
    if (on_request_) on_request_(size);
    return p;
  }

  // Exclusive use (the runtime calls it between kernels).
  void reset() override {
    if (before_reset_) before_reset_();
    auto t0 = std::chrono::steady_clock::now();
    {
      hooks::InTemp in;
      inner_->reset();
    }
    add_nanos(t0);
    resets_++;
  }

  TempCounts counts() const {
    return {requests_.load(std::memory_order_relaxed), bytes_.load(std::memory_order_relaxed), resets_,
            nanos_.load(std::memory_order_relaxed)};
  }

  // Called before every reset, while the ending window's scratch is held.
  void (*before_reset_)() = nullptr;
  // Called after every request (the per-call survey).
  void (*on_request_)(size_t) = nullptr;

 private:
  void add_nanos(std::chrono::steady_clock::time_point t0) {
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
    nanos_.fetch_add(static_cast<uint64_t>(ns.count()), std::memory_order_relaxed);
  }

  MemoryAllocator* inner_;
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> nanos_{0};
  uint64_t resets_ = 0;
};

// One of the three, ready to be wrapped in Counted.
class TempAllocator {
 public:
  virtual ~TempAllocator() = default;
  virtual MemoryAllocator* get() = 0;
  // Bytes it holds beyond what the hooks see as temp heap (mapped regions).
  virtual size_t mapped_bytes() const { return 0; }
};

class Tempalloc final : public TempAllocator {
 public:
  explicit Tempalloc(const tempalloc_config& config) : temp_(config, 0u, nullptr) {}
  MemoryAllocator* get() override { return &temp_; }
  size_t mapped_bytes() const override { return temp_.stats().bytes_held; }
  bool valid() const { return temp_.valid(); }
  const char* error() const { return temp_.last_error_message(); }

 private:
  tempalloc::TempallocAllocator<MemoryAllocator> temp_;
};

class Malloc final : public TempAllocator {
 public:
  MemoryAllocator* get() override { return &temp_; }

 private:
  executorch::extension::MallocMemoryAllocator temp_;
};

// The released CPUCachingAllocator, built in place by its own constructor.
class EtCaching final : public TempAllocator {
 public:
  // `ctor`/`dtor`: the library's complete-object constructor and destructor.
  using Ctor = void (*)(void*, uint32_t);
  using Dtor = void (*)(void*);
  EtCaching(Ctor ctor, Dtor dtor, uint32_t max_bytes) : dtor_(dtor) { ctor(storage_, max_bytes); }
  ~EtCaching() override { dtor_(storage_); }
  MemoryAllocator* get() override { return reinterpret_cast<MemoryAllocator*>(storage_); }

 private:
  Dtor dtor_;
  // Larger than the class (a MemoryAllocator, two unordered_maps, a mutex
  // and two sizes), aligned like any object.
  alignas(64) unsigned char storage_[4096];
};

}  // namespace et_runner

#endif  // TEMPALLOC_ET_ALLOCATORS_HPP
