//! The disks a recorder writes scans to. Each disk is a failure domain: one that fills or
//! fails leaves the set and the others carry on. Writers take whichever disk is ready next
//! (the queue of idle disks is first in, first out: among disks equally ready, chunks rotate
//! round robin; a slow disk comes back late and so gets fewer chunks).
//!
//! Also what a recording asks of the disks before it starts: that they can be written, and
//! whether each is a file system of its own (`open_disks`); and what a scan asks: a name no
//! scan on them has (`unused_name`), and whether they hold what it will need
//! (`free_space_note`).

use crate::record::config::Target;
use crate::record::diskio::Fault;
use crate::record::scan::durable::DurableChunk;
use crate::record::scan::window::Window;
use crate::record::scan::ScanSetup;
use crate::record::target::{check_target, TargetError};
use crate::vdif::catalogue;
use crate::vdif::layout;
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

/// A file of the scan kept open on a disk between chunks (the `file` and `mk6` formats).
pub struct OpenScanFile {
    /// The scan (or data stream, with a split) this file belongs to.
    pub scan: String,
    pub file: File,
    pub path: PathBuf,
    /// Bytes in the file (headers included).
    pub end: u64,
    /// Bytes of frames in it.
    pub frame_bytes: u64,
    pub direct: bool,
    /// Largest Mark6 block so far, its header included.
    pub largest_block: u64,
    /// Which part of a `file` scan rotated by size (0: the first, or not rotated).
    pub part: u64,
    /// Chunks written to it since its last sync (`chunk::make_durable`), which makes them
    /// durable; and where and when that sync was.
    pub unsynced: Vec<DurableChunk>,
    pub synced_to: u64,
    pub synced_at: Instant,
    /// Whether its name in the disk's directory has been synced.
    pub entry_synced: bool,
}

impl OpenScanFile {
    /// A file just created, empty.
    pub fn new(scan: String, file: File, path: PathBuf, direct: bool, part: u64) -> OpenScanFile {
        OpenScanFile {
            scan,
            file,
            path,
            end: 0,
            frame_bytes: 0,
            direct,
            largest_block: 0,
            part,
            unsynced: Vec::new(),
            synced_to: 0,
            synced_at: Instant::now(),
            entry_synced: false,
        }
    }
}

/// A file of the scan closed while the scan went on (a `file` scan rotated by size).
pub struct ClosedScanFile {
    pub path: PathBuf,
    pub bytes: u64,
    /// Why it may not be safely on disk (its `fdatasync` failed).
    pub error: Option<String>,
    /// Its chunks that closing it made durable, until they are claimed.
    pub durable: Vec<DurableChunk>,
}

/// What one scan has on a disk while it is written.
#[derive(Default)]
pub struct ScanOnDisk {
    /// Bytes of frames written in this scan.
    pub frame_bytes: u64,
    /// Files (vbs chunks) written whole in this scan.
    pub chunks: u64,
    /// The scan's files open on this disk: one, or one per data stream with a split.
    pub open: Vec<OpenScanFile>,
    /// The scan's files already closed on this disk (parts of a rotated `file` scan).
    pub closed: Vec<ClosedScanFile>,
    /// vbs: the data streams of this scan whose directory's name on this disk is synced.
    pub vbs_dirs_synced: Vec<String>,
}

/// What a disk did in the run, and has of each scan being written. Two scans are written at
/// once where one follows another without a pause: the first one's last chunks go to disk
/// while the next one's first chunks fill.
#[derive(Default)]
pub struct DiskState {
    /// Bytes written to this disk over the whole run (the fault aid counts from here).
    pub used: u64,
    /// Why the disk left the set, if it did.
    pub dropped: Option<String>,
    /// By scan name.
    pub scans: HashMap<String, ScanOnDisk>,
}

impl DiskState {
    /// Runs `f` on scan `name`'s part of this disk (made empty at its first use) and the
    /// bytes used on the disk.
    pub fn with_scan<R>(
        &mut self,
        name: &str,
        f: impl FnOnce(&mut ScanOnDisk, &mut u64) -> R,
    ) -> R {
        let scan = self.scans.entry(name.to_string()).or_default();
        f(scan, &mut self.used)
    }
}

pub struct Disk {
    pub path: PathBuf,
    pub fault: Option<Fault>,
    pub state: Mutex<DiskState>,
    /// The disk has left the set (read without the state's lock, which a writer holds for a
    /// whole chunk).
    gone: AtomicBool,
}

impl Disk {
    pub fn gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }
}

pub struct DiskSet {
    pub disks: Vec<Disk>,
    ready: Mutex<VecDeque<usize>>,
    cv: Condvar,
}

