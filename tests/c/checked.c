/* The misuses a checked library (a debug build, or a release build with the
 * `capi-checked` feature) turns into error codes: a double destroy, calls on
 * a destroyed (stale) handle, a handle of the other kind. Built and run
 * against the debug library by `cargo test --features capi`
 * (tests/all/capi.rs) and against the release `capi-checked` library by
 * .ci/api.sh. Exits non-zero on any failure; a library without the checks
 * would crash or corrupt its heap here (glibc: "double free detected"). */
#include <stddef.h>
#include <stdio.h>

#include "tempalloc.h"
#include "check.h"

int main(void) {
  tempalloc_error error = TEMPALLOC_OK;
  tempalloc_stats stats;
  tempalloc_checkpoint_token cp;
  tempalloc_allocator *alloc = tempalloc_allocator_create(NULL, &error);
  tempalloc_allocator *later;
  tempalloc_block_cache *cache = tempalloc_block_cache_create(0, 0, &error);
  CHECK(alloc != NULL && cache != NULL && error == TEMPALLOC_OK);

  CHECK(tempalloc_allocate(alloc, 64, 64, &error) != NULL);
  tempalloc_allocator_destroy(alloc);
  /* The destroyed handle's address is never handed out again, so these
   * calls cannot reach another allocator. */
  later = tempalloc_allocator_create(NULL, &error);
  CHECK(later != NULL && later != alloc);

  /* A stale handle: every call is refused. */
  CHECK(tempalloc_allocate(alloc, 64, 64, &error) == NULL);
  CHECK(error == TEMPALLOC_ERROR_INVALID_HANDLE);
  CHECK(tempalloc_reset(alloc) == TEMPALLOC_ERROR_INVALID_HANDLE);
  CHECK(tempalloc_release(alloc) == TEMPALLOC_ERROR_INVALID_HANDLE);
  CHECK(tempalloc_allocator_stats(alloc, &stats) == TEMPALLOC_ERROR_INVALID_HANDLE);
  CHECK(tempalloc_checkpoint(alloc, &cp) == TEMPALLOC_ERROR_INVALID_HANDLE);
  /* A double destroy does nothing. */
  tempalloc_allocator_destroy(alloc);
  /* A handle of the other kind is refused, and not destroyed. */
  CHECK(tempalloc_reset((tempalloc_allocator *)cache) == TEMPALLOC_ERROR_INVALID_HANDLE);
  tempalloc_allocator_destroy((tempalloc_allocator *)cache);
  CHECK(tempalloc_block_cache_idle_bytes(cache, &error) == 0 && error == TEMPALLOC_OK);
  tempalloc_block_cache_destroy(cache);
  tempalloc_block_cache_destroy(cache);
  CHECK(tempalloc_block_cache_idle_bytes(cache, &error) == 0);
  CHECK(error == TEMPALLOC_ERROR_INVALID_HANDLE);

  /* The live one still works. */
  CHECK(tempalloc_allocate(later, 64, 64, &error) != NULL && error == TEMPALLOC_OK);
  tempalloc_allocator_destroy(later);

  if (failures != 0) {
    fprintf(stderr, "checked: %d check(s) failed\n", failures);
    return 1;
  }
  printf("checked: all checks passed\n");
  return 0;
}
