//! Where things are: the repository, this workspace's built binaries, free TCP ports.

use std::collections::HashSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use anyhow::{bail, Context};

/// The root of the sluice repository (the directory holding the workspace `Cargo.toml`).
pub fn repo_root() -> PathBuf {
    // crates/testkit -> crates -> <repo>
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .expect("testkit lives two levels below the repository root")
}

/// The directory holding the binaries of the running build profile, i.e. `target/<profile>`,
/// found from the current executable (a test binary lives in `target/<profile>/deps`).
pub fn profile_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("failed to find the current executable")?;
    let mut dir = exe
        .parent()
        .with_context(|| format!("executable {} has no parent directory", exe.display()))?;
    if dir.file_name().is_some_and(|name| name == "deps") {
        dir = dir
            .parent()
            .with_context(|| format!("{} has no parent directory", dir.display()))?;
    }
    Ok(dir.to_path_buf())
}

/// Path of the workspace binary `name` (e.g. `sluice-watcher`) in `target/<profile>/`, or an error
/// saying how to build it.
pub fn try_bin_path(name: &str) -> anyhow::Result<PathBuf> {
    let path = profile_dir()?.join(name);
    if !path.is_file() {
        bail!(
            "binary {name} not found at {}: build the workspace binaries first \
             (`cargo build --workspace --bins`, same profile and CARGO_TARGET_DIR as the tests)",
            path.display()
        );
    }
    Ok(path)
}

