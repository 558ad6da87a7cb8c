//! [`Block`]: one aligned region of system memory, and the size classes
//! blocks are rounded to.

use core::alloc::Layout;
use core::ptr::NonNull;

use crate::Error;

/// Blocks are page-aligned, so requests up to 4096-byte alignment need no
/// padding at the start of a block.
pub(crate) const PAGE: usize = 4096;

/// Huge blocks are aligned to (and sized in) 2 MiB so that the kernel can
/// back them with transparent huge pages.
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// How a block is obtained from the system.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BlockOptions {
    /// Touch every page once, so first use does not page-fault.
    pub prefault: bool,
    /// Ask for transparent huge pages for blocks of 2 MiB and more (Linux).
    pub huge_pages: bool,
}

/// Rounds `bytes` up to a block size class: whole pages, and above 32 KiB
/// one of eight steps per power of two, so a block is at most 12.5% larger
/// than asked (and blocks of similar sizes share a class in the cache).
///
/// Returns `None` when the class would pass `isize::MAX`.
pub(crate) fn size_class(bytes: usize) -> Option<usize> {
    let pages = bytes.max(1).checked_next_multiple_of(PAGE)?;
    let step = if pages <= 8 * PAGE {
        PAGE
    } else {
        // The largest power of two not above `pages`, over 8.
        (1usize << (usize::BITS - 1 - pages.leading_zeros())) / 8
    };
    pages
        .checked_next_multiple_of(step)
        .filter(|&c| c <= isize::MAX as usize)
}

/// One region of memory owned by a block cache or an allocator. Freed on
/// drop, so a block is never leaked or freed twice.
#[derive(Debug)]
pub(crate) struct Block {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: a `Block` owns its memory exclusively (like a `Box<[u8]>`); the
// system allocator lets any thread free it.
unsafe impl Send for Block {}

impl Block {
    /// A block of `size` bytes (at least a page; a size class) from the system.
    pub(crate) fn allocate(size: usize, options: BlockOptions) -> Result<Block, Error> {
        let size = size.max(PAGE);
        let huge = options.huge_pages && size >= HUGE_PAGE;
        let align = if huge { HUGE_PAGE } else { PAGE };
        let layout = Layout::from_size_align(size, align)
            .map_err(|_| Error::SizeOverflow { size, align })?;
        // SAFETY: `size >= PAGE > 0`.
        let ptr = NonNull::new(unsafe { std::alloc::alloc(layout) })
            .ok_or(Error::OutOfMemory { size, align })?;
        let block = Block { ptr, layout };
        if huge {
            block.advise_huge_pages();
        }
        if options.prefault {
            block.prefault();
        }
        Ok(block)
    }

    /// The first byte. Pointers into the block derive from this one.
    #[inline]
    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Bytes in the block.
    #[inline]
    pub(crate) fn size(&self) -> usize {
        self.layout.size()
    }

    /// Whether this block was made with huge-page alignment.
    pub(crate) fn is_huge(&self) -> bool {
        self.layout.align() == HUGE_PAGE
    }

    fn prefault(&self) {
        for offset in (0..self.size()).step_by(PAGE) {
            // SAFETY: `offset < size`, so the byte is inside our allocation;
            // a volatile write so the touch is not optimised away.
            unsafe { self.ptr.as_ptr().add(offset).write_volatile(0) };
        }
    }

    #[cfg(all(target_os = "linux", not(miri)))]
    fn advise_huge_pages(&self) {
        // SAFETY: the range is exactly our allocation, 2 MiB aligned;
        // MADV_HUGEPAGE is a hint that never changes the contents, and its
        // failure (no THP support) is harmless, so the result is ignored.
        unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.size(), libc::MADV_HUGEPAGE) };
    }

    #[cfg(not(all(target_os = "linux", not(miri))))]
    fn advise_huge_pages(&self) {}
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `std::alloc::alloc(self.layout)` and this
        // is the only place it is freed.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}
