/* The header compiles as strict C99 and the library links from C: a short
 * smoke test of the C API. Built and run by `cargo test --features capi`
 * (tests/all/capi.rs). Exits non-zero on any failure. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tempalloc.h"
#include "check.h"

int main(void) {
  tempalloc_error error = TEMPALLOC_ERROR_INTERNAL;
  tempalloc_config config = tempalloc_config_default();
  tempalloc_allocator *alloc;
  tempalloc_stats stats;
  unsigned long long warm = 0;
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
    if (round == 0) {
      CHECK(tempalloc_allocator_stats(alloc, &stats) == TEMPALLOC_OK);
      warm = stats.system_allocations;
    }
  }
  CHECK(tempalloc_allocate(alloc, 16 << 20, 64, &error) == NULL);
  CHECK(error == TEMPALLOC_ERROR_BUDGET_EXCEEDED);
  CHECK(tempalloc_allocate(alloc, 16, 48, &error) == NULL);
  CHECK(error == TEMPALLOC_ERROR_INVALID_ALIGNMENT);
  CHECK(strlen(tempalloc_error_message(error)) > 0);
  CHECK(tempalloc_allocator_stats(alloc, &stats) == TEMPALLOC_OK);
  CHECK(stats.resets == 10 && stats.allocations == 20);
  /* Memory is taken in the first round only. */
  CHECK(warm >= 1 && stats.system_allocations == warm);
  CHECK(tempalloc_allocator_stats(NULL, &stats) == TEMPALLOC_ERROR_NULL_ARGUMENT);
  CHECK(tempalloc_allocate(NULL, 16, 16, &error) == NULL);
  CHECK(error == TEMPALLOC_ERROR_NULL_ARGUMENT);
  /* The numbers, and the message with them. */
  {
    tempalloc_error_detail detail;
    char message[160];
    size_t len;
    CHECK(tempalloc_allocate_detailed(alloc, 16 << 20, 64, &detail) == NULL);
    CHECK(detail.code == TEMPALLOC_ERROR_BUDGET_EXCEEDED);
    CHECK(detail.requested == (16u << 20) && detail.limit == (8u << 20));
    len = tempalloc_error_describe(&detail, message, sizeof message);
    CHECK(len > 0 && len < sizeof message && strlen(message) == len);
    CHECK(strstr(message, "16777216 bytes requested") != NULL);
    CHECK(tempalloc_allocate_detailed(alloc, 64, 64, &detail) != NULL);
    CHECK(detail.code == TEMPALLOC_OK);
  }

  /* Checkpoints: a kernel's scratch is recycled, the inference's kept. */
  {
    tempalloc_checkpoint_token kernel;
    char *act = tempalloc_allocate(alloc, 256, 64, &error);
    char *first = NULL;
    int round;
    CHECK(act != NULL);
    memset(act, 7, 256);
    for (round = 0; round < 3; ++round) {
      char *tile;
      CHECK(tempalloc_checkpoint(alloc, &kernel) == TEMPALLOC_OK);
      tile = tempalloc_allocate(alloc, 4096, 64, &error);
      CHECK(tile != NULL);
      if (first == NULL) first = tile;
      CHECK(tile == first);
      memset(tile, 1, 4096);
      CHECK(tempalloc_rewind(alloc, kernel) == TEMPALLOC_OK);
      CHECK(tempalloc_rewind(alloc, kernel) == TEMPALLOC_ERROR_CHECKPOINT_CLOSED);
    }
    CHECK(act[0] == 7 && act[255] == 7);
    CHECK(tempalloc_check(alloc) == TEMPALLOC_OK);
  }

  /* A refused rewind says why, each reason with its own code, and changes
   * nothing. */
  {
    tempalloc_checkpoint_token outer, inner, theirs, zeroed;
    tempalloc_allocator *other = tempalloc_allocator_create(NULL, &error);
    CHECK(other != NULL && error == TEMPALLOC_OK);
    memset(&zeroed, 0, sizeof zeroed);
    CHECK(tempalloc_checkpoint(other, &theirs) == TEMPALLOC_OK);
    CHECK(tempalloc_checkpoint(alloc, &outer) == TEMPALLOC_OK);
    CHECK(tempalloc_allocate(alloc, 100, 8, &error) != NULL);
    CHECK(tempalloc_checkpoint(alloc, &inner) == TEMPALLOC_OK);
    CHECK(inner.depth == outer.depth + 1);
    CHECK(tempalloc_rewind(alloc, theirs) == TEMPALLOC_ERROR_FOREIGN_CHECKPOINT);
    CHECK(tempalloc_rewind(alloc, zeroed) == TEMPALLOC_ERROR_FOREIGN_CHECKPOINT);
    CHECK(tempalloc_rewind(other, theirs) == TEMPALLOC_OK);
    CHECK(tempalloc_rewind(alloc, outer) == TEMPALLOC_OK);
    CHECK(tempalloc_rewind(alloc, inner) == TEMPALLOC_ERROR_CHECKPOINT_CLOSED);
    CHECK(tempalloc_checkpoint(alloc, &outer) == TEMPALLOC_OK);
    CHECK(tempalloc_reset(alloc) == TEMPALLOC_OK);
    CHECK(tempalloc_rewind(alloc, outer) == TEMPALLOC_ERROR_STALE_CHECKPOINT);
    CHECK(strstr(tempalloc_error_message(TEMPALLOC_ERROR_FOREIGN_CHECKPOINT), "foreign") != NULL);
    CHECK(strstr(tempalloc_error_message(TEMPALLOC_ERROR_CHECKPOINT_CLOSED), "closed") != NULL);
    tempalloc_allocator_destroy(other);
  }
  tempalloc_allocator_destroy(alloc);
  tempalloc_allocator_destroy(NULL);

  /* Flags are 0 or 1; anything else is refused, not undefined behaviour. */
  config = tempalloc_config_default();
  config.debug_checks = 2;
  CHECK(tempalloc_allocator_create(&config, &error) == NULL);
  CHECK(error == TEMPALLOC_ERROR_INVALID_ARGUMENT);

  if (failures != 0) {
    fprintf(stderr, "c smoke: %d check(s) failed\n", failures);
    return 1;
  }
  printf("c smoke: all checks passed\n");
  return 0;
}
