//! Being a good citizen on a station host: an aggregate rate cap shared by all of a push's
//! connections, and lower CPU and I/O priority for its threads (never the caller's process:
//! an observation script that pushes keeps its own priority).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Spaces out bytes sent by any number of threads so that the total stays at or under
/// `bytes_per_s`. Time not used (a pause, the read-back between items) is not saved up beyond
/// `BURST`, so the cap holds over any stretch, not only on average since the start.
pub struct Pacer {
    bytes_per_s: Option<f64>,
    /// When the bytes counted so far are all due.
    due: Mutex<Instant>,
}

const BURST: Duration = Duration::from_millis(50);

impl Pacer {
    pub fn new(bytes_per_s: Option<f64>) -> Pacer {
        Pacer {
            bytes_per_s,
            due: Mutex::new(Instant::now()),
        }
    }

    /// Counts `bytes` about to be sent and returns how long to wait first to keep the cap.
    pub fn delay_for(&self, bytes: u64) -> Duration {
        let Some(rate) = self.bytes_per_s else {
            return Duration::ZERO;
        };
        let now = Instant::now();
        let earliest = now.checked_sub(BURST).unwrap_or(now);
        let mut due = self.due.lock().unwrap();
        *due = (*due).max(earliest) + Duration::from_secs_f64(bytes as f64 / rate);
        due.saturating_duration_since(now)
    }

    /// Waits as `delay_for` says, in steps of at most 100 ms so that `stop` is seen.
    pub fn pace(&self, bytes: u64, stop: &dyn Fn() -> bool) {
        let mut wait = self.delay_for(bytes);
        while !wait.is_zero() && !stop() {
            let step = wait.min(Duration::from_millis(100));
            std::thread::sleep(step);
            wait -= step;
        }
    }
}

/// The calling thread's id (the system call: glibc's `gettid` is newer than the wheel's 2.17).
fn thread_id() -> libc::id_t {
    unsafe { libc::syscall(libc::SYS_gettid) as libc::id_t }
}

/// Lowers the calling thread's CPU priority to nice 19 and its I/O class to idle (it reads
/// the disks only when nobody else does). Returns what could not be done, for the log.
pub fn be_nice() -> Vec<String> {
    let mut problems = Vec::new();
    let tid = thread_id();
    // On Linux, setpriority on a thread id sets that thread's nice value alone.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, 19) } != 0 {
        problems.push(format!("nice 19: {}", std::io::Error::last_os_error()));
    }
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    const IOPRIO_CLASS_IDLE: libc::c_long = 3;
    const IOPRIO_CLASS_SHIFT: libc::c_long = 13;
    let r = unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            tid as libc::c_long,
            IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT,
        )
    };
    if r != 0 {
        problems.push(format!(
            "I/O class idle: {}",
            std::io::Error::last_os_error()
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_spaces_bytes_out() {
        let p = Pacer::new(Some(1e6));
        // 1 MB at 1 MB/s is due a second after the start.
        let d = p.delay_for(1_000_000);
        assert!(
            d > Duration::from_millis(900) && d <= Duration::from_secs(1),
            "{d:?}"
        );
        let d = p.delay_for(500_000);
        assert!(d > Duration::from_millis(1400), "{d:?}");
        // Time not used is not saved up beyond the burst: after a pause, the cap holds again.
        let p = Pacer::new(Some(1e6));
        std::thread::sleep(Duration::from_millis(300));
        let d = p.delay_for(1_000_000);
        assert!(d > Duration::from_millis(900), "{d:?}");
        assert_eq!(Pacer::new(None).delay_for(1 << 40), Duration::ZERO);
    }

    #[test]
    fn a_thread_can_lower_its_own_priority() {
        std::thread::spawn(|| {
            // The I/O class may be refused in some containers; the CPU priority never is.
            assert!(be_nice().iter().all(|p| !p.starts_with("nice")));
            let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, thread_id()) };
            assert_eq!(nice, 19);
        })
        .join()
        .unwrap();
        // The process's other threads keep theirs.
        let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        assert_ne!(nice, 19);
    }
}
