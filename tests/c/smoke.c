/* The header compiles as strict C99 and the library links from C: a short
 * smoke test of the C API. Built and run by `cargo test --features capi`
 * (tests/all/capi.rs). Exits non-zero on any failure. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tempalloc.h"

static int failures = 0;
#define CHECK(cond)                                                    \
  do {                                                                 \
    if (!(cond)) {                                                     \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
              #cond);                                                  \
      ++failures;                                                      \
    }                                                                  \
  } while (0)

int main(void) {
  tempalloc_error error = TEMPALLOC_ERROR_INTERNAL;
  tempalloc_config config = tempalloc_config_default();
  tempalloc_allocator *alloc;
  tempalloc_stats stats;
  int round;

  config.max_bytes = 8u << 20;
  alloc = tempalloc_allocator_create(&config, &error);
  CHECK(alloc != NULL && error == TEMPALLOC_OK);
  for (round = 0; round < 10; ++round) {
    float *tile = tempalloc_allocate(alloc, 64 * 64 * sizeof(float), 64, &error);
    unsigned char *page = tempalloc_allocate(alloc, 8192, 4096, NULL);
    CHECK(tile != NULL && error == TEMPALLOC_OK && (uintptr_t)tile % 64 == 0);
    CHECK(page != NULL && (uintptr_t)page % 4096 == 0);
    if (tile != NULL) tile[4095] = 1.0f;
    if (page != NULL) memset(page, round, 8192);
    CHECK(tempalloc_reset(alloc) == TEMPALLOC_OK);
  }
  CHECK(tempalloc_allocate(alloc, 16 << 20, 64, &error) == NULL);
  CHECK(error == TEMPALLOC_ERROR_BUDGET_EXCEEDED);
  CHECK(tempalloc_allocate(alloc, 16, 48, &error) == NULL);
  CHECK(error == TEMPALLOC_ERROR_INVALID_ALIGNMENT);
  CHECK(strlen(tempalloc_error_message(error)) > 0);
  CHECK(tempalloc_allocator_stats(alloc, &stats) == TEMPALLOC_OK);
  CHECK(stats.resets == 10 && stats.allocations == 20);
  CHECK(stats.system_allocations == 1);
  CHECK(tempalloc_allocator_stats(NULL, &stats) == TEMPALLOC_ERROR_NULL_ARGUMENT);
  tempalloc_allocator_destroy(alloc);
  tempalloc_allocator_destroy(NULL);

  if (failures != 0) {
    fprintf(stderr, "c smoke: %d check(s) failed\n", failures);
    return 1;
  }
  printf("c smoke: all checks passed\n");
  return 0;
}
