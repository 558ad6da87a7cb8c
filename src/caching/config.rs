//! [`CachingConfig`]: the knobs of a [`CachingAllocator`](crate::CachingAllocator).

use super::memory::block::BlockOptions;
use crate::os::region_reserve;

/// How a [`CachingAllocator`](crate::CachingAllocator) sizes, limits and
/// prepares its memory. Start from `CachingConfig::default()` and change
/// what your deployment needs with the builder methods; read a setting back
/// from its field.
///
/// ```
/// use tempalloc::{CachingAllocator, CachingConfig};
///
/// let config = CachingConfig::default()
///     .max_bytes(Some(64 << 20))
///     .retain(Some(16 << 20))
///     .prefault(true);
/// let temp = CachingAllocator::with_config(config);
/// assert_eq!(temp.config().max_bytes, Some(64 << 20));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CachingConfig {
    /// See [`min_block_size`](Self::min_block_size()).
    pub min_block_size: usize,
    /// See [`dedicated_threshold`](Self::dedicated_threshold()).
    pub dedicated_threshold: Option<usize>,
    /// See [`max_bytes`](Self::max_bytes()).
    pub max_bytes: Option<usize>,
    /// See [`reserve`](Self::reserve()).
    pub reserve: Option<usize>,
    /// See [`retain`](Self::retain()).
    pub retain: Option<usize>,
    /// See [`region_cap`](Self::region_cap()).
    pub region_cap: Option<usize>,
    /// See [`debug_checks`](Self::debug_checks()).
    pub debug_checks: bool,
    pub(crate) block: BlockOptions,
}

impl Default for CachingConfig {
    /// First commits sized to the first request, no dedicated chunks, no
    /// hard limit, the platform's reservation size
    /// (README, "Platforms"), no retain cap, no region cap, no prefault, no huge pages,
    /// no debug checks: the same in every build profile.
    fn default() -> Self {
        CachingConfig {
            min_block_size: 0,
            dedicated_threshold: None,
            max_bytes: None,
            reserve: Some(region_reserve()),
            retain: None,
            region_cap: None,
            debug_checks: false,
            block: BlockOptions::default(),
        }
    }
}

impl CachingConfig {
    /// The size from which a request gets a chunk of its own.
    pub(super) fn dedicated_from(&self) -> usize {
        self.dedicated_threshold.unwrap_or(usize::MAX)
    }

    /// The least memory a region makes usable when it takes a chunk: its
    /// first commit (or heap block). By default (0) that is what the first
    /// request needs, in whole pages; later growth commits 12.5% more than
    /// the region has (at least a page) whenever a request does not fit.
    /// Raise it when the first inference's system calls matter (for
    /// example, to the expected peak of a thread); it is also the least
    /// [`max_bytes`](Self::max_bytes()) must leave each thread.
    ///
    /// ```
    /// let c = tempalloc::CachingConfig::default().min_block_size(4 << 20);
    /// assert_eq!(c.min_block_size, 4 << 20);
    /// ```
    #[must_use]
    pub fn min_block_size(mut self, bytes: usize) -> Self {
        self.min_block_size = bytes;
        self
    }

    /// Requests of at least this many bytes get memory of their own instead
    /// of growing the thread's region, given back at the reset (or the rewind)
    /// that ends them and counted against the limits. The same on every path
    /// and in every build. Use it when a few rare, very large requests would
    /// otherwise make every window hold a region that large. `None` (the
    /// default) bumps everything.
    ///
    /// ```
    /// let c = tempalloc::CachingConfig::default().dedicated_threshold(Some(8 << 20));
    /// assert_eq!(c.dedicated_threshold, Some(8 << 20));
    /// ```
    #[must_use]
    pub fn dedicated_threshold(mut self, bytes: Option<usize>) -> Self {
        self.dedicated_threshold = bytes;
        self
    }

