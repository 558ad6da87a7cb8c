//! [`Block`]: one aligned region of system memory, and the size classes
//! blocks are rounded to.

use core::alloc::Layout;
use core::ptr::NonNull;

use crate::Error;
use crate::os::{self, huge_page_size, page_size};

/// How a block is obtained from the system.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BlockOptions {
    /// Touch every page once, so first use does not page-fault.
    pub prefault: bool,
    /// Ask for transparent huge pages for blocks of a huge page and more
    /// (Linux and Android; see [`os::huge_page_size`]).
    pub huge_pages: bool,
}

impl BlockOptions {
    /// The alignment a block of `size` bytes gets: the huge page when huge
    /// pages are asked for, known here, and the block holds one; else the page.
    pub(crate) fn align(self, size: usize) -> usize {
        match self.huge_pages.then(huge_page_size).flatten() {
            Some(huge) if size >= huge => huge,
            _ => page_size(),
        }
    }
}

/// Rounds `bytes` up to a block size class: whole pages (of
/// [`page_size`], read at run time), and above eight pages one of eight steps
/// per power of two, so a block is at most 12.5% larger than asked (and
/// blocks of similar sizes share a class in the cache).
///
/// Returns `None` when the class would pass `isize::MAX`.
pub(crate) fn size_class(bytes: usize) -> Option<usize> {
    let page = page_size();
    let pages = round_up(bytes.max(1), page)?;
    let step = if pages <= 8 * page {
        page
    } else {
        // The largest power of two not above `pages`, over 8.
        (1usize << (usize::BITS - 1 - pages.leading_zeros())) / 8
    };
    round_up(pages, step).filter(|&c| c <= isize::MAX as usize)
}

/// The largest size class not above `bytes` (0 below a page): what a limit
/// that leaves `bytes` of room lets a block be.
pub(crate) fn size_class_at_most(bytes: usize) -> usize {
    let page = page_size();
    let pages = bytes & !(page - 1);
    if pages <= 8 * page {
        return pages;
    }
    // A class above eight pages is a multiple of its step (see `size_class`).
    let step = (1usize << (usize::BITS - 1 - pages.leading_zeros())) / 8;
    pages & !(step - 1)
}

/// `bytes` rounded up to a multiple of `pow2` (a power of two): a mask, not
/// the division `next_multiple_of` makes for a step known only at run time.
fn round_up(bytes: usize, pow2: usize) -> Option<usize> {
    debug_assert!(pow2.is_power_of_two());
    Some(bytes.checked_add(pow2 - 1)? & !(pow2 - 1))
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
        let size = size.max(page_size());
        let align = options.align(size);
        let layout = Layout::from_size_align(size, align)
            .map_err(|_| Error::SizeOverflow { size, align })?;
        // SAFETY: `size >= page_size() > 0`.
        let ptr = NonNull::new(unsafe { std::alloc::alloc(layout) })
            .ok_or(Error::OutOfMemory { size, align })?;
        let block = Block { ptr, layout };
        if align > page_size() {
            // SAFETY: exactly the allocation just made, which `block` owns.
            unsafe { os::advise_huge_pages(ptr, size) };
        }
        if options.prefault {
            // SAFETY: exactly the allocation just made, writable, owned by
            // `block` and handed out to no one yet.
            unsafe { os::prefault_pages(ptr, size) };
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
        self.layout.align() > page_size()
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `std::alloc::alloc(self.layout)` and this
        // is the only place it is freed.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}