/// Like [`try_bin_path`], for tests: panics with the same message when the binary is not built.
pub fn bin_path(name: &str) -> PathBuf {
    match try_bin_path(name) {
        Ok(path) => path,
        Err(error) => panic!("{error:#}"),
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago and that this process has not handed out
/// before (so two servers of one test run never get the same port).
///
/// The port lies below the kernel's ephemeral range where the kernel has one, so between handing
/// it out and the server binding it, nothing the kernel picks a port for (a server binding port
/// 0, as the API test server does, or an outgoing connection) can take it: only another explicit
/// bind of the same port could. A service started on it, killed and started again finds it free
/// again for the same reason.
///
/// Test processes running side by side (nextest runs each test in its own) never hand out the
/// same port either: each port handed out is claimed with a lock on a file named after it in
/// [`claims_dir`], held until this process exits.
pub fn free_port() -> u16 {
    static NEXT: OnceLock<Mutex<PortPicker>> = OnceLock::new();
    let picker = NEXT.get_or_init(|| Mutex::new(PortPicker::new(ephemeral_start())));
    let mut picker = picker.lock().unwrap_or_else(|poison| poison.into_inner());
    loop {
        let port = match picker.next() {
            Some(port) => port,
            None => {
                let listener =
                    TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0 must work");
                listener
                    .local_addr()
                    .expect("a bound listener has an address")
                    .port()
            }
        };
        if picker.handed_out.insert(port)
            && claim(port)
            && TcpListener::bind(("127.0.0.1", port)).is_ok()
        {
            return port;
        }
    }
}

/// Where the ports handed out are claimed, one lock file per port, shared by every process of
/// the user that runs tests.
fn claims_dir() -> PathBuf {
    std::env::temp_dir().join("sluice-test-ports")
}

/// Claims `port` for this process: true when no other process holds it. The claim lasts until
/// this process exits (the kernel releases the lock then, however it ends). Where the claim
/// cannot be made at all (no writable temporary directory), the port is taken unclaimed.
fn claim(port: u16) -> bool {
    static HELD: Mutex<Vec<std::fs::File>> = Mutex::new(Vec::new());
    let dir = claims_dir();
    let file = std::fs::create_dir_all(&dir).and_then(|()| {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(port.to_string()))
    });
    let Ok(file) = file else {
        return true;
    };
    match file.try_lock() {
        Ok(()) => {
            HELD.lock()
                .unwrap_or_else(|poison| poison.into_inner())
                .push(file);
            true
        }
        Err(std::fs::TryLockError::WouldBlock) => false,
        Err(std::fs::TryLockError::Error(_)) => true,
    }
}

/// The lowest port of the kernel's ephemeral range (what binding port 0 and outgoing connections
/// get), when the kernel says.
fn ephemeral_start() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

/// Below this, ports are commonly fixed ones of local daemons.
const LOWEST_PICKED: u16 = 10_000;

/// Hands out the ports between [`LOWEST_PICKED`] and the ephemeral range in turn, from a random
/// start (so concurrent test processes rarely try the same ones), each at most once; `None` when
/// there is no such range or it is used up (then the kernel picks).
struct PortPicker {
    range: std::ops::Range<u16>,
    next: u16,
    left: usize,
    handed_out: HashSet<u16>,
}

impl PortPicker {
    fn new(ephemeral_start: Option<u16>) -> PortPicker {
        use std::hash::{BuildHasher as _, Hasher as _};
        let seed = std::hash::RandomState::new().build_hasher().finish();
        PortPicker::seeded(ephemeral_start, seed)
    }

    fn seeded(ephemeral_start: Option<u16>, seed: u64) -> PortPicker {
        let range = match ephemeral_start {
            Some(start) if start > LOWEST_PICKED => LOWEST_PICKED..start,
            _ => 0..0,
        };
        let left = range.len();
        let next = if left == 0 {
            0
        } else {
            range.start + (seed % left as u64) as u16
        };
        PortPicker {
            range,
            next,
            left,
            handed_out: HashSet::new(),
        }
    }

    fn next(&mut self) -> Option<u16> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let port = self.next;
        self.next = if port + 1 >= self.range.end {
            self.range.start
        } else {
            port + 1
        };
        Some(port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_picked_below_the_ephemeral_range_each_once_then_left_to_the_kernel() {
        let mut picker = PortPicker::seeded(Some(LOWEST_PICKED + 3), 7);
        let picked: Vec<Option<u16>> = (0..4).map(|_| picker.next()).collect();
        // 7 % 3 = 1: from the second port of the range, wrapping round to its first.
        assert_eq!(
            picked,
            vec![
                Some(LOWEST_PICKED + 1),
                Some(LOWEST_PICKED + 2),
                Some(LOWEST_PICKED),
                None
            ]
        );
    }

    #[test]
    fn without_room_below_the_ephemeral_range_the_kernel_picks() {
        assert_eq!(PortPicker::seeded(Some(LOWEST_PICKED), 0).next(), None);
        assert_eq!(PortPicker::seeded(Some(1024), 0).next(), None);
        assert_eq!(PortPicker::seeded(None, 0).next(), None);
    }

    #[test]
    fn a_port_claimed_by_another_process_is_not_handed_out() {
        let port = free_port();
        // Another process holding a port's claim is what a second open file's lock sees: flock
        // locks belong to the open file, so this process's own second open is refused too.
        let other = std::fs::OpenOptions::new()
            .write(true)
            .open(claims_dir().join(port.to_string()))
            .expect("the handed-out port's claim file exists");
        assert!(
            matches!(other.try_lock(), Err(std::fs::TryLockError::WouldBlock)),
            "port {port} was handed out without holding its claim"
        );
        // And a port another holds the claim of is not claimed again.
        let open = |port: u16| {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(claims_dir().join(port.to_string()))
        };
        let (unclaimed, _held) = (LOWEST_PICKED..u16::MAX)
            .find_map(|candidate| {
                let file = open(candidate).ok()?;
                file.try_lock().ok()?;
                Some((candidate, file))
            })
            .expect("some port is unclaimed");
        assert!(
            !claim(unclaimed),
            "a port claimed elsewhere was claimed again"
        );
    }

    #[test]
    fn a_handed_out_port_is_outside_the_ephemeral_range_and_never_repeats() {
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        let distinct: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        if let Some(start) = ephemeral_start().filter(|start| *start > LOWEST_PICKED) {
            assert!(
                ports
                    .iter()
                    .all(|port| (LOWEST_PICKED..start).contains(port)),
                "{ports:?}"
            );
        }
    }
}
