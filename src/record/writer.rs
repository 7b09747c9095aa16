//! The disk writer thread: frames from the ring to files, every byte accounted for.
//!
//! Runs of frames whose byte length is a multiple of 4096 go straight from the ring to the
//! file with O_DIRECT where the file system allows it (no page cache, no copy). Elsewhere
//! writes are buffered, and `sync_file_range` + `posix_fadvise(DONTNEED)` keep the page cache
//! from growing. Files are preallocated ahead (`FALLOC_FL_KEEP_SIZE`, so a file's size is
//! always what was written, even after a crash), rotated by size, synced and trimmed on close.
//! On stop the ring is drained completely; the last partial run is written without O_DIRECT.
//! A write that fails (disk full) leaves the file ending on a frame boundary and stops the
//! recording; what was buffered but not written is then `bytes_dropped_disk`.

use crate::record::config::Target;
use crate::record::diskio::{self, Budget, Fault, FaultKind};
use crate::record::latency;
use crate::record::ring::Ring;
use crate::record::shared::Shared;
use crate::record::stats::FileRecord;
use crate::vdif::header::Header;
use crate::vdif::time::{utc_unix, Utc};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest single write.
const MAX_WRITE_BYTES: u64 = 16 << 20;
/// Preallocation step ahead of the write position.
const PREALLOCATE_BYTES: u64 = 256 << 20;
/// Idle wait when the ring is empty.
const IDLE_WAIT: Duration = Duration::from_micros(200);

#[derive(Clone, Debug)]
pub struct WriterConfig {
    pub target: Target,
    /// Rotate after this many bytes (rounded down to whole aligned runs; None: one file).
    pub file_size: Option<u64>,
    /// Try O_DIRECT.
    pub direct: bool,
    pub cpu: Option<usize>,
    /// Test aid: limit the write rate to this many bytes per second (a slow disk).
    pub throttle: Option<u64>,
    /// Test aid: fail with "no space" once this many bytes are written (a full disk).
    pub disk_limit: Option<u64>,
}

struct OpenFile {
    file: File,
    path: PathBuf,
    frames: u64,
    direct: bool,
    preallocated_to: u64,
    /// Byte range written last, to be flushed out of the page cache (buffered mode).
    pending_flush: Option<(u64, u64)>,
    /// Its frames (first, end sequence numbers) and when their write returned (ns), for the
    /// durable latency stage.
    pending_frames: Option<(u64, u64, i64)>,
}

pub fn run(shared: Arc<Shared>, cfg: WriterConfig) {
    crate::affinity::name_current("vdifrec-writer");
    if let Some(cpu) = cfg.cpu {
        shared.note(crate::affinity::pin_current("writer", cpu));
    }
    let Some(ring) = wait_for_ring(&shared) else {
        return;
    };
    let mut w = Writer {
        shared: shared.clone(),
        ring: ring.clone(),
        cfg,
        file: None,
        read: ring.read_seq(),
        written_total: 0,
        file_index: 0,
        direct_note_given: false,
        started: Instant::now(),
    };
    if let Err(e) = w.run() {
        shared.fail(e);
    }
    if let Err(e) = w.close_file() {
        shared.fail(e);
    }
    shared.set_writer_cpu_s(crate::affinity::thread_cpu_seconds());
}

