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
pub fn free_port() -> u16 {
    static HANDED_OUT: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    let handed_out = HANDED_OUT.get_or_init(Default::default);
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0 must work");
        let port = listener
            .local_addr()
            .expect("a bound listener has an address")
            .port();
        let mut seen = handed_out
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if seen.insert(port) {
            return port;
        }
    }
}
