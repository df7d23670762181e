//! Memory pages: every sluice binary runs without transparent huge pages (ADR 0040).
//!
//! mimalloc asks the kernel for huge pages on its arenas (`madvise(MADV_HUGEPAGE)`), so with
//! the common `madvise` setting of `/sys/kernel/mm/transparent_hugepage/enabled` each first
//! touch of an arena region makes the kernel zero and map 2 MiB. A service touches its arenas
//! sparsely: resident memory grows by whole huge pages and the zeroing is CPU on the load path.

/// Turns transparent huge pages off for this process and the processes it starts (the flag is
/// inherited across `fork` and `exec`). Called first thing in `main`; it applies to every
/// mapping the process has or makes. Where the kernel refuses (not Linux, or a kernel without
/// the `prctl`), the process keeps the kernel's setting, which changes only its memory use.
pub fn without_huge_pages() {
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}

/// Whether transparent huge pages are off for this process (`None` where it cannot be told).
pub fn huge_pages_disabled() -> Option<bool> {
    #[cfg(target_os = "linux")]
    return rustix::thread::transparent_huge_pages_are_disabled().ok();
    #[cfg(not(target_os = "linux"))]
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn the_process_runs_without_huge_pages_once_asked() {
        without_huge_pages();
        assert_eq!(huge_pages_disabled(), Some(true));
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(
            status
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["THP_enabled:", "0"]),
            "{status}"
        );
    }
}