impl DiskSet {
    pub fn new(paths: &[PathBuf], faults: &[(PathBuf, Fault)]) -> DiskSet {
        let disks = paths
            .iter()
            .map(|p| Disk {
                path: p.clone(),
                fault: faults.iter().find(|(d, _)| d == p).map(|(_, f)| *f),
                state: Mutex::new(DiskState::default()),
                gone: AtomicBool::new(false),
            })
            .collect();
        DiskSet {
            disks,
            ready: Mutex::new(VecDeque::new()),
            cv: Condvar::new(),
        }
    }

    /// Before scan `name`: its part of every disk empty; with `rotate_from_first` (no other
    /// scan is being written) every disk still in the set ready, in order.
    pub fn begin_scan(&self, name: &str, rotate_from_first: bool) {
        let mut ready = self.ready.lock().unwrap();
        if rotate_from_first {
            ready.clear();
        }
        for (i, d) in self.disks.iter().enumerate() {
            let mut s = d.state.lock().unwrap();
            s.scans.insert(name.to_string(), ScanOnDisk::default());
            if rotate_from_first && !d.gone() {
                ready.push_back(i);
            }
        }
    }

    /// After scan `name`: what it had on each disk, in disk order, now forgotten.
    pub fn end_scan(&self, name: &str) -> Vec<ScanOnDisk> {
        self.disks
            .iter()
            .map(|d| {
                let mut s = d.state.lock().unwrap();
                s.scans.remove(name).unwrap_or_default()
            })
            .collect()
    }

    /// The disks still in the set.
    pub fn alive(&self) -> Vec<usize> {
        (0..self.disks.len())
            .filter(|i| !self.disks[*i].gone())
            .collect()
    }

    /// Whether any disk is still in the set.
    pub fn any_alive(&self) -> bool {
        self.disks.iter().any(|d| !d.gone())
    }

    /// Waits for the next ready disk; None once no disk is left in the set.
    pub fn take(&self) -> Option<usize> {
        let mut ready = self.ready.lock().unwrap();
        loop {
            while let Some(i) = ready.pop_front() {
                // A disk dropped while it waited in the queue stays out.
                if !self.disks[i].gone() {
                    return Some(i);
                }
            }
            if self.alive().is_empty() {
                return None;
            }
            ready = self.cv.wait(ready).unwrap();
        }
    }

    /// A writer is done with disk `i`: it is ready again (at the back of the queue).
    pub fn give(&self, i: usize) {
        self.ready.lock().unwrap().push_back(i);
        self.cv.notify_one();
    }

    /// Disk `i` failed or filled: it leaves the set for the rest of the run.
    /// The caller must not hold the disk's state lock.
    pub fn drop_disk(&self, i: usize, why: String) {
        self.disks[i]
            .state
            .lock()
            .unwrap()
            .dropped
            .get_or_insert(why);
        // Under the queue's lock, so a writer between its check and its wait cannot miss
        // the wake-up: writers waiting for a disk must see whether any is left.
        let _ready = self.ready.lock().unwrap();
        self.disks[i].gone.store(true, Ordering::Release);
        self.cv.notify_all();
    }
}

/// Bytes free for an unprivileged writer on the file system of `dir`.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs fills the struct we own from a valid C string.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some(s.f_bavail as u64 * s.f_frsize as u64)
}

/// Whether `dir` is the root of a mounted file system (its device differs from its parent's,
/// or it is its own parent).
pub fn is_mount_point(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(canon) = dir.canonicalize() else {
        return false;
    };
    let Some(parent) = canon.parent() else {
        return true;
    };
    match (std::fs::metadata(&canon), std::fs::metadata(parent)) {
        (Ok(a), Ok(b)) => a.dev() != b.dev() || a.ino() == b.ino(),
        _ => false,
    }
}

/// The disks of a recording, opened, and what the operator should know of them.
pub struct OpenedDisks {
    pub set: DiskSet,
    pub notes: Vec<String>,
}

/// The disks exist and can be written; faults (test aid) attached. A disk that is not a mount
/// point is noted: it may share its file system, and so its failures, with another.
pub fn open_disks(setup: &ScanSetup) -> Result<OpenedDisks, TargetError> {
    for d in &setup.disks {
        check_target(&Target::Dir {
            dir: d.clone(),
            prefix: String::new(),
        })
        .map_err(|e| match e {
            TargetError::NoDirectory { dir, .. } => TargetError::NoDirectory { name: "disks", dir },
            TargetError::NotWritable { path, source, .. } => TargetError::NotWritable {
                name: "disks",
                path,
                source,
            },
            other => other,
        })?;
    }
    let notes = setup
        .disks
        .iter()
        .filter(|d| !is_mount_point(d))
        .map(|d| format!(
            "disk {} is not a mount point: a FlexBuff or Mark6 disk is one (a directory on a shared file system is no separate failure domain)",
            d.display()
        ))
        .collect();
    Ok(OpenedDisks {
        set: DiskSet::new(&setup.disks, &setup.faults),
        notes,
    })
}

