// tempalloc.hpp - a header-only C++ adapter over the tempalloc C API.
//
// TempallocAllocator<Base> derives from a runtime's temp-allocator class that
// has the shape
//
//     class Base {
//      public:
//       static constexpr size_t kDefaultAlignment = alignof(void*);  // optional
//       virtual void* allocate(size_t size, size_t alignment = kDefaultAlignment);
//       virtual void reset();
//     };
//
// (ExecuTorch's MemoryAllocator has exactly that shape), overrides both, and
// owns a tempalloc allocator (RAII: created in the constructor, destroyed in
// the destructor). allocate() keeps Base's default alignment
// (Base::kDefaultAlignment when Base has one, else alignof(void*)), so
// `temp.allocate(n)` compiles as it does on Base. Pointers from allocate()
// stay valid until reset() or destruction. No exceptions are thrown;
// failures are NULL plus an error code, and last_error_detail() has the
// numbers. The constructors check that the library linked is the one
// tempalloc.h describes (tempalloc_version() == TEMPALLOC_VERSION); when it
// is not, they make no allocator: valid() is false and last_error() is
// TEMPALLOC_ERROR_VERSION_MISMATCH.
//
// Base's other members are Base's: ExecuTorch's size() and base_address() are
// not virtual and describe the buffer passed to Base's constructor, which
// the adapter never uses (tempalloc has no single buffer: each thread bumps
// in a region of its own). Pass (0, nullptr) and they say 0 and nullptr; use
// stats() for what tempalloc holds (bytes_held) and hands out (bytes_live).
//
// Thread safety follows the C API: allocate(), stats(), check() and
// last_error() may be called concurrently from several threads on one object;
// reset(), release(), checkpoint(), rewind() and destruction need exclusive
// use (a checked library, a debug build or one with the capi-checked
// feature, refuses an overlap with
// TEMPALLOC_ERROR_CONCURRENT_USE).
#ifndef TEMPALLOC_HPP
#define TEMPALLOC_HPP

#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "tempalloc.h"

namespace tempalloc {

namespace detail {
// Base::kDefaultAlignment when Base declares one, else alignof(void*) (what
// ExecuTorch's MemoryAllocator uses).
template <class Base, class = void>
struct default_alignment {
  static constexpr size_t value = alignof(void*);
};
template <class Base>
struct default_alignment<Base, std::void_t<decltype(Base::kDefaultAlignment)>> {
  static constexpr size_t value = Base::kDefaultAlignment;
};
}  // namespace detail

template <class Base>
class TempallocAllocator : public Base {
 public:
  // An allocator with a block cache of its own, configured by `config`.
  // Remaining arguments are forwarded to Base's constructor.
  template <class... BaseArgs>
  explicit TempallocAllocator(const tempalloc_config& config,
                              BaseArgs&&... base_args)
      : Base(std::forward<BaseArgs>(base_args)...) {
    if (!version_matches()) return;
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
    if (!version_matches()) return;
    tempalloc_error error = TEMPALLOC_OK;
    handle_ = tempalloc_allocator_create_with_cache(cache, &config, &error);
    record(error);
  }

  ~TempallocAllocator() { tempalloc_allocator_destroy(handle_); }

  TempallocAllocator(const TempallocAllocator&) = delete;
  TempallocAllocator& operator=(const TempallocAllocator&) = delete;
  TempallocAllocator(TempallocAllocator&&) = delete;
  TempallocAllocator& operator=(TempallocAllocator&&) = delete;

  // The alignment allocate() uses when none is given: Base's.
  static constexpr size_t kDefaultAlignment =
      detail::default_alignment<Base>::value;

  // `size` bytes aligned to `alignment` (a power of two), or NULL with the
  // reason in last_error() and the numbers in last_error_detail().
  // Thread-safe.
  void* allocate(size_t size, size_t alignment = kDefaultAlignment) override {
    tempalloc_error_detail detail;
    void* p = tempalloc_allocate_detailed(handle_, size, alignment, &detail);
    if (p == nullptr) {
      record(detail);
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
  void clear_error() {
    std::lock_guard<std::mutex> lock(detail_lock_);
    last_detail_ = tempalloc_error_detail{};
    last_error_.store(TEMPALLOC_OK, std::memory_order_relaxed);
  }

  // The most recent failure of allocate() with its numbers (the limit, the
  // bytes held and requested, the size and alignment); all zeros if none
  // since construction or clear_error(). Failures of other calls have no
  // numbers and are in last_error() only.
  tempalloc_error_detail last_error_detail() const {
    std::lock_guard<std::mutex> lock(detail_lock_);
    return last_detail_;
  }

  // last_error_detail() as the message a Rust caller gets, with its numbers.
  std::string last_error_description() const {
    tempalloc_error_detail detail = last_error_detail();
    std::string text(tempalloc_error_describe(&detail, nullptr, 0), '\0');
    tempalloc_error_describe(&detail, &text[0], text.size() + 1);
    return text;
  }

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
  // A header of another version than the library would call functions whose
  // structs or meaning differ: refuse before the first call that takes one.
  bool version_matches() {
    if (tempalloc_version() == TEMPALLOC_VERSION) return true;
    record(TEMPALLOC_ERROR_VERSION_MISMATCH);
    return false;
  }

  // Stores failures only, so the fast path writes no shared memory.
  void record(tempalloc_error error) const {
    if (error != TEMPALLOC_OK) {
      last_error_.store(error, std::memory_order_relaxed);
    }
  }

  // A failure of allocate(), with its numbers (the slow path: a lock).
  void record(const tempalloc_error_detail& detail) {
    std::lock_guard<std::mutex> lock(detail_lock_);
    last_detail_ = detail;
    last_error_.store(detail.code, std::memory_order_relaxed);
  }

  tempalloc_allocator* handle_ = nullptr;
  mutable std::atomic<tempalloc_error> last_error_{TEMPALLOC_OK};
  mutable std::mutex detail_lock_;
  tempalloc_error_detail last_detail_{};
};

}  // namespace tempalloc

#endif  // TEMPALLOC_HPP
