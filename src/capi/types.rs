//! The structs the C API fills and reads, and their conversions.

// The docs link to the C API's other items by their bare names, not by
// paths: cbindgen copies these comments into include/tempalloc.h, where a
// C reader would see `crate::capi::` in every link. Docs builds only: the
// code imports what it uses.
#[cfg(doc)]
#[allow(unused_imports)]
use super::*;

use super::{
    TEMPALLOC_ERROR_BUDGET_EXCEEDED, TEMPALLOC_ERROR_INVALID_ALIGNMENT,
    TEMPALLOC_ERROR_INVALID_ARGUMENT, TEMPALLOC_ERROR_OUT_OF_MEMORY, TEMPALLOC_ERROR_SIZE_OVERFLOW,
    code, tempalloc_error,
};
use crate::caching::CheckpointParts;
use crate::{CachingConfig, Error, Stats};

/// How to build an allocator. Start from [`tempalloc_config_default`] and
/// change the fields you need; zero fields mean "the default".
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct tempalloc_config {
    /// Budget for idle memory of the allocator's own cache, in bytes: what it
    /// keeps for reuse after a release rather than give back to the system.
    /// Ignored with a shared cache.
    pub idle_budget: usize,
    /// Hard limit on all memory the allocator takes from the system; 0
    /// means no limit. Honoured with a shared cache too: the allocator's own
    /// limit within the cache's (a session's cap within the sessions'
    /// budget). See [`CachingConfig::max_bytes`] for the rule it serves.
    pub max_bytes: usize,
    /// The least memory a thread's region makes usable when it takes a
    /// chunk (its first commit, or heap block); 0, the default, means what
    /// the region's first request needs, in whole pages.
    pub min_block_size: usize,
    /// Requests of at least this many bytes get a block of their own; 0
    /// means never.
    pub dedicated_threshold: usize,
    /// 1: touch every page of a new block when it is taken from the system;
    /// 0: don't. Any other value is [`TEMPALLOC_ERROR_INVALID_ARGUMENT`].
    pub prefault: u8,
    /// 1: align reservations (and blocks of a huge page and more) to the
    /// transparent huge page size the kernel reports and ask for huge pages
    /// on them (Linux and Android; 2 MiB at 4 KiB pages); 0: don't. Any
    /// other value is an error.
    pub huge_pages: u8,
    /// 1: canaries after every buffer and poison on reset, checked by
    /// [`tempalloc_check`] and at every reset (slower); 0: off, the default
    /// in every build of the library. Any other value is an error.
    pub debug_checks: u8,
}

/// A C flag: 0 or 1, anything else an error (C may hand us any byte).
fn flag(value: u8) -> Result<bool, tempalloc_error> {
    match value {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(TEMPALLOC_ERROR_INVALID_ARGUMENT),
    }
}

impl tempalloc_config {
    pub(super) fn to_config(self) -> Result<CachingConfig, tempalloc_error> {
        let default = CachingConfig::default();
        let nonzero = |n: usize| (n != 0).then_some(n);
        Ok(default
            .max_bytes(nonzero(self.max_bytes))
            .min_block_size(nonzero(self.min_block_size).unwrap_or(default.min_block_size))
            .dedicated_threshold(nonzero(self.dedicated_threshold))
            .prefault(flag(self.prefault)?)
            .huge_pages(flag(self.huge_pages)?)
            .debug_checks(flag(self.debug_checks)?))
    }

    /// The configuration `config` points to, or the default for NULL.
    pub(super) fn read(config: Option<Self>) -> Result<CachingConfig, tempalloc_error> {
        config.map_or_else(|| Ok(CachingConfig::default()), Self::to_config)
    }
}

/// A snapshot of an allocator's (or a block cache's) counters: the fields of
/// [`Stats`], with the same meanings.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct tempalloc_stats {
    /// Scratch requests served.
    pub allocations: u64,
    /// Bytes asked for by those requests.
    pub bytes_requested: u64,
    /// Calls to reset.
    pub resets: u64,
    /// Calls into the system allocator that reserved memory.
    pub system_allocations: u64,
    /// Calls into the system allocator that returned memory.
    pub system_frees: u64,
    /// Bytes currently reserved from the system.
    pub bytes_held: usize,
    /// The most bytes live at once between two resets.
    pub high_water: usize,
    /// Blocks served from a block cache without a system call.
    pub cache_hits: u64,
    /// Blocks that needed a system allocation.
    pub cache_misses: u64,
    /// Bytes live now: 0 right after a reset.
    pub bytes_live: usize,
    /// The most bytes live at once in the last window.
    pub window_high_water: usize,
    /// Buffers found written past their end (with `debug_checks`).
    pub canary_violations: u64,
}

impl From<Stats> for tempalloc_stats {
    fn from(s: Stats) -> Self {
        tempalloc_stats {
            allocations: s.allocations,
            bytes_requested: s.bytes_requested,
            resets: s.resets,
            system_allocations: s.system_allocations,
            system_frees: s.system_frees,
            bytes_held: s.bytes_held,
            high_water: s.high_water,
            cache_hits: s.cache_hits,
            cache_misses: s.cache_misses,
            bytes_live: s.bytes_live,
            window_high_water: s.window_high_water,
            canary_violations: s.canary_violations,
        }
    }
}

