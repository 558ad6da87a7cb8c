/*
 * tempalloc.h - the C API of tempalloc: fast, aligned scratch memory for
 * inference kernels, recycled all at once.
 *
 * Built from the Rust crate with the `capi` feature (see docs/capi.md):
 *
 *     cargo rustc --release --lib --features capi --crate-type staticlib
 *
 * This header is checked in and kept in step with src/capi.rs by a test
 * (tests/all/capi.rs): every exported function, struct and constant must be
 * declared here with the same types, and nothing else.
 *
 * Rules every function follows:
 *  - NULL is an error code, never a crash: a NULL handle or output struct
 *    gives TEMPALLOC_ERROR_NULL_ARGUMENT; a NULL `error` out parameter is
 *    allowed and ignored; *_destroy(NULL) does nothing.
 *  - No global error state: errors come back as the return value or through
 *    the caller's `error` out parameter.
 *  - No function lets a Rust panic escape (one would be a bug; it becomes
 *    TEMPALLOC_ERROR_INTERNAL).
 *  - Thread safety: tempalloc_allocate and tempalloc_allocator_stats may run
 *    concurrently on one allocator; tempalloc_reset, tempalloc_release and
 *    tempalloc_allocator_destroy need exclusive use of it. Block cache
 *    functions may run concurrently, except its destroy.
 */
#ifndef TEMPALLOC_H
#define TEMPALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A status code: TEMPALLOC_OK or one of the TEMPALLOC_ERROR_* values. */
typedef int32_t tempalloc_error;

#define TEMPALLOC_OK 0
/* A required pointer argument (a handle or an output struct) was NULL. */
#define TEMPALLOC_ERROR_NULL_ARGUMENT 1
/* The alignment is not a power of two. */
#define TEMPALLOC_ERROR_INVALID_ALIGNMENT 2
/* Size rounded up to the alignment exceeds PTRDIFF_MAX. */
#define TEMPALLOC_ERROR_SIZE_OVERFLOW 3
/* The system allocator could not provide the memory. */
#define TEMPALLOC_ERROR_OUT_OF_MEMORY 4
/* The request would pass the hard limit (max_bytes). */
#define TEMPALLOC_ERROR_BUDGET_EXCEEDED 5
/* Mirrors tempalloc::Error::NoTempAllocator; not produced by the C API. */
#define TEMPALLOC_ERROR_NO_TEMP_ALLOCATOR 6
/* tempalloc_rewind got a checkpoint a reset, release or earlier rewind
 * consumed, or one of another allocator. */
#define TEMPALLOC_ERROR_STALE_CHECKPOINT 7
/* A write ran past the end of a scratch buffer (debug_checks; from
 * tempalloc_check). */
#define TEMPALLOC_ERROR_CANARY_CORRUPTED 8
/* A bug in tempalloc: a panic was caught at the boundary. */
#define TEMPALLOC_ERROR_INTERNAL 9
/* A flag field of a struct holds a value other than 0 or 1. */
#define TEMPALLOC_ERROR_INVALID_ARGUMENT 10
/* Debug builds: a destroyed handle, or a handle of another kind, where that
 * can be seen (a magic word in every handle). */
#define TEMPALLOC_ERROR_INVALID_HANDLE 11

/* An allocator (opaque). Pointers it hands out stay valid until the next
 * tempalloc_reset, tempalloc_release or tempalloc_allocator_destroy. */
typedef struct tempalloc_allocator tempalloc_allocator;

/* A block cache several allocators share under one budget (opaque).
 * Allocators made with it hold their own reference to it. */
typedef struct tempalloc_block_cache tempalloc_block_cache;

/* How to build an allocator. Start from tempalloc_config_default(); zero
 * fields mean "the default". */
typedef struct tempalloc_config {
  /* Budget for idle blocks of the allocator's own cache, in bytes. Ignored
   * with a shared cache. */
  size_t max_cached_bytes;
  /* Hard limit on bytes the allocator's own cache takes from the system;
   * 0 = no limit. Ignored with a shared cache. */
  size_t max_bytes;
  /* Size of a thread's first block; 0 = the default (64 KiB). */
  size_t min_block_size;
  /* Requests of at least this many bytes get a block of their own; 0 = never. */
  size_t dedicated_threshold;
  /* Flags are 0 or 1; any other value is TEMPALLOC_ERROR_INVALID_ARGUMENT. */
  /* 1: touch every page of a new block when it is taken from the system. */
  uint8_t prefault;
  /* 1: ask for transparent huge pages on blocks of 2 MiB and more (Linux). */
  uint8_t huge_pages;
  /* 1: canaries after every buffer, checked by tempalloc_check and at every
   * reset (slower). The default follows the library's build (1 in debug). */
  uint8_t debug_checks;
} tempalloc_config;

