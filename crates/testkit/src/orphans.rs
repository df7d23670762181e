//! Children that do not outlive their test: a test or benchmark killed by a signal runs no
//! destructors, and a nats-server or service it started would keep running (and keep using
//! CPU that the next benchmark measures).

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes the child started by `command` receive SIGKILL when the thread that starts it ends
/// (Linux `PR_SET_PDEATHSIG`): on a normal end the owner has stopped it already; on a signal
/// it goes with its parent. Start children from threads that live as long as they should
/// (the main thread or a runtime worker, not a short-lived blocking-pool thread).
pub fn die_with_parent(command: &mut Command) -> &mut Command {
    // SAFETY: only async-signal-safe calls between fork and exec (`prctl`, `getppid`, `_exit`
    // are system calls), and nothing is allocated.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have ended between fork and prctl: then no signal would come.
            if libc::getppid() == 1 {
                libc::_exit(1);
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child started through `die_with_parent` from a thread is killed when that thread
    /// ends (the kernel's parent-death signal follows the starting thread, as it would follow
    /// a killed process).
    #[test]
    fn a_child_is_killed_when_its_starting_thread_ends() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let child = die_with_parent(Command::new("sleep").arg("30"))
                .spawn()
                .expect("sleep starts");
            tx.send(child).expect("receiver waits");
        })
        .join()
        .expect("spawning thread ends");
        let mut child = rx.recv().expect("child sent");
        let status = child.wait().expect("child reaped");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    }
}
