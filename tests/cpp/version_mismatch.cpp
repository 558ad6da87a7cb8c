// The C++ adapter against a header that claims another version than the
// library linked: construction makes no allocator and says why, and every
// call after it is an error code, not a crash.
//
// Built and run by `cargo test --features capi` (tests/all/capi.rs).
#include <cstdio>

#include "tempalloc.h"
// A header from another release: what a stale include path gives.
#undef TEMPALLOC_VERSION
#define TEMPALLOC_VERSION (TEMPALLOC_VERSION_MAJOR * 10000 + 9999)
#include "tempalloc.hpp"

namespace {
class Base {
 public:
  virtual ~Base() = default;
  virtual void* allocate(size_t size, size_t alignment) = 0;
  virtual void reset() {}
};
}  // namespace

int main() {
  tempalloc::TempallocAllocator<Base> temp(tempalloc_config_default());
  if (temp.valid() || temp.last_error() != TEMPALLOC_ERROR_VERSION_MISMATCH) {
    std::fprintf(stderr, "a mismatched header was accepted\n");
    return 1;
  }
  if (temp.allocate(64, 64) != nullptr) {
    std::fprintf(stderr, "an allocator without a handle allocated\n");
    return 1;
  }
  std::printf("version_mismatch: %s; all checks passed\n", temp.last_error_message());
  return 0;
}
