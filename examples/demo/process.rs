//! What the operating system says about this process: minor page faults
//! and CPU time so far, and resident memory (now, and at its peak).

/// Minor page faults of the process so far (every thread), on Linux.
#[cfg(target_os = "linux")]
pub fn minor_faults() -> Option<u64> {
    rusage().map(|u| u.ru_minflt as u64)
}

#[cfg(not(target_os = "linux"))]
pub fn minor_faults() -> Option<u64> {
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
}
