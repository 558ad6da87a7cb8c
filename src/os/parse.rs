//! What the environment and the system say, read as numbers and flags: pure
//! functions, with no system call and no state, at the bottom of the OS
//! layer, so that both the page-size reading (`page.rs`) and the Unix
//! backend (the huge page size in `/sys`) use them without either importing
//! the other.
//!
//! - [`parse_decimal`]: a decimal number (of bytes).
//! - [`page_size_from`]: the page size a `TEMPALLOC_PAGE_SIZE` value asks
//!   for, at most [`MAX_PAGE_SIZE`].
//! - [`reserve_off_from`]: whether a `TEMPALLOC_RESERVE` value refuses
//!   every reservation.

/// The largest page `TEMPALLOC_PAGE_SIZE` may ask for: the largest base page
/// of any kernel the crate targets is 64 KiB; 1 MiB leaves room to test past it.
pub(super) const MAX_PAGE_SIZE: usize = 1 << 20;

/// The page size for a `TEMPALLOC_PAGE_SIZE` of `value` on a system whose
/// page is `system` bytes: the value when it is a decimal number of bytes,
/// a power of two, at least `system` and at most 1 MiB; else `system` (an
/// unusable value is ignored, never an error: it is a test aid).
pub(super) fn page_size_from(value: Option<&[u8]>, system: usize) -> usize {
    value
        .and_then(parse_decimal)
        .filter(|&p| p.is_power_of_two() && p >= system && p <= MAX_PAGE_SIZE)
        .unwrap_or(system)
}

/// A decimal number: ASCII digits only, no sign, no overflow.
pub(super) fn parse_decimal(digits: &[u8]) -> Option<usize> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0usize, |n, &d| {
        let d = d.checked_sub(b'0').filter(|&d| d <= 9)?;
        n.checked_mul(10)?.checked_add(usize::from(d))
    })
}

/// Whether a `TEMPALLOC_RESERVE` of `value` refuses reservations: only
/// `off` does (any other value is ignored, never an error: a test aid).
pub(super) fn reserve_off_from(value: &[u8]) -> bool {
    value == b"off"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_is_a_power_of_two_from_the_system_page_to_1_mib() {
        let at = |value: &str, system| page_size_from(Some(value.as_bytes()), system);
        assert_eq!(page_size_from(None, 4096), 4096);
        for (value, page) in [
            ("16384", 16384),
            ("65536", 65536),
            ("4096", 4096),
            ("1048576", 1 << 20),
            // Below the system page, above 1 MiB, not a power of two: ignored.
            ("2048", 4096),
            ("2097152", 4096),
            ("12288", 4096),
            ("0", 4096),
            // Not a decimal number of bytes: ignored.
            ("", 4096),
            ("16K", 4096),
            (" 16384", 4096),
            ("+16384", 4096),
            ("0x4000", 4096),
            ("99999999999999999999999", 4096),
        ] {
            assert_eq!(at(value, 4096), page, "TEMPALLOC_PAGE_SIZE={value:?}");
        }
        assert_eq!(at("16384", 16384), 16384);
        assert_eq!(at("8192", 16384), 16384);
        assert_eq!(at("65536", 16384), 65536);
        assert_eq!(page_size_from(Some(&[0xFF]), 4096), 4096);
    }

    #[test]
    fn only_off_refuses_every_reservation() {
        assert!(reserve_off_from(b"off"));
        for value in ["", "on", "OFF", "off ", "0", "no", "false"] {
            assert!(
                !reserve_off_from(value.as_bytes()),
                "TEMPALLOC_RESERVE={value:?}"
            );
        }
    }
}