impl From<crate::CacheStats> for tempalloc_stats {
    fn from(s: crate::CacheStats) -> Self {
        tempalloc_stats {
            system_allocations: s.system_allocations,
            system_frees: s.system_frees,
            bytes_held: s.bytes_held,
            cache_hits: s.hits,
            cache_misses: s.misses,
            ..tempalloc_stats::default()
        }
    }
}

/// A checkpoint of a [`tempalloc_allocator`], from [`tempalloc_checkpoint`],
/// consumed by [`tempalloc_rewind`]: the fields of the allocator's own
/// [`Checkpoint`](crate::Checkpoint). Plain data: copying or forging one is
/// harmless (the rewind checks every field against the allocator's records of
/// open checkpoints and refuses what they do not hold).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct tempalloc_checkpoint_token {
    /// The allocator it belongs to (never 0).
    pub allocator: u64,
    /// How many checkpoints were open when it was taken.
    pub depth: usize,
    /// Which checkpoint it is.
    pub serial: u64,
    /// The allocator's reset count when it was taken (resets and releases
    /// consume checkpoints): says whether a refused rewind came after a
    /// reset or after an outer rewind.
    pub resets: u64,
}

impl From<crate::Checkpoint> for tempalloc_checkpoint_token {
    fn from(cp: crate::Checkpoint) -> Self {
        let CheckpointParts {
            allocator,
            resets,
            depth,
            serial,
        } = cp.into_parts();
        tempalloc_checkpoint_token {
            allocator,
            depth,
            serial,
            resets,
        }
    }
}

impl From<tempalloc_checkpoint_token> for crate::Checkpoint {
    fn from(token: tempalloc_checkpoint_token) -> Self {
        let tempalloc_checkpoint_token {
            allocator,
            depth,
            serial,
            resets,
        } = token;
        crate::Checkpoint::from_parts(CheckpointParts {
            allocator,
            resets,
            depth,
            serial,
        })
    }
}

/// Why a call failed, with the numbers: what [`tempalloc_allocate_detailed`]
/// fills in, and what [`tempalloc_error_describe`] turns into the message a
/// Rust caller would see. Only the fields of the code's row are set; the
/// others are 0.
///
/// | `code` | fields |
/// |---|---|
/// | `TEMPALLOC_ERROR_BUDGET_EXCEEDED` | `requested`, `held`, `limit` |
/// | `TEMPALLOC_ERROR_OUT_OF_MEMORY` | `size`, `align` (what was asked of the system) |
/// | `TEMPALLOC_ERROR_SIZE_OVERFLOW` | `size`, `align` |
/// | `TEMPALLOC_ERROR_INVALID_ALIGNMENT` | `align` |
/// | any other | none |
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct tempalloc_error_detail {
    /// The status code, the one the plain call returns ([`TEMPALLOC_OK`] on
    /// success).
    pub code: tempalloc_error,
    /// Bytes the request asked for.
    pub requested: usize,
    /// Bytes held against the limit when the request came.
    pub held: usize,
    /// The limit, in bytes.
    pub limit: usize,
    /// Bytes asked (of the system, for an out-of-memory error).
    pub size: usize,
    /// The alignment asked.
    pub align: usize,
}

impl tempalloc_error_detail {
    /// The detail of `error`.
    pub(super) fn of(error: Error) -> Self {
        let detail = tempalloc_error_detail {
            code: code(error),
            ..Self::default()
        };
        match error {
            Error::BudgetExceeded {
                requested,
                held,
                limit,
            } => tempalloc_error_detail {
                requested,
                held,
                limit,
                ..detail
            },
            Error::OutOfMemory { size, align } | Error::SizeOverflow { size, align } => {
                tempalloc_error_detail {
                    size,
                    align,
                    ..detail
                }
            }
            Error::InvalidAlignment { align } => tempalloc_error_detail { align, ..detail },
            _ => detail,
        }
    }

    /// The Rust error this detail describes, for the codes that carry
    /// numbers.
    pub(super) fn error(&self) -> Option<Error> {
        let (size, align) = (self.size, self.align);
        Some(match self.code {
            TEMPALLOC_ERROR_BUDGET_EXCEEDED => Error::BudgetExceeded {
                requested: self.requested,
                held: self.held,
                limit: self.limit,
            },
            TEMPALLOC_ERROR_OUT_OF_MEMORY => Error::OutOfMemory { size, align },
            TEMPALLOC_ERROR_SIZE_OVERFLOW => Error::SizeOverflow { size, align },
            TEMPALLOC_ERROR_INVALID_ALIGNMENT => Error::InvalidAlignment { align },
            _ => return None,
        })
    }
}

/// The configuration [`CachingAllocator::new`] uses: no idle budget, no hard
/// limit, first commits sized to the first request (`min_block_size` 0), no
/// dedicated blocks, no prefault, no huge pages, no debug checks (in every
/// build of the library).
///
/// Thread safety: any thread, any time.
#[unsafe(no_mangle)]
pub extern "C" fn tempalloc_config_default() -> tempalloc_config {
    let c = CachingConfig::default();
    tempalloc_config {
        idle_budget: 0,
        max_bytes: c.max_bytes.unwrap_or(0),
        min_block_size: c.min_block_size,
        dedicated_threshold: c.dedicated_threshold.unwrap_or(0),
        prefault: c.prefaults().into(),
        huge_pages: c.uses_huge_pages().into(),
        debug_checks: c.debug_checks.into(),
    }
}
