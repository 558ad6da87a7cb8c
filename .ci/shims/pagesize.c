/*
 * LD_PRELOAD shims for .ci/platforms.sh: the page size seen by
 * the calls tempalloc makes, on a 4 KiB-page Linux kernel.
 *
 * Built twice from this file (gcc -shared -fPIC -ldl):
 *
 * -DSHIM_PAGE=16384 (or 65536): the kernel acts like one with pages of that
 *   size for these calls: sysconf(_SC_PAGESIZE) and getpagesize() return it;
 *   mmap/mmap64 return addresses aligned to it (over-map and trim) and round
 *   lengths up to it; munmap refuses an address that is not a multiple of it
 *   and rounds the length up, as a kernel does (Rust's std unmaps its signal
 *   stacks with a length of SIGSTKSZ plus a page); mprotect and madvise
 *   refuse (EINVAL) an address *or a length* that is not a multiple of it.
 *   A kernel rounds those lengths up; refusing them is stricter on purpose:
 *   every commit and decommit tempalloc makes must be whole pages. With
 *   PAGESIZE_SHIM_ROUND_LENGTHS set, mprotect and madvise round lengths up
 *   as a kernel does and refuse only misaligned addresses.
 *
 * -DSHIM_OBSERVE: changes nothing; records the addresses and lengths of
 *   mprotect calls that make memory writable (commits) and of madvise calls
 *   (decommits, huge-page hints), and prints at exit the largest power of two
 *   all of them are multiples of: the page size the process actually used.
 *
 * Both print one line at exit with what they saw (to stderr; the observer
 * to the file PAGEWATCH_LOG names, if set); the enforcing one also prints
 * its first three refusals, and nothing at all if PAGESIZE_SHIM_QUIET is set. glibc's own
 * calls (malloc's arenas, thread stacks) bypass the PLT and are not seen,
 * so malloc keeps working on the real 4 KiB pages.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static void say_to(int fd, const char *fmt, va_list ap) {
    char buf[512];
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    if (n > 0) {
        ssize_t ignored = write(fd, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
        (void)ignored;
    }
}

__attribute__((unused)) static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    say_to(2, fmt, ap);
    va_end(ap);
}

/* The system calls themselves: no recursion into the shim, no libc state. */
static int raw_mprotect(void *a, size_t l, int p) { return (int)syscall(SYS_mprotect, a, l, p); }
static int raw_madvise(void *a, size_t l, int adv) { return (int)syscall(SYS_madvise, a, l, adv); }

#ifdef SHIM_OBSERVE

static unsigned long seen_bits; /* OR of every address and length */
static unsigned long seen_calls;

static void seen(void *a, size_t l) {
    __atomic_fetch_or(&seen_bits, (unsigned long)a | l, __ATOMIC_RELAXED);
    __atomic_fetch_add(&seen_calls, 1, __ATOMIC_RELAXED);
}

int mprotect(void *a, size_t l, int p) {
    if (p & PROT_WRITE)
        seen(a, l);
    return raw_mprotect(a, l, p);
}

int madvise(void *a, size_t l, int adv) {
    seen(a, l);
    return raw_madvise(a, l, adv);
}

/* The line goes to the file PAGEWATCH_LOG names (appended), else stderr. */
static void report_line(const char *fmt, ...) {
    const char *path = getenv("PAGEWATCH_LOG");
    int fd = path ? open(path, O_WRONLY | O_APPEND | O_CREAT, 0644) : 2;
    va_list ap;
    va_start(ap, fmt);
    say_to(fd < 0 ? 2 : fd, fmt, ap);
    va_end(ap);
    if (path && fd >= 0)
        close(fd);
}

__attribute__((destructor)) static void report(void) {
    unsigned long bits = __atomic_load_n(&seen_bits, __ATOMIC_RELAXED);
    unsigned long calls = __atomic_load_n(&seen_calls, __ATOMIC_RELAXED);
    if (calls == 0) {
        report_line("pagewatch[%d]: no commit or madvise calls\n", (int)getpid());
        return;
    }
    unsigned long page = bits & -bits; /* lowest set bit */
    report_line("pagewatch[%d]: %lu commit/madvise calls; every address and length is a multiple of %lu bytes\n",
        (int)getpid(), calls, page > (1UL << 30) ? (1UL << 30) : page);
}

#else /* the enforcing shim */

#ifndef SHIM_PAGE
#define SHIM_PAGE 16384
#endif
#define MASK ((size_t)SHIM_PAGE - 1)

static unsigned long ok_calls, refused_calls, refused_len_only;