/* Counters of an allocator (cumulative since creation, except bytes_held and
 * high_water) or of a block cache (request counts stay 0). */
typedef struct tempalloc_stats {
  uint64_t allocations;        /* scratch requests served */
  uint64_t bytes_requested;    /* bytes asked for by those requests */
  uint64_t resets;             /* calls to reset */
  uint64_t system_allocations; /* system calls that reserved memory */
  uint64_t system_frees;       /* system calls that returned memory */
  size_t bytes_held;           /* bytes reserved from the system now */
  size_t high_water;           /* most bytes live at once between resets */
  uint64_t cache_hits;         /* blocks served from a cache */
  uint64_t cache_misses;       /* blocks that needed a system allocation */
  size_t bytes_live;           /* bytes live now; 0 right after a reset */
  size_t window_high_water;    /* most bytes live at once in the last window */
  uint64_t canary_violations;  /* buffers written past their end (debug_checks) */
} tempalloc_stats;

/* A checkpoint (plain data) from tempalloc_checkpoint, consumed by
 * tempalloc_rewind. Copying or forging one is harmless: a rewind refuses a
 * checkpoint it does not know with TEMPALLOC_ERROR_STALE_CHECKPOINT. */
typedef struct tempalloc_checkpoint_token {
  uint64_t allocator; /* the allocator it belongs to */
  size_t depth;       /* checkpoints open when it was taken */
  uint64_t serial;    /* which checkpoint it is */
} tempalloc_checkpoint_token;

/* The default configuration: no idle budget, no hard limit, 64 KiB first
 * blocks, no dedicated blocks, no prefault, no huge pages.
 * Thread safety: any thread, any time. */
tempalloc_config tempalloc_config_default(void);

/* Creates an allocator with a block cache of its own (limits from config).
 * NULL config = tempalloc_config_default(). Returns the handle, or NULL with
 * the code in *error (error may be NULL).
 * Thread safety: any thread, any time. */
tempalloc_allocator *tempalloc_allocator_create(const tempalloc_config *config,
                                                tempalloc_error *error);

/* Creates an allocator over a shared cache, under the cache's limits
 * (config's max_cached_bytes and max_bytes are not used). NULL cache ->
 * NULL + TEMPALLOC_ERROR_NULL_ARGUMENT; NULL config = defaults.
 * Thread safety: any thread, any time, also concurrently with other calls on
 * the cache. */
tempalloc_allocator *tempalloc_allocator_create_with_cache(
    const tempalloc_block_cache *cache, const tempalloc_config *config,
    tempalloc_error *error);

/* Destroys an allocator; every pointer it handed out becomes invalid. NULL
 * does nothing.
 * Thread safety: exclusive use; no other call on alloc in flight or after. */
void tempalloc_allocator_destroy(tempalloc_allocator *alloc);

/* Returns `size` bytes aligned to `alignment` (a power of two), valid until
 * the next reset/release/destroy of alloc; never free it. size 0 gives a
 * non-NULL pointer that must not be dereferenced. On failure returns NULL and
 * stores the code in *error (TEMPALLOC_OK on success; error may be NULL):
 * NULL_ARGUMENT, INVALID_ALIGNMENT, SIZE_OVERFLOW, OUT_OF_MEMORY or
 * BUDGET_EXCEEDED.
 * Thread safety: may be called concurrently from several threads on one
 * allocator, and concurrently with tempalloc_allocator_stats. */
void *tempalloc_allocate(const tempalloc_allocator *alloc, size_t size,
                         size_t alignment, tempalloc_error *error);

/* Recycles everything alloc handed out since the last reset, keeping the
 * blocks. Returns TEMPALLOC_OK or TEMPALLOC_ERROR_NULL_ARGUMENT.
 * Thread safety: exclusive use; no other call on alloc in flight. */
tempalloc_error tempalloc_reset(tempalloc_allocator *alloc);