    /// A hard limit on all memory the allocator takes from the system,
    /// through its own cache or a shared one (whose own limit, if any,
    /// applies too: a session's cap within the sessions' budget).
    ///
    /// **What to set.** Run the program once without a limit and read
    /// [`Stats::high_water`](crate::Stats::high_water); a limit of
    /// `(T + 1) * (high_water + page)` serves the same program under any
    /// schedule, the first inference included, where `T` counts the threads
    /// that allocate in one window (the calling thread too) and `page` is
    /// the page size (twice that on heap blocks, below; add what requests
    /// pad to their alignment, which `high_water` does not count). Why not
    /// less: a region keeps the memory its thread used for as long as the
    /// thread leases it (the window), so under work stealing each thread's
    /// region may hold a window's worth. Far less usually serves: on
    /// reservations `1.5 * high_water` served every schedule
    /// `tests/all/memory/work.rs` tried (docs/design.md, "Budgets").
    ///
    /// The rule behind it: a program is served whenever the limit covers,
    /// for each thread allocating at once (and the thread that resets,
    /// which keeps its region), the most it used in one window, in whole
    /// pages (at least one: the least a thread's region can hold). Under a
    /// limit a region commits only what its requests need, never ahead
    /// (without one it commits 12.5% ahead), so threads growing at once
    /// never take room another's request needs; and a request is refused
    /// only when no other growth is under way, so never for memory the
    /// system then refuses. When threads split the work the same way every
    /// call, that is what is live, in whole pages per thread; a
    /// work-stealing pool's workers, and fresh threads whose shares differ
    /// and that start in another order each window, each keep the most
    /// they ever took (see `trim` and `retain` for giving it back). On heap
    /// blocks (where nothing can be reserved; see
    /// [`reserve`](Self::reserve())) a region that outgrows its block chains
    /// one twice as large in that window, so the limit must cover twice each
    /// thread's most in one window, and a page.
    ///
    /// A request that would pass the limit first gets the memory of regions
    /// no thread leases this window (largest first) and the cache's idle
    /// memory, if that makes room; otherwise it is
    /// [`Error::BudgetExceeded`](crate::Error::BudgetExceeded), with the
    /// request, what is held and the limit, whatever the request's size.
    /// Growth never asks for more than the limit allows. Use it on devices
    /// where the OS kills processes over a memory line.
    ///
    /// ```
    /// let c = tempalloc::CachingConfig::default().max_bytes(Some(10 << 20));
    /// assert_eq!(c.max_bytes, Some(10 << 20));
    /// ```
    #[must_use]
    pub fn max_bytes(mut self, bytes: Option<usize>) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// Address space a region first reserves (no more than `max_bytes`), so
    /// it can grow in place by committing pages; reserving costs no memory.
    /// A region that outgrows its reservation moves to one four times what
    /// it uses. The default depends on the platform (README, "Platforms").
    /// `None` uses heap blocks instead, which is also what happens where
    /// nothing can be reserved (Miri, `ulimit -v`, wasm): a region then
    /// moves to a block sized to its peak at the reset after it outgrows
    /// one.
    ///
    /// ```
    /// let c = tempalloc::CachingConfig::default().reserve(None);
    /// assert_eq!(c.reserve, None);
    /// ```
    #[must_use]
    pub fn reserve(mut self, bytes: Option<usize>) -> Self {
        self.reserve = bytes;
        self
    }

    /// A cap on what the allocator keeps between inferences: at each reset,
    /// the largest regions give their pages back (and heap regions their
    /// blocks) until at most `bytes` are held, so one huge inference (a
    /// long prompt) does not pin its peak for the life of the session. The
    /// next inference grows them again as it needs. ExecuTorch's caching
    /// allocator frees everything past its cap; this gives back only the
    /// excess, largest regions first. `None` (the default) keeps the most
    /// each thread used. Over a [`BlockCache`](crate::BlockCache) with a
    /// hard limit it is also the allocator's floor: another session's growth
    /// takes back this one's idle memory, but never below the cap.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, CachingConfig, KernelContext, TempAllocator};
    ///
    /// let mut temp = CachingAllocator::with_config(CachingConfig::default().retain(Some(1 << 20)));
    /// KernelContext::new(&temp).scratch::<u8>(8 << 20)?; // a long prompt
    /// temp.reset();
    /// assert!(temp.stats().bytes_held <= 1 << 20);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    #[must_use]
    pub fn retain(mut self, bytes: Option<usize>) -> Self {
        self.retain = bytes;
        self
    }

