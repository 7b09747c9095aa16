//! Pinning threads to CPUs, reported rather than hidden when it cannot be done, and the
//! recorder's policy of which thread goes where.
//!
//! The policy keeps the capture threads, which must never wait, on CPUs of their own, and
//! leaves the scheduler to place everything when the host has too few CPUs to set some
//! apart. It takes the CPUs this process may use as a plain list (`allowed_cpus()`), so that
//! it reads, and is tested, without the recorder or the host it runs on.

/// The CPUs this process may run on, by number.
pub fn allowed_cpus() -> Vec<usize> {
    core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect()
}

/// Pins the calling thread to `cpu`; returns the sentence for the operator.
pub fn pin_current(role: &str, cpu: usize) -> String {
    let available = core_affinity::get_core_ids().unwrap_or_default();
    if !available.iter().any(|c| c.id == cpu) {
        let ids: Vec<String> = available.iter().map(|c| c.id.to_string()).collect();
        return format!(
            "{role} thread: cpu {cpu} is not available to this process (allowed: {}); not pinned",
            ids.join(",")
        );
    }
    if core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) {
        format!("{role} thread: pinned to cpu {cpu}")
    } else {
        format!("{role} thread: pinning to cpu {cpu} failed; running unpinned")
    }
}

/// Names the calling thread (as `top -H` and `ps -L` show it).
pub fn name_current(name: &str) {
    if let Ok(c) = std::ffi::CString::new(&name[..name.len().min(15)]) {
        // SAFETY: sets the name of the calling thread from a valid C string.
        unsafe {
            libc::prctl(libc::PR_SET_NAME, c.as_ptr() as libc::c_ulong, 0, 0, 0);
        }
    }
}

/// CPU time the calling thread has used, in seconds.
pub fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: fills a timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// With neither the capture's nor the writer's CPU given: (capture, writer) on the last two
/// of the `allowed` CPUs, when there are four or more (fewer: None, the scheduler places them).
pub fn auto_pin(allowed: &[usize]) -> Option<(usize, usize)> {
    match allowed {
        [.., writer, capture] if allowed.len() >= 4 => Some((*capture, *writer)),
        _ => None,
    }
}

/// CPUs for the captures of `streams` streams after the first: free CPUs below the first
/// capture's (`capture_cpu`, None: not pinned), when the machine has one for each besides the
/// writers (fewer: None for each, the scheduler places them).
pub fn more_capture_cpus(
    allowed: &[usize],
    streams: usize,
    capture_cpu: Option<usize>,
    writer_cpu: Option<usize>,
) -> Vec<Option<usize>> {
    let cpus: Vec<usize> = allowed
        .iter()
        .copied()
        .filter(|c| Some(*c) != capture_cpu && Some(*c) != writer_cpu)
        .collect();
    if capture_cpu.is_none() || cpus.len() < streams + 2 {
        return vec![None; streams];
    }
    cpus.iter().rev().take(streams).map(|c| Some(*c)).collect()
}

/// CPUs for scan writers: the `allowed` CPUs other than the captures', when there are three or
/// more (fewer: none, the scheduler places the writers).
pub fn writer_cpus(allowed: &[usize], capture_cpus: &[usize]) -> Vec<usize> {
    let cpus: Vec<usize> = allowed
        .iter()
        .copied()
        .filter(|c| !capture_cpus.contains(c))
        .collect();
    if cpus.len() >= 3 {
        cpus
    } else {
        Vec::new()
    }
}

/// Runs `f` on a thread pinned to `cpu` (when given and permitted; `role` names it in the
/// pinning note), so that the memory it touches first is placed on that CPU's NUMA node.
pub fn on_cpu<T: Send>(role: &str, cpu: Option<usize>, f: impl FnOnce() -> T + Send) -> T {
    let Some(cpu) = cpu else { return f() };
    std::thread::scope(|s| {
        s.spawn(|| {
            let _ = pin_current(role, cpu);
            f()
        })
        .join()
        .expect("the pinned thread does not panic")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_cpus_are_left_to_the_scheduler() {
        assert_eq!(auto_pin(&[0, 1, 2]), None);
        assert_eq!(
            more_capture_cpus(&[0, 1, 2, 3], 2, Some(3), Some(2)),
            [None, None]
        );
        assert_eq!(writer_cpus(&[0, 1, 2], &[2]), Vec::<usize>::new());
    }

    #[test]
    fn captures_take_the_last_cpus_and_writers_the_rest() {
        let cpus: Vec<usize> = (0..8).collect();
        // The capture on the last CPU, the writer beside it.
        assert_eq!(auto_pin(&cpus), Some((7, 6)));
        // Two more streams below them, from the top down.
        assert_eq!(
            more_capture_cpus(&cpus, 2, Some(7), Some(6)),
            [Some(5), Some(4)]
        );
        // Unpinned first capture: the others are not pinned either.
        assert_eq!(more_capture_cpus(&cpus, 2, None, None), [None, None]);
        // Scan writers keep off the captures' CPUs.
        assert_eq!(writer_cpus(&cpus, &[7, 5, 4]), [0, 1, 2, 3, 6]);
    }

    #[test]
    fn on_cpu_runs_without_a_cpu_and_on_one() {
        assert_eq!(on_cpu("test", None, || 1 + 1), 2);
        let cpu = allowed_cpus().first().copied();
        assert_eq!(on_cpu("test", cpu, || 3), 3);
    }
}
