//! A spawned binary of this workspace whose stdout and stderr go to a log file.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::paths::{profile_dir, try_bin_path};

/// How long [`ServiceProcess::terminate`] waits after SIGTERM before it sends SIGKILL.
pub const TERMINATE_GRACE: Duration = Duration::from_secs(15);

/// A running (or exited) child process; dropping it kills the process if it still runs.
#[derive(Debug)]
pub struct ServiceProcess {
    name: String,
    child: Child,
    log_path: PathBuf,
    status: Option<ExitStatus>,
}

impl ServiceProcess {
    /// Spawns `bin` with `args` and extra `env`. `bin` is a workspace binary name resolved with
    /// [`crate::bin_path`], or a path if it contains `/`. The child inherits the environment
    /// except `SLUICE_*` variables, so a developer's shell cannot steer a test; `RUST_LOG` does
    /// pass through. Output goes to a fresh file under `target/<profile>/sluice-test-logs/`;
    /// the first spawn of a process removes the files there of processes gone for [`LOG_KEPT`].
    pub fn spawn(bin: &str, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<ServiceProcess> {
        let program = if bin.contains('/') {
            PathBuf::from(bin)
        } else {
            try_bin_path(bin)?
        };
        let name = program
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| bin.to_owned());
        let log_path = new_log_path(&name)?;
        let log = File::create(&log_path)
            .with_context(|| format!("failed to create log file {}", log_path.display()))?;
        let log_err = log
            .try_clone()
            .with_context(|| format!("failed to share log file {}", log_path.display()))?;
        let mut command = Command::new(&program);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("SLUICE_") {
                command.env_remove(name);
            }
        }
        let child = crate::die_with_parent(&mut command)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .with_context(|| format!("failed to spawn {}", program.display()))?;
        Ok(ServiceProcess {
            name,
            child,
            log_path,
            status: None,
        })
    }

    /// Sends SIGTERM, waits up to [`TERMINATE_GRACE`] for the process to exit, then SIGKILLs it.
    /// Returns the exit status (a signal status if it had to be killed).
    pub fn terminate(&mut self) -> anyhow::Result<ExitStatus> {
        self.terminate_within(TERMINATE_GRACE)
    }

    /// [`ServiceProcess::terminate`] with an explicit grace period before SIGKILL.
    pub fn terminate_within(&mut self, grace: Duration) -> anyhow::Result<ExitStatus> {
        if let Some(status) = self.try_status()? {
            return Ok(status);
        }
        self.signal(libc::SIGTERM)?;
        match self.wait_exit(grace) {
            Ok(status) => Ok(status),
            Err(_) => {
                self.kill();
                self.status.with_context(|| {
                    format!(
                        "{} (pid {}) did not exit after SIGKILL",
                        self.name,
                        self.pid()
                    )
                })
            }
        }
    }

    /// Kills the process with SIGKILL and reaps it; does nothing if it has already exited.
    pub fn kill(&mut self) {
        if self.status.is_some() {
            return;
        }
        // errors mean the process is already gone; wait() below reaps it either way
        let _ = self.child.kill();
        if let Ok(status) = self.child.wait() {
            self.status = Some(status);
        }
    }

    /// Sends `signal` (e.g. `libc::SIGTERM`) to the process if it has not been reaped yet.
    pub fn signal(&mut self, signal: libc::c_int) -> anyhow::Result<()> {
        if self.try_status()?.is_some() {
            bail!("{} (pid {}) has already exited", self.name, self.pid());
        }
        // The child is not reaped yet, so its pid cannot have been reused by another process.
        send_signal(&self.name, self.pid(), signal)
    }

    /// The exit status if the process has exited, without blocking.
    pub fn try_status(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = self
                .child
                .try_wait()
                .with_context(|| format!("failed to poll {} (pid {})", self.name, self.pid()))?;
        }
        Ok(self.status)
    }

    /// Waits up to `deadline` for the process to exit on its own (polling, never signalling).
    pub fn wait_exit(&mut self, deadline: Duration) -> anyhow::Result<ExitStatus> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(2);
        loop {
            if let Some(status) = self.try_status()? {
                return Ok(status);
            }
            if started.elapsed() >= deadline {
                bail!(
                    "{} (pid {}) still running after {deadline:?}; log: {}",
                    self.name,
                    self.pid(),
                    self.log_path.display()
                );
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// The combined stdout and stderr captured so far.
    pub fn log(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// Sends `signal` to the process `pid` (named `name` in the error). The caller makes sure the
/// pid is still its child's (not reaped), or accepts that it may have been reused.
pub fn send_signal(name: &str, pid: u32, signal: libc::c_int) -> anyhow::Result<()> {
    let pid = libc::pid_t::try_from(pid).context("pid does not fit pid_t")?;
    // SAFETY: kill(2) has no memory-safety preconditions.
    if unsafe { libc::kill(pid, signal) } != 0 {
        let error = std::io::Error::last_os_error();
        bail!("failed to send signal {signal} to {name} (pid {pid}): {error}");
    }
    Ok(())
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn new_log_path(name: &str) -> anyhow::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static PRUNED: std::sync::Once = std::sync::Once::new();
    let dir = profile_dir()?.join("sluice-test-logs");
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("failed to create log directory {}", dir.display()))?;
    PRUNED.call_once(|| prune_logs(&dir));
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    Ok(dir.join(format!("{name}-{}-{n}.log", std::process::id())))
}

/// How long the log of a process that is gone is kept: a failing test prints its stack's logs,
/// so the files are only for a look soon after.
pub const LOG_KEPT: Duration = Duration::from_secs(3600);

/// Removes the logs in `dir` that [`stale_log`] says are stale. Best effort: a file that cannot
/// be read or removed stays.
fn prune_logs(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    let alive = |pid: u32| Path::new(&format!("/proc/{pid}")).exists();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Ok(modified) = entry.metadata().and_then(|m| m.modified()) else {
            continue;
        };
        let age = now.duration_since(modified).unwrap_or_default();
        if stale_log(name, age, alive) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Whether the log file `name` (`<binary>-<pid>-<n>.log`, as [`new_log_path`] names it), last
/// written `age` ago, is stale: written by a process that is no longer `alive`, and older than
/// [`LOG_KEPT`]. Other files are never stale.
fn stale_log(name: &str, age: Duration, alive: impl Fn(u32) -> bool) -> bool {
    let Some(stem) = name.strip_suffix(".log") else {
        return false;
    };
    let mut parts = stem.rsplitn(3, '-');
    let (Some(n), Some(pid), Some(binary)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    !binary.is_empty() && n.parse::<u64>().is_ok() && age > LOG_KEPT && !alive(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_old_logs_of_processes_that_are_gone_are_stale() {
        let old = LOG_KEPT + Duration::from_secs(1);
        let gone = |_| false;
        assert!(stale_log("sluice-applier-877-0.log", old, gone));
        assert!(!stale_log("sluice-applier-877-0.log", LOG_KEPT, gone));
        assert!(!stale_log("sluice-applier-877-0.log", old, |pid| pid == 877));
        for other in [
            "notes.txt",
            "877-0.log",
            "sluice-applier-x-0.log",
            "a-1-b.log",
        ] {
            assert!(!stale_log(other, old, gone), "{other}");
        }
    }
}