    /// Memory that follows the work under a work-stealing pool (rayon): a
    /// thread's region with scratch in it grows to at most `bytes` (whole
    /// pages; a larger request still gets the room it needs); past that, the
    /// thread moves on to a FREE region whose committed room serves the
    /// request, or to a new region, and the one it leaves stays its own until
    /// the window ends. Regions then stay small and any thread uses any of
    /// them, so what is held tends to what the window needs at once, not to
    /// every worker's largest share of a kernel (docs/design.md, "Shares
    /// that vary"). A region that grows commits up to the cap at once. The
    /// cost is the allocator's lock each time a thread moves on, and the
    /// unused tail of each region a thread leaves. About the window's
    /// high-water mark over four times the workers serves well (16 KiB for
    /// `tests/all/memory/work.rs`'s 427 KB window at 8 workers). Without a limit
    /// only: under [`max_bytes`](Self::max_bytes()) each thread grows its
    /// own region. On reservations only: a region on heap blocks (see
    /// [`reserve`](Self::reserve())) chains them and keeps one block at
    /// a reset, which moving on would undo every window. `None` (the default): a region grows to what its thread
    /// uses, which suits threads whose shares stay the same.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, CachingConfig, KernelContext};
    ///
    /// let temp = CachingAllocator::with_config(CachingConfig::default().region_cap(Some(16 << 10)));
    /// let ctx = KernelContext::new(&temp);
    /// let a = ctx.scratch::<u8>(16 << 10)?; // the region reaches the cap
    /// let b = ctx.scratch::<u8>(4 << 10)?; // from another region, past a full page
    /// a[0] = 1;
    /// b[0] = 2;
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    #[must_use]
    pub fn region_cap(mut self, bytes: Option<usize>) -> Self {
        self.region_cap = bytes;
        self
    }

    /// Touch every page when it is committed (or a block taken), so the
    /// first inference does not page-fault inside a kernel: the cost moves to
    /// the slow path, which is where latency-sensitive runtimes want it.
    ///
    /// ```
    /// assert!(tempalloc::CachingConfig::default().prefault(true).prefaults());
    /// ```
    #[must_use]
    pub fn prefault(mut self, on: bool) -> Self {
        self.block.prefault = on;
        self
    }

    /// Whether pages are touched when committed.
    ///
    /// ```
    /// assert!(!tempalloc::CachingConfig::default().prefaults());
    /// ```
    pub fn prefaults(&self) -> bool {
        self.block.prefault
    }

    /// Align reservations (and blocks of a huge page and more) to the
    /// system's transparent huge page (read at run time: 2 MiB on x86-64,
    /// 32 MiB with 16 KiB pages) and ask Linux and Android for huge pages on
    /// them (`madvise(MADV_HUGEPAGE)`): fewer TLB misses for large tiles. A
    /// no-op where the system has none.
    ///
    /// ```
    /// assert!(tempalloc::CachingConfig::default().huge_pages(true).uses_huge_pages());
    /// ```
    #[must_use]
    pub fn huge_pages(mut self, on: bool) -> Self {
        self.block.huge_pages = on;
        self
    }

    /// Whether huge pages are asked for.
    ///
    /// ```
    /// assert!(!tempalloc::CachingConfig::default().uses_huge_pages());
    /// ```
    pub fn uses_huge_pages(&self) -> bool {
        self.block.huge_pages
    }

    /// Debug checks: 16 bytes of canary after every allocation, checked at
    /// every reset and rewind and by [`CachingAllocator::check`](crate::CachingAllocator::check),
    /// so a kernel writing past the end of its scratch is reported
    /// ([`Error::CanaryCorrupted`](crate::Error::CanaryCorrupted),
    /// [`Stats::canary_violations`](crate::Stats::canary_violations)) instead
    /// of silently corrupting its neighbour; and recycled memory filled with
    /// `0xDD` at reset and rewind, so a kernel reading scratch it did not
    /// write sees garbage at once. Every request then takes the allocator's
    /// lock (the lock-free path is not used), so it is slower, and takes 16
    /// bytes more (and its alignment's padding), which counts as use in
    /// every memory bound; with the checks off the fast path is exactly as
    /// fast as without the option.
    /// Off by default in every build profile, debug builds included, so a
    /// debug build takes the same paths and counts the same [`Stats`](crate::Stats)
    /// as a release build; turn them on where you want them (in tests, or
    /// under your own `cfg!(debug_assertions)`).
    ///
    /// ```
    /// assert!(!tempalloc::CachingConfig::default().debug_checks);
    /// let c = tempalloc::CachingConfig::default().debug_checks(true);
    /// assert!(c.debug_checks);
    /// ```
    #[must_use]
    pub fn debug_checks(mut self, on: bool) -> Self {
        self.debug_checks = on;
        self
    }
}