/// `wanted`, or with jive5ab's suffix when a scan of that name is on any disk (in any
/// format) or was recorded in this run.
pub fn unused_name(wanted: &str, disks: &DiskSet, used: &[String]) -> String {
    // The catalogue answers from what it holds (brought up to date by the kernel's events):
    // no disk is walked, however many scans it holds.
    let paths: Vec<PathBuf> = disks.disks.iter().map(|d| d.path.clone()).collect();
    let taken = |n: &str| used.iter().any(|u| u == n) || catalogue::name_taken(n, &paths);
    if !taken(wanted) {
        return wanted.to_string();
    }
    (1..)
        .map(|k| format!("{wanted}{}", layout::repeat_suffix(k)))
        .find(|n| !taken(n))
        .expect("some suffix is free")
}

/// What the disks can hold against what the scan will need, for the operator.
pub fn free_space_note(
    disks: &DiskSet,
    alive: &[usize],
    window: &Window,
    fps: Option<u32>,
    bytes_per_second: f64,
) -> String {
    // Directories on one file system share its free space: count each file system once.
    let mut seen = Vec::new();
    let mut free = 0u64;
    for i in alive {
        let path = &disks.disks[*i].path;
        let dev = std::fs::metadata(path).map(|m| std::os::unix::fs::MetadataExt::dev(&m));
        if let Ok(dev) = dev {
            if seen.contains(&dev) {
                continue;
            }
            seen.push(dev);
        }
        free += free_bytes(path).unwrap_or(0);
    }
    let free_text = crate::units::format_size(free);
    let seconds = fps.and_then(|f| window.seconds(f));
    match (seconds, bytes_per_second > 0.0) {
        (Some(s), true) => {
            let need = (s * bytes_per_second) as u64;
            let verdict = if need <= free {
                "enough"
            } else {
                "NOT ENOUGH: the scan will be cut short when the disks fill"
            };
            format!(
                "disks: {free_text} free; the scan needs {} ({s:.1} s at {:.3} Gbit/s): {verdict}",
                crate::units::format_size(need),
                bytes_per_second * 8e-9
            )
        }
        (None, true) => format!(
            "disks: {free_text} free, {:.0} s at {:.3} Gbit/s",
            free as f64 / bytes_per_second,
            bytes_per_second * 8e-9
        ),
        _ => format!("disks: {free_text} free"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_disks_rotate_and_dropped_ones_leave() {
        let paths: Vec<PathBuf> = ["/a", "/b", "/c"].iter().map(PathBuf::from).collect();
        let set = DiskSet::new(&paths, &[]);
        set.begin_scan("s", true);
        let order: Vec<usize> = (0..3)
            .map(|_| {
                let i = set.take().unwrap();
                set.give(i);
                i
            })
            .collect();
        assert_eq!(order, [0, 1, 2]);
        // Disk 0 is slow: held while 1 and 2 each take two chunks.
        let slow = set.take().unwrap();
        assert_eq!(slow, 0);
        let mut got = Vec::new();
        for _ in 0..4 {
            let i = set.take().unwrap();
            got.push(i);
            set.give(i);
        }
        assert_eq!(got, [1, 2, 1, 2]);
        set.drop_disk(slow, "failed".into());
        set.drop_disk(1, "full".into());
        assert_eq!(set.alive(), [2]);
        set.drop_disk(2, "full".into());
        // Disk 2 is still in the ready queue but dropped: nothing must come back.
        assert!(set.alive().is_empty());
        assert_eq!(set.take(), None);
    }

    #[test]
    fn a_name_taken_on_any_disk_or_in_this_run_gets_a_suffix() {
        let root = std::env::temp_dir().join(format!("vdifrec-names-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let paths: Vec<PathBuf> = (0..2).map(|i| root.join(format!("d{i}"))).collect();
        for p in &paths {
            std::fs::create_dir_all(p).unwrap();
        }
        let set = DiskSet::new(&paths, &[]);
        assert_eq!(unused_name("s1", &set, &[]), "s1");
        // A vbs scan on the second disk, a split scan's data stream on the first.
        std::fs::create_dir_all(layout::vbs_dir(&paths[1], "s1")).unwrap();
        std::fs::write(layout::file_path(&paths[0], "s2_ds0"), b"").unwrap();
        assert_eq!(unused_name("s1", &set, &[]), "s1a");
        assert_eq!(unused_name("s2", &set, &[]), "s2a");
        // Names used in this run, not yet on disk, count too.
        assert_eq!(unused_name("s1", &set, &["s1a".into()]), "s1b");
        assert_eq!(unused_name("s3", &set, &["s3".into()]), "s3a");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn mount_points() {
        assert!(is_mount_point(Path::new("/")));
        assert!(is_mount_point(Path::new("/proc")));
        assert!(!is_mount_point(Path::new("/proc/self")));
    }
}
