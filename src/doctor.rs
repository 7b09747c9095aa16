//! Host probes for `vdifrec doctor`, which tells an operator whether this host can record
//! before a station trusts it with an observation. Here: a quick write test of a directory,
//! how fast a disk takes large O_DIRECT writes, as blockwrite-style tools measure it. (The
//! doctor's other checks, socket buffers, NIC rings, huge pages and the like, read the host's
//! settings on the Python side: only what needs threads and O_DIRECT is here.)

use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A blockwrite-style test of a directory: `threads` writers of `block`-byte O_DIRECT writes
/// (buffered where the file system refuses O_DIRECT) for about `seconds` or `max_bytes` in
/// all. Returns (bytes per second, whether O_DIRECT was used). The test files are removed.
pub fn disk_write_test(
    dir: &Path,
    block: usize,
    threads: usize,
    max_bytes: u64,
    seconds: f64,
) -> std::io::Result<(f64, bool)> {
    use std::os::unix::fs::OpenOptionsExt;
    let block = block.next_multiple_of(4096).max(4096);
    let per_thread = max_bytes / threads.max(1) as u64;
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let written = AtomicU64::new(0);
    let direct_used = AtomicBool::new(true);
    let t0 = Instant::now();
    std::thread::scope(|s| -> std::io::Result<()> {
        let mut handles = Vec::new();
        for t in 0..threads.max(1) {
            let path = dir.join(format!(".vdifrec-doctor-{}-{t}", std::process::id()));
            let (written, direct_used) = (&written, &direct_used);
            handles.push(s.spawn(move || -> std::io::Result<()> {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(&path)
                    .or_else(|_| {
                        direct_used.store(false, Ordering::Relaxed);
                        std::fs::OpenOptions::new()
                            .write(true)
                            .create(true)
                            .truncate(true)
                            .open(&path)
                    })?;
                // A page-aligned buffer (O_DIRECT needs aligned memory) of recognisable bytes.
                let layout =
                    std::alloc::Layout::from_size_align(block, 4096).expect("valid layout");
                // SAFETY: a non-zero, aligned allocation, freed below.
                let buf = unsafe { std::alloc::alloc(layout) };
                if buf.is_null() {
                    let _ = std::fs::remove_file(&path);
                    return Err(std::io::Error::from(std::io::ErrorKind::OutOfMemory));
                }
                // SAFETY: filling and then reading our own allocation of `block` bytes.
                unsafe { std::ptr::write_bytes(buf, 0x5a, block) };
                let mut off = 0u64;
                let mut result = Ok(());
                while off < per_thread && Instant::now() < deadline {
                    // SAFETY: writing `block` bytes from our buffer to our file.
                    let rc = unsafe {
                        libc::pwrite(
                            file.as_raw_fd(),
                            buf as *const libc::c_void,
                            block,
                            off as libc::off_t,
                        )
                    };
                    if rc <= 0 {
                        result = Err(std::io::Error::last_os_error());
                        break;
                    }
                    off += rc as u64;
                    written.fetch_add(rc as u64, Ordering::Relaxed);
                }
                // SAFETY: our file descriptor; then freeing our allocation.
                unsafe {
                    libc::fdatasync(file.as_raw_fd());
                    std::alloc::dealloc(buf, layout);
                }
                let _ = std::fs::remove_file(&path);
                result
            }));
        }
        for h in handles {
            h.join().expect("write-test thread")?;
        }
        Ok(())
    })?;
    let secs = t0.elapsed().as_secs_f64().max(1e-9);
    Ok((
        written.load(Ordering::Relaxed) as f64 / secs,
        direct_used.load(Ordering::Relaxed),
    ))
}
