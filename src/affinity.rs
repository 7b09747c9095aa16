//! Pinning threads to CPUs, reported rather than hidden when it cannot be done.

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