/* Resets, then gives every block back to the cache (kept idle within its
 * budget, or freed). Returns TEMPALLOC_OK or TEMPALLOC_ERROR_NULL_ARGUMENT.
 * Thread safety: exclusive use; no other call on alloc in flight. */
tempalloc_error tempalloc_release(tempalloc_allocator *alloc);

/* Writes alloc's counters to *out. NULL alloc or out ->
 * TEMPALLOC_ERROR_NULL_ARGUMENT, *out untouched.
 * Thread safety: concurrently with tempalloc_allocate and other stats calls;
 * not with reset, release or destroy. */
tempalloc_error tempalloc_allocator_stats(const tempalloc_allocator *alloc,
                                tempalloc_stats *out);

/* Creates a shared block cache: at most max_cached_bytes idle, at most
 * max_bytes taken from the system in all (0 = no limit). Returns the handle,
 * or NULL with the code in *error (error may be NULL).
 * Thread safety: any thread, any time. */
tempalloc_block_cache *tempalloc_block_cache_create(size_t max_cached_bytes,
                                                    size_t max_bytes,
                                                    tempalloc_error *error);

/* Drops this handle's reference; allocators made with the cache keep
 * working. NULL does nothing.
 * Thread safety: exclusive use of the handle. */
void tempalloc_block_cache_destroy(tempalloc_block_cache *cache);

/* Frees idle blocks, least recently used first, until at most target_bytes
 * are idle; returns the bytes freed. NULL cache -> 0 +
 * TEMPALLOC_ERROR_NULL_ARGUMENT in *error (error may be NULL).
 * Thread safety: concurrently with anything but the handle's destroy. */
size_t tempalloc_block_cache_trim(const tempalloc_block_cache *cache,
                                  size_t target_bytes, tempalloc_error *error);

/* Frees every idle block; returns the bytes freed. As trim with target 0.
 * Thread safety: concurrently with anything but the handle's destroy. */
size_t tempalloc_block_cache_release_all(const tempalloc_block_cache *cache,
                                         tempalloc_error *error);

/* Writes the cache's counters to *out. NULL cache or out ->
 * TEMPALLOC_ERROR_NULL_ARGUMENT, *out untouched.
 * Thread safety: concurrently with anything but the handle's destroy. */
tempalloc_error tempalloc_block_cache_stats(const tempalloc_block_cache *cache,
                                            tempalloc_stats *out);

/* Bytes in the cache's idle blocks now. NULL cache -> 0 +
 * TEMPALLOC_ERROR_NULL_ARGUMENT in *error (error may be NULL).
 * Thread safety: concurrently with anything but the handle's destroy. */
size_t tempalloc_block_cache_idle_bytes(const tempalloc_block_cache *cache,
                                        tempalloc_error *error);

/* Takes a checkpoint into *out: a later tempalloc_rewind with it recycles
 * everything allocated after this call and keeps what came before.
 * Checkpoints nest; a rewind consumes its checkpoint and every later one; a
 * reset or release consumes them all. No system allocation up to 8 open
 * checkpoints. NULL alloc or out -> TEMPALLOC_ERROR_NULL_ARGUMENT.
 * Thread safety: exclusive use of alloc (between kernels). */
tempalloc_error tempalloc_checkpoint(tempalloc_allocator *alloc,
                                     tempalloc_checkpoint_token *out);

/* Recycles everything alloc handed out since checkpoint was taken; earlier
 * pointers stay valid. TEMPALLOC_ERROR_STALE_CHECKPOINT (and no change) for a
 * consumed or foreign checkpoint.
 * Thread safety: exclusive use of alloc. */
tempalloc_error tempalloc_rewind(tempalloc_allocator *alloc,
                                 tempalloc_checkpoint_token checkpoint);

/* With debug_checks = 1: the first buffer written past its end since the
 * last reset, as TEMPALLOC_ERROR_CANARY_CORRUPTED; TEMPALLOC_OK otherwise.
 * Thread safety: concurrently with tempalloc_allocate; not with reset,
 * release, rewind or destroy. */
tempalloc_error tempalloc_check(const tempalloc_allocator *alloc);

/* A static, NUL-terminated description of code; never NULL, never freed.
 * Unknown codes get "unknown tempalloc error code".
 * Thread safety: any thread, any time. */
const char *tempalloc_error_message(tempalloc_error code);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TEMPALLOC_H */
