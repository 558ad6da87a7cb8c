//! The C API's error details (a refusal's numbers and message at the C
//! boundary) and its checks in checked builds (debug, or `capi-checked`):
//! handles that are not live, and calls that overlap when they must not.
#![cfg(feature = "capi")]

use std::ffi::CStr;
use std::ptr;

use tempalloc::Error;
use tempalloc::capi::*;

fn create(max_bytes: usize) -> *mut tempalloc_allocator {
    let config = tempalloc_config {
        max_bytes,
        ..tempalloc_config_default()
    };
    let mut error = -1;
    // SAFETY: `config` is live and `error` writable.
    let alloc = unsafe { tempalloc_allocator_create(&config, &mut error) };
    assert_eq!(error, TEMPALLOC_OK);
    alloc
}

fn detailed(
    alloc: *const tempalloc_allocator,
    size: usize,
    align: usize,
) -> tempalloc_error_detail {
    let mut detail = tempalloc_error_detail {
        code: -1,
        requested: 7,
        ..tempalloc_error_detail::default()
    };
    // SAFETY: `alloc` is NULL or live; `detail` is writable.
    let p = unsafe { tempalloc_allocate_detailed(alloc, size, align, &mut detail) };
    assert_eq!(p.is_null(), detail.code != TEMPALLOC_OK);
    detail
}

