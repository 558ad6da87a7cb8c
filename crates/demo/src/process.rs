//! What the operating system says about this process: minor page faults
//! and CPU time so far (the process's, or the calling thread's faults),
//! resident memory (now, and at its peak), and which pages of a range are
//! not resident yet.

/// Minor page faults of the process so far (every thread), on Linux.
#[cfg(target_os = "linux")]
pub fn minor_faults() -> Option<u64> {
    rusage().map(|u| u.ru_minflt as u64)
}

#[cfg(not(target_os = "linux"))]
pub fn minor_faults() -> Option<u64> {
    None
}

/// Minor page faults of the calling thread so far (`RUSAGE_THREAD`), on
/// Linux: what one call took, whatever the other threads do meanwhile.
#[cfg(target_os = "linux")]
pub fn thread_minor_faults() -> Option<u64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: as in `rusage`, for the calling thread.
    let ok = unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) } == 0;
    // SAFETY: `getrusage` returned 0, so it initialised `usage`.
    ok.then(|| unsafe { usage.assume_init() }.ru_minflt as u64)
}

#[cfg(not(target_os = "linux"))]
pub fn thread_minor_faults() -> Option<u64> {
    None
}

/// How many of the pages that `len` bytes from `start` lie on are not
/// resident (`mincore`): each takes a page fault when first touched. The
/// range must lie in memory the process has mapped (memory it was handed).
/// Makes no allocation, so it can run between a program's steps without
/// changing what they allocate. `None` off Linux or when the call fails.
#[cfg(target_os = "linux")]
pub fn cold_pages(start: *const u8, len: usize) -> Option<u64> {
    if len == 0 {
        return Some(0);
    }
    // SAFETY: `sysconf` has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
    let first = start.addr() & !(page - 1);
    let pages = (start.addr() - first + len).div_ceil(page);
    // One byte per page; a range of more pages is asked for in parts.
    let mut vec = [0u8; 4096];
    let mut cold = 0;
    for part in (0..pages).step_by(vec.len()) {
        let n = vec.len().min(pages - part);
        let addr = (first + part * page) as *mut libc::c_void;
        // SAFETY: `addr` is page-aligned, the `n` pages from it lie in the
        // caller's mapped range, and `vec` has room for `n` bytes.
        if unsafe { libc::mincore(addr, n * page, vec.as_mut_ptr()) } != 0 {
            return None;
        }
        cold += vec[..n].iter().filter(|&&b| b & 1 == 0).count() as u64;
    }
    Some(cold)
}

#[cfg(not(target_os = "linux"))]
pub fn cold_pages(_start: *const u8, _len: usize) -> Option<u64> {
    None
}

/// CPU time of the process so far (every thread, user and system), in
/// milliseconds: unlike wall time, it does not grow while other processes
/// hold the cores, so it compares runs on a busy machine.
#[cfg(unix)]
pub fn cpu_ms() -> Option<f64> {
    let mut t = std::mem::MaybeUninit::<libc::timespec>::uninit();
    // SAFETY: `clock_gettime` writes a whole `timespec` through the valid
    // pointer and reports failure in its return value, checked before reading.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, t.as_mut_ptr()) } == 0;
    // SAFETY: `clock_gettime` returned 0, so it initialised `t`.
    ok.then(|| unsafe { t.assume_init() })
        .map(|t| t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 / 1e6)
}

#[cfg(not(unix))]
pub fn cpu_ms() -> Option<f64> {
    None
}

/// The most memory the process had resident at once, in bytes: `VmHWM` on
/// Linux, `getrusage`'s `ru_maxrss` elsewhere on Unix (bytes on Apple
/// platforms, KiB on the others).
#[cfg(unix)]
pub fn peak_rss() -> Option<u64> {
    if cfg!(target_os = "linux") {
        return status_bytes("VmHWM");
    }
    let max = rusage()?.ru_maxrss as u64;
    Some(if cfg!(target_vendor = "apple") {
        max
    } else {
        max * 1024
    })
}

/// Resident memory now, in bytes (`VmRSS`), on Linux.
pub fn rss() -> Option<u64> {
    status_bytes("VmRSS")
}

#[cfg(not(unix))]
pub fn peak_rss() -> Option<u64> {
    None
}

#[cfg(unix)]
fn rusage() -> Option<libc::rusage> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: `getrusage` writes a whole `rusage` through the valid pointer
    // and reports failure in its return value, checked before reading.
    let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) } == 0;
    // SAFETY: `getrusage` returned 0, so it initialised `usage`.
    ok.then(|| unsafe { usage.assume_init() })
}

/// A `kB` line of `/proc/self/status`, in bytes; `None` off Linux.
fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn resident_memory_and_faults_are_read() {
        let (now, peak) = (rss().expect("VmRSS"), peak_rss().expect("VmHWM"));
        assert!(now > 0 && peak >= now, "{now} {peak}");
        let (before, cpu) = (
            minor_faults().expect("getrusage"),
            cpu_ms().expect("clock_gettime"),
        );
        // Touch fresh pages: the fault count must move.
        let pages = vec![1u8; 64 << 20];
        assert!(
            minor_faults().expect("getrusage") > before,
            "{}",
            pages[4096]
        );
        // Faulting in 64 MiB takes CPU time.
        assert!(cpu_ms().expect("clock_gettime") > cpu);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn cold_pages_are_those_not_touched_yet() {
        // 64 KiB: a whole number of pages on every system the demo runs on.
        let part = 64 << 10;
        // A fresh mapping (above malloc's mmap threshold): hardly anything resident.
        let mut buf = vec![0u8; 64 * part];
        let ptr = buf.as_ptr();
        let before = cold_pages(ptr, buf.len()).expect("mincore");
        assert!(cold_pages(ptr, 4 * part).expect("mincore") > 0);
        let faults = thread_minor_faults().expect("RUSAGE_THREAD");
        buf[..4 * part].fill(1);
        std::hint::black_box(&mut buf);
        assert_eq!(cold_pages(ptr, 4 * part), Some(0));
        let after = cold_pages(ptr, buf.len()).expect("mincore");
        assert!(after < before, "{before} -> {after}");
        assert!(thread_minor_faults().expect("RUSAGE_THREAD") > faults);
        assert_eq!(cold_pages(ptr, 0), Some(0));
    }
}