static void *raw_mmap(void *a, size_t l, int p, int f, int fd, off_t o) {
    return (void *)syscall(SYS_mmap, a, l, p, f, fd, o);
}
static int raw_munmap(void *a, size_t l) { return (int)syscall(SYS_munmap, a, l); }

static int misaligned(const void *a) { return ((uintptr_t)a & MASK) != 0; }

/* Whether a length refuses the call (0: it is rounded up instead). */
static int bad_length(size_t l) {
    static int round = -1;
    if (round < 0)
        round = getenv("PAGESIZE_SHIM_ROUND_LENGTHS") != NULL;
    return !round && (l & MASK) != 0;
}

static int refuse(const char *call, void *a, size_t l, int arg) {
    unsigned long n = __atomic_fetch_add(&refused_calls, 1, __ATOMIC_RELAXED);
    if (!misaligned(a))
        __atomic_fetch_add(&refused_len_only, 1, __ATOMIC_RELAXED);
    if (n < 3 && !getenv("PAGESIZE_SHIM_QUIET"))
        say("pagesize shim (%d): refused %s(%p, %zu, %d): %s is not a multiple of %d\n",
            SHIM_PAGE, call, a, l, arg, misaligned(a) ? "address" : "length", SHIM_PAGE);
    errno = EINVAL;
    return -1;
}

long sysconf(int name) {
    static long (*real)(int);
    if (name == _SC_PAGESIZE)
        return SHIM_PAGE;
    if (!real)
        real = (long (*)(int))dlsym(RTLD_NEXT, "sysconf");
    return real(name);
}

int getpagesize(void) { return SHIM_PAGE; }

void *mmap(void *a, size_t l, int p, int f, int fd, off_t o) {
    if (f & MAP_HUGETLB)
        return raw_mmap(a, l, p, f, fd, o);
    if (l == 0 || l > SIZE_MAX - 2 * SHIM_PAGE || ((size_t)o & MASK) ||
        ((f & (MAP_FIXED | MAP_FIXED_NOREPLACE)) && misaligned(a))) {
        errno = EINVAL;
        return MAP_FAILED;
    }
    size_t len = (l + MASK) & ~MASK;
    if (f & (MAP_FIXED | MAP_FIXED_NOREPLACE))
        return raw_mmap(a, len, p, f, fd, o);
    /* Reserve room for an aligned start, map the request over it there (a
     * file's offset stays at the start), give back the rest. */
    size_t room = len + SHIM_PAGE - (size_t)getauxval(AT_PAGESZ);
    char *r = raw_mmap(a, room, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED)
        return MAP_FAILED;
    char *start = (char *)(((uintptr_t)r + MASK) & ~(uintptr_t)MASK);
    void *m = raw_mmap(start, len, p, f | MAP_FIXED, fd, o);
    if (m == MAP_FAILED) {
        int e = errno;
        raw_munmap(r, room);
        errno = e;
        return MAP_FAILED;
    }
    if (start > r)
        raw_munmap(r, (size_t)(start - r));
    if (r + room > start + len)
        raw_munmap(start + len, (size_t)(r + room - (start + len)));
    __atomic_fetch_add(&ok_calls, 1, __ATOMIC_RELAXED);
    return start;
}

void *mmap64(void *a, size_t l, int p, int f, int fd, off_t o) __attribute__((alias("mmap")));

int munmap(void *a, size_t l) {
    if (misaligned(a) || l == 0)
        return refuse("munmap", a, l, 0);
    __atomic_fetch_add(&ok_calls, 1, __ATOMIC_RELAXED);
    return raw_munmap(a, (l + MASK) & ~MASK);
}

int mprotect(void *a, size_t l, int p) {
    if (misaligned(a) || bad_length(l))
        return refuse("mprotect", a, l, p);
    __atomic_fetch_add(&ok_calls, 1, __ATOMIC_RELAXED);
    return raw_mprotect(a, (l + MASK) & ~MASK, p);
}

int madvise(void *a, size_t l, int adv) {
    if (misaligned(a) || bad_length(l))
        return refuse("madvise", a, l, adv);
    __atomic_fetch_add(&ok_calls, 1, __ATOMIC_RELAXED);
    return raw_madvise(a, (l + MASK) & ~MASK, adv);
}

__attribute__((destructor)) static void report(void) {
    if (getenv("PAGESIZE_SHIM_QUIET"))
        return;
    say("pagesize shim (%d)[%d]: %lu calls served, %lu refused (%lu for the length alone)\n",
        SHIM_PAGE, (int)getpid(), __atomic_load_n(&ok_calls, __ATOMIC_RELAXED),
        __atomic_load_n(&refused_calls, __ATOMIC_RELAXED),
        __atomic_load_n(&refused_len_only, __ATOMIC_RELAXED));
}

#endif
