// tempalloc.hpp - a header-only C++ adapter over the tempalloc C API.
//
// TempallocAllocator<Base> derives from a runtime's temp-allocator class that
// has the shape
//
//     class Base {
//      public:
//       virtual void* allocate(size_t size, size_t alignment);
//       virtual void reset();
//     };
//
// (ExecuTorch's MemoryAllocator has exactly that shape), overrides both, and
// owns a tempalloc allocator (RAII: created in the constructor, destroyed in
// the destructor). Pointers from allocate() stay valid until reset() or
// destruction. No exceptions are thrown; failures are NULL plus an error code.
//
// Thread safety follows the C API: allocate(), stats() and last_error() may be
// called concurrently from several threads on one object; reset(), release()
// and destruction need exclusive use.
#ifndef TEMPALLOC_HPP
#define TEMPALLOC_HPP

#include <atomic>
#include <cstddef>
#include <utility>

#include "tempalloc.h"

namespace tempalloc {

template <class Base>
class TempallocAllocator : public Base {
 public:
  // An allocator with a block cache of its own, configured by `config`.
  // Remaining arguments are forwarded to Base's constructor.
  template <class... BaseArgs>
  explicit TempallocAllocator(const tempalloc_config& config,
                              BaseArgs&&... base_args)
      : Base(std::forward<BaseArgs>(base_args)...) {
    tempalloc_error error = TEMPALLOC_OK;
    handle_ = tempalloc_allocator_create(&config, &error);
    record(error);
  }

  // An allocator over a shared block cache (it keeps its own reference, so
  // the cache handle may be destroyed first). A NULL cache leaves the object
  // without an allocator: valid() is false, last_error() says why, and
  // allocate() returns NULL.
  template <class... BaseArgs>
  TempallocAllocator(const tempalloc_block_cache* cache,
                     const tempalloc_config& config, BaseArgs&&... base_args)
      : Base(std::forward<BaseArgs>(base_args)...) {
    tempalloc_error error = TEMPALLOC_OK;
    handle_ = tempalloc_allocator_create_with_cache(cache, &config, &error);
    record(error);
  }

  ~TempallocAllocator() { tempalloc_allocator_destroy(handle_); }

  TempallocAllocator(const TempallocAllocator&) = delete;
  TempallocAllocator& operator=(const TempallocAllocator&) = delete;
  TempallocAllocator(TempallocAllocator&&) = delete;
  TempallocAllocator& operator=(TempallocAllocator&&) = delete;

  // `size` bytes aligned to `alignment` (a power of two), or NULL with the
  // reason in last_error(). Thread-safe.
  void* allocate(size_t size, size_t alignment) override {
    tempalloc_error error = TEMPALLOC_OK;
    void* p = tempalloc_allocate(handle_, size, alignment, &error);
    if (p == nullptr) {
      record(error);
    }
    return p;
  }

  // Recycles everything handed out since the last reset. Exclusive use.
  void reset() override {
    record(tempalloc_reset(handle_));
  }

  // Resets, then gives every block back to the cache (memory pressure).
  // Exclusive use.
  void release() { record(tempalloc_release(handle_)); }

  // Where the allocator is now, for rewind() (a zeroed token and
  // last_error() set on failure). Exclusive use: between kernels.
  tempalloc_checkpoint_token checkpoint() {
    tempalloc_checkpoint_token cp{};
    record(tempalloc_checkpoint(handle_, &cp));
    return cp;
  }

  // Recycles everything handed out since `cp`; earlier buffers stay valid.
  // Returns false (and sets last_error()) for a consumed or foreign token.
  // Exclusive use.
  bool rewind(tempalloc_checkpoint_token cp) {
    tempalloc_error error = tempalloc_rewind(handle_, cp);
    record(error);
    return error == TEMPALLOC_OK;
  }

  // With config.debug_checks = 1: the first buffer written past its end
  // since the last reset (TEMPALLOC_ERROR_CANARY_CORRUPTED), else TEMPALLOC_OK.
  tempalloc_error check() const { return tempalloc_check(handle_); }

  // The code of this object's most recent failure (TEMPALLOC_OK if none since
  // construction or clear_error()). Per object, never shared with others;
  // when threads fail concurrently, one of their codes.
  tempalloc_error last_error() const {
    return last_error_.load(std::memory_order_relaxed);
  }
  const char* last_error_message() const {
    return tempalloc_error_message(last_error());
  }
  void clear_error() { last_error_.store(TEMPALLOC_OK, std::memory_order_relaxed); }

  // The allocator's counters (all zero, and last_error() set, without one).
  tempalloc_stats stats() const {
    tempalloc_stats s{};
    record(tempalloc_allocator_stats(handle_, &s));
    return s;
  }

  // Whether construction produced an allocator.
  bool valid() const { return handle_ != nullptr; }

  // The underlying C handle, for the C API (still owned by this object).
  tempalloc_allocator* handle() const { return handle_; }

 private:
  // Stores failures only, so the fast path writes no shared memory.
  void record(tempalloc_error error) const {
    if (error != TEMPALLOC_OK) {
      last_error_.store(error, std::memory_order_relaxed);
    }
  }

  tempalloc_allocator* handle_ = nullptr;
  mutable std::atomic<tempalloc_error> last_error_{TEMPALLOC_OK};
};

}  // namespace tempalloc

#endif  // TEMPALLOC_HPP
