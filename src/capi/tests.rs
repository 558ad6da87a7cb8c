//! The C API's unit tests: error codes, messages and conversions.

use super::*;
use crate::CachingConfig;

fn message(code: tempalloc_error) -> &'static str {
    // SAFETY: `tempalloc_error_message` returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(tempalloc_error_message(code)) }
        .to_str()
        .unwrap_or("")
}

#[test]
fn every_error_maps_to_its_code_and_a_message() {
    let cases = [
        (
            Error::InvalidAlignment { align: 3 },
            TEMPALLOC_ERROR_INVALID_ALIGNMENT,
        ),
        (
            Error::SizeOverflow { size: 1, align: 1 },
            TEMPALLOC_ERROR_SIZE_OVERFLOW,
        ),
        (
            Error::OutOfMemory { size: 1, align: 1 },
            TEMPALLOC_ERROR_OUT_OF_MEMORY,
        ),
        (
            Error::BudgetExceeded {
                requested: 2,
                held: 0,
                limit: 1,
            },
            TEMPALLOC_ERROR_BUDGET_EXCEEDED,
        ),
        (Error::NoTempAllocator, TEMPALLOC_ERROR_NO_TEMP_ALLOCATOR),
        (
            Error::StaleCheckpoint {
                taken_at: 0,
                now: 1,
            },
            TEMPALLOC_ERROR_STALE_CHECKPOINT,
        ),
        (Error::ForeignCheckpoint, TEMPALLOC_ERROR_FOREIGN_CHECKPOINT),
        (
            Error::CheckpointClosed { depth: 1, open: 0 },
            TEMPALLOC_ERROR_CHECKPOINT_CLOSED,
        ),
        (
            Error::CanaryCorrupted {
                addr: 64,
                size: 8,
                byte: 0,
            },
            TEMPALLOC_ERROR_CANARY_CORRUPTED,
        ),
        (
            Error::FrameSuspended { depth: 1, open: 2 },
            TEMPALLOC_ERROR_FRAME_SUSPENDED,
        ),
    ];
    let mut seen = Vec::new();
    for (error, expected) in cases {
        assert_eq!(code(error), expected, "{error}");
        assert!(!seen.contains(&expected), "code {expected} used twice");
        seen.push(expected);
    }
    for c in TEMPALLOC_OK..=TEMPALLOC_ERROR_CHECKPOINT_CLOSED {
        assert_ne!(message(c), "unknown tempalloc error code", "code {c}");
    }
    assert_eq!(message(-1), "unknown tempalloc error code");
    assert_eq!(message(i32::MAX), "unknown tempalloc error code");
}

/// A C token is the allocator's own checkpoint as plain data, so a refused
/// rewind has the allocator's reason and numbers (no records of the
/// handle's own, no made-up reset count), and
/// each reason its own code.
#[test]
fn a_refused_rewind_says_why() {
    let mut error = TEMPALLOC_OK;
    // SAFETY: NULL config (the default) and a writable error.
    let (a, b) = unsafe {
        (
            tempalloc_allocator_create(ptr::null(), &mut error),
            tempalloc_allocator_create(ptr::null(), &mut error),
        )
    };
    assert!(!a.is_null() && !b.is_null());
    let take = |alloc| {
        let mut cp = tempalloc_checkpoint_token::default();
        // SAFETY: a live handle, used by this thread only.
        let code = unsafe { tempalloc_checkpoint(alloc, &mut cp) };
        assert_eq!(code, TEMPALLOC_OK);
        cp
    };
    // Why the allocator refuses to rewind to `cp` (it is never open
    // here), and that C gets that reason's code for it.
    let why = |alloc, cp: tempalloc_checkpoint_token| {
        // SAFETY: a live handle, used by this thread only.
        let error = unsafe { on_exclusive(alloc, |temp| Ok(temp.rewind(cp.into()).err())) };
        let error = error.unwrap();
        // SAFETY: a live handle, used by this thread only. The rewind
        // above was refused, so this one meets the same records.
        let c_code = unsafe { tempalloc_rewind(alloc, cp) };
        assert_eq!(error.map_or(TEMPALLOC_OK, code), c_code);
        error
    };
    let theirs = take(b);
    assert_eq!(why(a, theirs), Some(Error::ForeignCheckpoint));
    assert_eq!(
        why(a, tempalloc_checkpoint_token::default()),
        Some(Error::ForeignCheckpoint)
    );
    let outer = take(a);
    let inner = take(a);
    assert_eq!((outer.depth, inner.depth), (0, 1));
    // SAFETY: live, this thread only.
    assert_eq!(unsafe { tempalloc_rewind(a, outer) }, TEMPALLOC_OK);
    assert_eq!(
        why(a, inner),
        Some(Error::CheckpointClosed { depth: 1, open: 0 })
    );
    assert_eq!(
        why(a, outer),
        Some(Error::CheckpointClosed { depth: 0, open: 0 })
    );
    let before = take(a);
    // The same depth as `outer`, another serial: `outer` stays closed.
    assert_eq!(before.depth, outer.depth);
    assert_eq!(
        why(a, outer),
        Some(Error::CheckpointClosed { depth: 0, open: 1 })
    );
    // SAFETY: live, this thread only.
    unsafe {
        assert_eq!(tempalloc_reset(a), TEMPALLOC_OK);
        assert_eq!(tempalloc_release(a), TEMPALLOC_OK);
    }
    assert_eq!(
        why(a, before),
        Some(Error::StaleCheckpoint {
            taken_at: before.resets,
            now: before.resets + 2
        })
    );
    // SAFETY: live, given up here.
    unsafe {
        tempalloc_allocator_destroy(a);
        tempalloc_allocator_destroy(b);
    }
}

#[test]
fn config_default_round_trips() {
    let c = tempalloc_config_default();
    assert_eq!(c.to_config(), Ok(CachingConfig::default()));
    let zeroed = tempalloc_config {
        idle_budget: 0,
        max_bytes: 0,
        min_block_size: 0,
        dedicated_threshold: 0,
        prefault: 0,
        huge_pages: 0,
        debug_checks: c.debug_checks,
    };
    assert_eq!(zeroed.to_config(), Ok(CachingConfig::default()));
    let custom = tempalloc_config {
        max_bytes: 1 << 20,
        dedicated_threshold: 8 << 20,
        prefault: 1,
        ..c
    };
    let config = custom.to_config().unwrap();
    assert_eq!(config.max_bytes, Some(1 << 20));
    assert_eq!(config.dedicated_threshold, Some(8 << 20));
    assert!(config.prefaults());
}
