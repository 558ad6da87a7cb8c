/* CHECK(cond) for the C test programs: counts a failure and says where,
 * and goes on, so one run reports every failed check. */
#ifndef TEMPALLOC_TESTS_CHECK_H
#define TEMPALLOC_TESTS_CHECK_H

#include <stdio.h>

static int failures = 0;
#define CHECK(cond)                                                    \
  do {                                                                 \
    if (!(cond)) {                                                     \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
              #cond);                                                  \
      ++failures;                                                      \
    }                                                                  \
  } while (0)

#endif
