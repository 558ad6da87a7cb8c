//! The OS layer: reserved address ranges whose pages are committed as they
//! are needed (the memory behind a region that grows in place), and the
//! page sizes everything is measured in. The only code in the crate that
//! talks to the system about memory. One small API over the platform:
//!
//! - the page size, read at run time ([`page_size`]), and the transparent
//!   huge page size where that hint applies ([`huge_page_size`]);
//! - [`Mapping`]: reserve, commit, decommit, release;
//! - a process-wide cap on reserved address space
//!   ([`RESERVE_LIMIT`](policy::RESERVE_LIMIT)) and the default size of a
//!   region's reservation ([`region_reserve`]);
//! - [`prefault_pages`] and [`advise_huge_pages`], for any memory the crate
//!   owns;
//! - [`SystemCall`] and [`refuse`]: the refusals tests inject
//!   (`tempalloc::testing` re-exports them).
//!
//! Where no reservation can be had, [`Mapping::reserve`] returns `None` and
//! callers fall back to heap blocks. Two environment variables, read once
//! each, are test aids: one raises the page size (`TEMPALLOC_PAGE_SIZE`),
//! the other refuses every reservation (`TEMPALLOC_RESERVE=off`), so the
//! whole test suite runs on the heap-block fallback of the platforms
//! without reservations.
//!
//! # Files, from the bottom up
//!
//! Each file imports only from files below it in this list, and nothing in
//! `src/os/` imports from outside it (but `core` and `std`):
//!
//! - `parse.rs`: what the environment and the system say, as numbers
//!   (`TEMPALLOC_PAGE_SIZE`, `TEMPALLOC_RESERVE`, `hpage_pmd_size`); pure.
//! - `faults.rs`: the injected refusals, per thread ([`SystemCall`]).
//! - The backend, one file per family, with the same functions each:
//!   `unix.rs` (`mmap`/`mprotect`/`madvise`; Linux and Android, Darwin, the
//!   BSDs and other Unix systems differ only in flags and in how pages are
//!   given back), `windows.rs` (`VirtualAlloc`/`VirtualFree`), `none.rs`
//!   (wasm and anything else: no reservations). Under Miri nothing is
//!   reserved either.
//! - `page.rs`: the page sizes and the two environment variables, each read
//!   once per process.
//! - `policy.rs`: the reservation policy: sizes per platform, the
//!   process-wide count of reserved address space, and `ulimit -v` (read
//!   once per process).
//! - `sys.rs`: the checked-call layer: every address and length handed to
//!   the system passes one check there, whole pages of [`page_size`] (the
//!   raw reservation itself: whole pages of the system's page, which is the
//!   same unless `TEMPALLOC_PAGE_SIZE` raised [`page_size`]), and every call
//!   is open to the injected refusals.
//! - `mapping.rs`: [`Mapping`], [`prefault_pages`], [`advise_huge_pages`].
//!
//! This file only declares them and re-exports what the crate uses.

#[cfg_attr(unix, path = "unix.rs")]
#[cfg_attr(windows, path = "windows.rs")]
#[cfg_attr(not(any(unix, windows)), path = "none.rs")]
mod imp;

mod faults;
mod mapping;
mod page;
mod parse;
mod policy;
mod sys;

// For `tempalloc::testing`, and the OS layer's own tests.
#[cfg(any(test, feature = "test-util"))]
pub use faults::SystemCall;
#[cfg(any(test, feature = "test-util"))]
pub(crate) use faults::refuse;
pub(crate) use mapping::{Mapping, advise_huge_pages, prefault_pages};
pub(crate) use page::{huge_page_size, page_size};
pub(crate) use policy::region_reserve;