fn wait_for_ring(shared: &Shared) -> Option<Arc<Ring>> {
    loop {
        if let Some(r) = shared.ring() {
            return Some(r);
        }
        if shared.capture_done() && shared.ring().is_none() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

struct Writer {
    shared: Arc<Shared>,
    ring: Arc<Ring>,
    cfg: WriterConfig,
    file: Option<OpenFile>,
    read: u64,
    written_total: u64,
    file_index: u32,
    direct_note_given: bool,
    started: Instant,
}

impl Writer {
    fn run(&mut self) -> Result<(), String> {
        let fs = self.ring.frame_size() as u64;
        let run = self.ring.run();
        let file_frames = self.cfg.file_size.map(|b| (b / fs / run * run).max(run));
        loop {
            // Read `done` before the write index: once done, the index is final.
            let done = self.shared.capture_done();
            let avail = self.ring.write_seq() - self.read;
            if avail == 0 {
                if done || self.shared.failed() {
                    return Ok(());
                }
                std::thread::sleep(IDLE_WAIT);
                continue;
            }
            if self.file.is_none() {
                self.open_next()?;
            }
            let in_file = self.file.as_ref().map_or(0, |f| f.frames);
            let room = file_frames.map_or(u64::MAX, |n| n - in_file);
            let mut n = avail.min(room).min(MAX_WRITE_BYTES / fs / run * run);
            let whole_runs = n / run * run;
            if whole_runs > 0 {
                n = whole_runs;
            } else if !done {
                // Wait for a whole run unless this is the tail of the recording.
                std::thread::sleep(IDLE_WAIT);
                continue;
            }
            self.write(n, n % run != 0)?;
            if file_frames.is_some_and(|max| self.file.as_ref().is_some_and(|f| f.frames >= max)) {
                self.close_file()?;
            }
        }
    }

    /// Name of the next file, from the first frame it will hold.
    fn next_path(&mut self) -> PathBuf {
        self.file_index += 1;
        match &self.cfg.target {
            Target::File(p) => {
                if self.file_index == 1 {
                    p.clone()
                } else {
                    numbered(p, self.file_index - 1)
                }
            }
            Target::Dir { dir, prefix } => {
                // SAFETY: frame `read` is published and not yet released by us.
                let bytes = unsafe { self.ring.frames(self.read, 1) };
                let stamp = Header::parse_unchecked(bytes)
                    .map(|h| Utc::from_unix(utc_unix(h.ref_epoch(), h.seconds())).file_stamp())
                    .unwrap_or_else(|_| "unknown".into());
                dir.join(format!("{prefix}_{stamp}.vdif"))
            }
        }
    }

    fn open_next(&mut self) -> Result<(), String> {
        let mut path = self.next_path();
        let mut attempt = 0;
        loop {
            match diskio::create_new(&path, self.cfg.direct) {
                Ok((file, direct, note)) => {
                    if !self.direct_note_given {
                        self.shared.note(note);
                        self.direct_note_given = true;
                    }
                    self.shared
                        .set_current_file(Some(path.display().to_string()));
                    self.file = Some(OpenFile {
                        file,
                        path,
                        frames: 0,
                        direct,
                        preallocated_to: 0,
                        pending_flush: None,
                        pending_frames: None,
                    });
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 1000 => {
                    // Two files can start in the same second; never overwrite a recording.
                    attempt += 1;
                    path = numbered_in_place(&path, attempt);
                }
                Err(e) => {
                    return Err(format!("cannot create {}: {e}", path.display()));
                }
            }
        }
    }

    /// Writes frames `read..read + n` to the current file.
    fn write(&mut self, n: u64, tail: bool) -> Result<(), String> {
        let fs = self.ring.frame_size() as u64;
        let f = self.file.as_mut().expect("file open");
        let offset = f.frames * fs;
        let len = n * fs;
        if tail && f.direct {
            // The last partial run cannot be written with O_DIRECT.
            diskio::set_direct(&f.file, false).map_err(|e| format!("{}: {e}", f.path.display()))?;
            f.direct = false;
        }
        if offset + len > f.preallocated_to {
            let want = PREALLOCATE_BYTES.max(len);
            f.preallocated_to = if diskio::preallocate(&f.file, offset, want) {
                offset + want
            } else {
                u64::MAX
            };
        }
        // SAFETY: frames read..read+n are published and ours until released below.
        let data = unsafe { self.ring.frames(self.read, n) };
        let budget = Budget {
            fault: self.cfg.disk_limit.map(|after| Fault {
                kind: FaultKind::Full,
                after,
            }),
            used: self.written_total,
        };
        let result = diskio::write_all_at(&f.file, &mut f.direct, data, offset, budget);
        let done = match result {
            Ok(()) => len,
            Err((written, e)) => {
                // Keep whole frames only, so the file stays a valid VDIF file.
                let whole = written / fs * fs;
                // SAFETY: truncating our own file to a size we wrote.
                unsafe { libc::ftruncate(f.file.as_raw_fd(), (offset + whole) as libc::off_t) };
                f.frames += whole / fs;
                self.read += whole / fs;
                self.ring.release(self.read);
                self.written_total += whole;
                self.shared.set_bytes_written(self.written_total);
                self.shared.set_current_file_bytes(f.frames * fs);
                return Err(format!(
                    "writing {} failed after {} bytes: {e}; the recording stopped, the file ends on a frame boundary",
                    f.path.display(),
                    self.written_total
                ));
            }
        };
        let latency = self.shared.latency();
        let written_ns = latency.map_or(0, |_| latency::now_ns());
        if let Some(l) = latency {
            l.written(self.read, self.read + n, written_ns, f.direct);
        }
        if !f.direct {
            flush_behind(f, offset, done);
            if let Some(l) = latency {
                // The previous range is on the device now: flush_behind waited for it.
                if let Some((a, b, w)) = f.pending_frames.take() {
                    l.durable(a, b, w, latency::now_ns());
                }
                f.pending_frames = Some((self.read, self.read + n, written_ns));
            }
        }
        f.frames += n;
        self.read += n;
        self.ring.release(self.read);
        self.written_total += done;
        self.shared.set_bytes_written(self.written_total);
        self.shared.set_current_file_bytes(f.frames * fs);
        if let Some(rate) = self.cfg.throttle {
            // Test aid: behave like a disk that writes `rate` bytes per second.
            let due = Duration::from_secs_f64(self.written_total as f64 / rate as f64);
            let elapsed = self.started.elapsed();
            if due > elapsed {
                std::thread::sleep(due - elapsed);
            }
        }
        Ok(())
    }

    fn close_file(&mut self) -> Result<(), String> {
        let Some(f) = self.file.take() else {
            return Ok(());
        };
        let fs = self.ring.frame_size() as u64;
        let size = f.frames * fs;
        let sync = diskio::finish(&f.file, size);
        if let (Some(l), Some((a, b, w)), true) =
            (self.shared.latency(), f.pending_frames, sync.is_ok())
        {
            // The file's last buffered range reached the device with its closing fdatasync.
            l.durable(a, b, w, latency::now_ns());
        }
        self.shared.add_file(FileRecord {
            path: f.path.display().to_string(),
            bytes: size,
        });
        self.shared.set_current_file(None);
        if let Err(e) = sync {
            return Err(format!("fdatasync of {} failed: {e}", f.path.display()));
        }
        Ok(())
    }
}

/// Buffered mode: start write-back of what was just written, wait for the previous range and
/// drop it from the page cache, so a long recording does not fill memory with dirty pages.
fn flush_behind(f: &mut OpenFile, offset: u64, len: u64) {
    let fd = f.file.as_raw_fd();
    // SAFETY: hints and write-back requests on our own descriptor.
    unsafe {
        libc::sync_file_range(
            fd,
            offset as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        );
        if let Some((o, l)) = f.pending_flush {
            libc::sync_file_range(
                fd,
                o as libc::off64_t,
                l as libc::off64_t,
                libc::SYNC_FILE_RANGE_WAIT_BEFORE
                    | libc::SYNC_FILE_RANGE_WRITE
                    | libc::SYNC_FILE_RANGE_WAIT_AFTER,
            );
            libc::posix_fadvise(
                fd,
                o as libc::off_t,
                l as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            );
        }
    }
    f.pending_flush = Some((offset, len));
}

/// `dir/name.vdif` → `dir/name_0001.vdif`.
fn numbered(path: &Path, k: u32) -> PathBuf {
    let stem = path
        .file_stem()
        .map_or("recording".into(), |s| s.to_string_lossy().to_string());
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    path.with_file_name(format!("{stem}_{k:04}{ext}"))
}

/// For a name taken already: `x.vdif` → `x_1.vdif`, `x_1.vdif` → `x_2.vdif` (from the base).
fn numbered_in_place(path: &Path, attempt: u32) -> PathBuf {
    let stem = path
        .file_stem()
        .map_or(String::new(), |s| s.to_string_lossy().to_string());
    let base = if attempt > 1 {
        stem.rsplit_once('_')
            .map_or(stem.clone(), |(b, _)| b.to_string())
    } else {
        stem
    };
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    path.with_file_name(format!("{base}_{attempt}{ext}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            numbered(Path::new("/d/scan.vdif"), 3),
            PathBuf::from("/d/scan_0003.vdif")
        );
        let p = Path::new("/d/x_2026y333d01h02m03s.vdif");
        let one = numbered_in_place(p, 1);
        assert_eq!(one, PathBuf::from("/d/x_2026y333d01h02m03s_1.vdif"));
        assert_eq!(
            numbered_in_place(&one, 2),
            PathBuf::from("/d/x_2026y333d01h02m03s_2.vdif")
        );
    }
}
