/*
 * Self-check of the enforcing page-size shim (.ci/shims/pagesize.c), run
 * under it by .ci/platforms.sh before the tests: if the shim stopped being
 * loaded or stopped refusing, the tests that run under it would prove
 * nothing. Usage: PAGESIZE_SHIM_QUIET=1 LD_PRELOAD=pagesize16k.so pagesize_check 16384
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static int failures;

static void expect(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "pagesize_check: FAILED: %s\n", what);
        failures++;
    }
}

static int refused(int r) { return r == -1 && errno == EINVAL; }

int main(int argc, char **argv) {
    long page = argc > 1 ? atol(argv[1]) : 16384;
    expect(sysconf(_SC_PAGESIZE) == page, "sysconf(_SC_PAGESIZE) is the shim's page");
    expect(getpagesize() == page, "getpagesize() is the shim's page");
    for (int i = 0; i < 8; i++) {
        /* Odd lengths, so a 4 KiB kernel alone would hand out 4 KiB-aligned
         * neighbours. */
        size_t len = (size_t)(i + 1) * 4096 + 1;
        char *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        expect(p != MAP_FAILED, "mmap succeeds");
        if (p == MAP_FAILED)
            continue;
        expect((uintptr_t)p % (uintptr_t)page == 0, "mmap returns an address aligned to the page");
        expect(refused(mprotect(p + 4096, (size_t)page, PROT_READ | PROT_WRITE)),
               "mprotect at a 4 KiB offset is refused");
        expect(refused(mprotect(p, 4096, PROT_READ | PROT_WRITE)), "mprotect of 4 KiB is refused");
        int writable = mprotect(p, (size_t)page, PROT_READ | PROT_WRITE) == 0;
        expect(writable, "mprotect of a page succeeds");
        if (writable) {
            p[0] = 1;
            p[page - 1] = 1;
        }
        expect(refused(madvise(p + 4096, (size_t)page, MADV_DONTNEED)),
               "madvise at a 4 KiB offset is refused");
        expect(refused(madvise(p, 4096, MADV_DONTNEED)), "madvise of 4 KiB is refused");
        expect(madvise(p, (size_t)page, MADV_DONTNEED) == 0, "madvise of a page succeeds");
        expect(!writable || p[0] == 0, "MADV_DONTNEED went through to the kernel");
        expect(refused(munmap(p + 4096, (size_t)page)), "munmap at a 4 KiB offset is refused");
        expect(munmap(p, len) == 0, "munmap of the mapping (length rounded up) succeeds");
    }
    /* malloc bypasses the shim (glibc's internal calls): large blocks still work. */
    char *big = malloc(1 << 20);
    expect(big != NULL, "malloc of 1 MiB works");
    free(big);
    if (failures)
        return 1;
    printf("pagesize_check: the shim acts as a %ld-byte-page kernel\n", page);
    return 0;
}