fn describe(detail: Option<&tempalloc_error_detail>) -> String {
    let detail = detail.map_or(ptr::null(), ptr::from_ref);
    // SAFETY: `detail` is NULL or live; a NULL buffer of length 0 is allowed.
    let len = unsafe { tempalloc_error_describe(detail, ptr::null_mut(), 0) };
    let mut buf = vec![0x55u8; len + 1];
    // SAFETY: `buf` has `len + 1` writable bytes.
    let again = unsafe { tempalloc_error_describe(detail, buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(again, len);
    CStr::from_bytes_with_nul(&buf)
        .expect("one NUL, at the end")
        .to_str()
        .expect("UTF-8")
        .to_owned()
}

/// A refused request keeps its numbers at the C
/// boundary, and the message is the one a Rust caller gets.
#[test]
fn a_refused_request_keeps_its_numbers_and_its_message() {
    let alloc = create(1 << 20);
    let d = detailed(alloc, 4 << 20, 64);
    assert_eq!(d.code, TEMPALLOC_ERROR_BUDGET_EXCEEDED);
    assert_eq!(
        (d.requested, d.limit, d.size, d.align),
        (4 << 20, 1 << 20, 0, 0)
    );
    assert!(d.held <= 1 << 20, "{d:?}");
    let rust = Error::BudgetExceeded {
        requested: 4 << 20,
        held: d.held,
        limit: 1 << 20,
    };
    assert_eq!(describe(Some(&d)), rust.to_string());

    let d = detailed(alloc, 64, 48);
    assert_eq!(
        (d.code, d.align, d.size),
        (TEMPALLOC_ERROR_INVALID_ALIGNMENT, 48, 0)
    );
    assert_eq!(
        describe(Some(&d)),
        Error::InvalidAlignment { align: 48 }.to_string()
    );
    let d = detailed(alloc, usize::MAX - 10, 64);
    assert_eq!(
        (d.code, d.size, d.align),
        (TEMPALLOC_ERROR_SIZE_OVERFLOW, usize::MAX - 10, 64)
    );

    // Success: zeros and OK; the pointer is usable.
    let d = detailed(alloc, 1000, 64);
    assert_eq!(d, tempalloc_error_detail::default());
    let d = detailed(ptr::null(), 8, 8);
    assert_eq!(d.code, TEMPALLOC_ERROR_NULL_ARGUMENT);
    assert!(describe(Some(&d)).contains("NULL"));
    assert!(describe(None).contains("NULL"));
    // NULL `detail`: the pointer alone says it failed.
    // SAFETY: `alloc` is live; NULL `detail` is allowed.
    assert!(unsafe { tempalloc_allocate_detailed(alloc, 64, 3, ptr::null_mut()) }.is_null());
    // SAFETY: live, not used again.
    unsafe { tempalloc_allocator_destroy(alloc) };
}

/// `tempalloc_error_describe` cuts like `snprintf`: the returned length is
/// the whole message's, the buffer holds what fits and a NUL.
#[test]
fn describe_cuts_like_snprintf() {
    let d = tempalloc_error_detail {
        code: TEMPALLOC_ERROR_BUDGET_EXCEEDED,
        requested: 134_217_728,
        held: 0,
        limit: 67_108_864,
        ..tempalloc_error_detail::default()
    };
    let full = "budget exceeded: 134217728 bytes requested while 0 bytes are held, limit is 67108864 bytes";
    assert_eq!(describe(Some(&d)), full);
    let mut buf = [0x55u8; 8];
    // SAFETY: `buf` has 8 writable bytes.
    let len = unsafe { tempalloc_error_describe(&d, buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(len, full.len());
    assert_eq!(&buf, b"budget \0");
    // A length of 0 writes nothing.
    // SAFETY: nothing is written for a length of 0.
    let len = unsafe { tempalloc_error_describe(&d, buf.as_mut_ptr().cast(), 0) };
    assert_eq!((len, &buf), (full.len(), b"budget \0"));
}

/// A request above the limit is `BUDGET_EXCEEDED`
/// whatever its size, with its numbers (it was `OUT_OF_MEMORY` for
/// `PTRDIFF_MAX` under a 64 MiB limit), with the debug checks too.
#[test]
fn a_request_of_ptrdiff_max_over_the_limit_is_budget_exceeded() {
    let alloc = create(64 << 20);
    let d = detailed(alloc, isize::MAX as usize, 1);
    assert_eq!(
        d.code,
        TEMPALLOC_ERROR_BUDGET_EXCEEDED,
        "{}",
        describe(Some(&d))
    );
    assert_eq!((d.requested, d.limit), (isize::MAX as usize, 64 << 20));
    // SAFETY: live, not used again.
    unsafe { tempalloc_allocator_destroy(alloc) };
}

/// In checked builds (debug, or `capi-checked`) a destroyed handle is refused by every call
/// and destroying it again does nothing, also after its memory could have
/// been reused: no later handle gets its address.
#[test]
#[cfg(any(debug_assertions, feature = "capi-checked"))]
fn a_destroyed_handle_is_refused_and_its_address_never_comes_back() {
    let dead = create(0);
    // SAFETY: live, and given up here.
    unsafe { tempalloc_allocator_destroy(dead) };
    let later: Vec<_> = (0..32).map(|_| create(0)).collect();
    assert!(
        !later.contains(&dead),
        "a new handle got a destroyed one's address"
    );
    let mut error = -1;
    let mut stats = tempalloc_stats::default();
    let mut cp = tempalloc_checkpoint_token::default();
    // SAFETY: checked builds look a handle up before touching it, so a
    // destroyed one is never read.
    unsafe {
        assert!(tempalloc_allocate(dead, 8, 8, &mut error).is_null());
        assert_eq!(error, TEMPALLOC_ERROR_INVALID_HANDLE);
        assert_eq!(tempalloc_reset(dead), TEMPALLOC_ERROR_INVALID_HANDLE);
        assert_eq!(tempalloc_release(dead), TEMPALLOC_ERROR_INVALID_HANDLE);
        assert_eq!(
            tempalloc_allocator_stats(dead, &mut stats),
            TEMPALLOC_ERROR_INVALID_HANDLE
        );
        assert_eq!(
            tempalloc_checkpoint(dead, &mut cp),
            TEMPALLOC_ERROR_INVALID_HANDLE
        );
        assert_eq!(tempalloc_rewind(dead, cp), TEMPALLOC_ERROR_INVALID_HANDLE);
        assert_eq!(tempalloc_check(dead), TEMPALLOC_ERROR_INVALID_HANDLE);
        // A second destroy does nothing (no double free).
        tempalloc_allocator_destroy(dead);
        // And as a cache, nothing either.
        tempalloc_block_cache_destroy(dead.cast());
    }
    for alloc in later {
        // SAFETY: live, not used again.
        unsafe { tempalloc_allocator_destroy(alloc) };
    }
}

/// In checked builds (debug, or `capi-checked`) a pointer that was never a handle (here, memory
/// that starts with what a handle's first word used to be) is refused
/// without being read.
#[test]
#[cfg(any(debug_assertions, feature = "capi-checked"))]
fn a_made_up_handle_is_refused_without_being_read() {
    // The magic word the earlier check trusted ("tempall1").
    let fake = Box::new([0x7465_6d70_616c_6c31u64; 16]);
    let p = ptr::from_ref(&*fake)
        .cast::<tempalloc_allocator>()
        .cast_mut();
    let mut error = -1;
    // SAFETY: checked builds look a handle up before touching it.
    unsafe {
        assert!(tempalloc_allocate(p, 8, 8, &mut error).is_null());
        assert_eq!(error, TEMPALLOC_ERROR_INVALID_HANDLE);
        assert_eq!(tempalloc_reset(p), TEMPALLOC_ERROR_INVALID_HANDLE);
        tempalloc_allocator_destroy(p);
    }
    assert_eq!(fake[0], 0x7465_6d70_616c_6c31, "untouched");
}

/// In checked builds (debug, or `capi-checked`) a reset while another thread allocates on the
/// same handle is refused (`CONCURRENT_USE`) instead of recycling memory
/// the other thread is being handed; so is an allocation that comes during
/// a reset. Whichever call comes second is refused and does nothing, so
/// the program stays sound while it races.
#[test]
#[cfg(any(debug_assertions, feature = "capi-checked"))]
#[cfg_attr(
    miri,
    ignore = "a race that needs many rounds to be seen; the protocol has unit tests"
)]
fn a_reset_that_overlaps_an_allocation_is_refused() {
    struct Shared(*mut tempalloc_allocator);
    // SAFETY: the test shares the handle on purpose: the debug checks are
    // what it tests, and they make every overlap an error code.
    unsafe impl Sync for Shared {}
    impl Shared {
        fn get(&self) -> *mut tempalloc_allocator {
            self.0
        }
    }
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    let alloc = Shared(create(0));
    let stop = AtomicBool::new(false);
    let refused_resets = std::thread::scope(|s| {
        let worker = s.spawn(|| {
            while !stop.load(Relaxed) {
                let mut error = -1;
                // SAFETY: a live handle; overlapping calls are refused.
                let p = unsafe { tempalloc_allocate(alloc.get(), 64, 8, &mut error) };
                // An allocation is refused only for a reset it overlaps:
                // any other code fails the test.
                match error {
                    TEMPALLOC_OK => assert!(!p.is_null()),
                    TEMPALLOC_ERROR_CONCURRENT_USE => {}
                    other => panic!("allocate: {other}"),
                }
            }
        });
        let mut refused = 0u64;
        for _ in 0..1_000_000 {
            // SAFETY: as above.
            match unsafe { tempalloc_reset(alloc.get()) } {
                TEMPALLOC_OK => {}
                TEMPALLOC_ERROR_CONCURRENT_USE => refused += 1,
                other => panic!("reset: {other}"),
            }
            if refused >= 100 {
                break;
            }
        }
        stop.store(true, Relaxed);
        worker.join().expect("the worker ends");
        refused
    });
    assert!(
        refused_resets > 0,
        "no reset overlapped an allocation in a million tries"
    );
    // SAFETY: the worker is joined; live, not used again.
    unsafe {
        assert_eq!(tempalloc_reset(alloc.0), TEMPALLOC_OK);
        tempalloc_allocator_destroy(alloc.0);
    }
}
