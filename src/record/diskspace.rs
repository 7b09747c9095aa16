//! How full a recording's disks are, from `statvfs`: what `/status` serves as `disk_fill` and
//! `disks`, and `/metrics` as `vdifrec_disk_*{disk="..."}`.
//!
//! Asked by the status thread when a client asks (a few system calls per disk), never by the
//! capture or the writers: a disk that is slow to answer delays the status, not a frame.

use serde::Serialize;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One disk of the recording, as its file system reports it now. The counts are `None` (null)
/// with `error` saying why when the file system could not be asked.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiskSpace {
    /// The recording's directory on that disk, as given (made absolute).
    pub path: String,
    /// Size of the file system (`f_blocks`).
    pub size_bytes: Option<u64>,
    /// Bytes in use (`f_blocks - f_bfree`).
    pub used_bytes: Option<u64>,
    /// Bytes the recorder may still write (`f_bavail`: without the blocks kept for root).
    pub free_bytes: Option<u64>,
    /// `used / (used + free)`, 0..1, as `df` gives Use%: 1 when the recorder can write no
    /// more. Equals `used / size` on a file system that keeps no blocks for root (XFS); a file
    /// system that reports no blocks (tmpfs without a size limit) reads 0.
    pub fill: Option<f64>,
    pub error: Option<String>,
}

impl DiskSpace {
    /// Asks the file system that holds `path`.
    pub fn of(path: &Path) -> DiskSpace {
        let shown = path.display().to_string();
        match statvfs(path) {
            Ok((blocks, bfree, bavail, unit)) => {
                DiskSpace::from_blocks(shown, blocks, bfree, bavail, unit)
            }
            Err(e) => DiskSpace {
                path: shown,
                size_bytes: None,
                used_bytes: None,
                free_bytes: None,
                fill: None,
                error: Some(e.to_string()),
            },
        }
    }

    /// From statvfs's counts: `blocks` in all, `bfree` free, `bavail` free to the recorder
    /// (not root), each of `unit` bytes.
    fn from_blocks(path: String, blocks: u64, bfree: u64, bavail: u64, unit: u64) -> DiskSpace {
        let used = blocks.saturating_sub(bfree);
        let fill = if used + bavail > 0 {
            used as f64 / (used + bavail) as f64
        } else {
            0.0
        };
        DiskSpace {
            path,
            size_bytes: Some(blocks * unit),
            used_bytes: Some(used * unit),
            free_bytes: Some(bavail * unit),
            fill: Some(fill),
            error: None,
        }
    }
}

/// statvfs's counts of the file system holding `path`: (blocks, free blocks, blocks free to
/// non-root, block size).
#[allow(clippy::unnecessary_cast)] // u64 on 64-bit Linux, narrower types elsewhere
fn statvfs(path: &Path) -> std::io::Result<(u64, u64, u64, u64)> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a NUL-terminated path and `buf` a statvfs the call fills in.
    let mut buf: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut buf) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let unit = if buf.f_frsize > 0 {
        buf.f_frsize
    } else {
        buf.f_bsize
    };
    Ok((
        buf.f_blocks as u64,
        buf.f_bfree as u64,
        buf.f_bavail as u64,
        unit as u64,
    ))
}

/// Every disk of the recording, asked now.
pub fn disks_now(paths: &[PathBuf]) -> Vec<DiskSpace> {
    paths.iter().map(|p| DiskSpace::of(p)).collect()
}

/// The fill of the fullest disk (the one that stops the recording first); None without disks
/// (monitoring) or when none could be asked.
pub fn fullest(disks: &[DiskSpace]) -> Option<f64> {
    disks.iter().filter_map(|d| d.fill).reduce(f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_reaches_one_when_the_recorder_can_write_no_more() {
        // 1000 blocks of 4 KiB, 50 kept for root (ext4's 5%).
        let d = DiskSpace::from_blocks("/mnt/disk0".into(), 1000, 450, 400, 4096);
        assert_eq!(d.size_bytes, Some(4_096_000));
        assert_eq!(d.used_bytes, Some(550 * 4096));
        assert_eq!(d.free_bytes, Some(400 * 4096));
        assert_eq!(d.fill, Some(550.0 / 950.0));
        let full = DiskSpace::from_blocks("/mnt/disk0".into(), 1000, 50, 0, 4096);
        assert_eq!(full.fill, Some(1.0));
        // Nothing kept for root (XFS): used / size.
        let xfs = DiskSpace::from_blocks("/mnt/disk1".into(), 1000, 250, 250, 4096);
        assert_eq!(xfs.fill, Some(0.75));
        // A file system that reports no blocks (tmpfs without a limit).
        let none = DiskSpace::from_blocks("/dev/shm".into(), 0, 0, 0, 4096);
        assert_eq!((none.size_bytes, none.fill), (Some(0), Some(0.0)));
    }

    #[test]
    fn figures_are_the_file_systems() {
        let dir = std::env::temp_dir();
        let d = DiskSpace::of(&dir);
        assert_eq!(d.path, dir.display().to_string());
        assert_eq!(d.error, None);
        let (blocks, _, _, unit) = statvfs(&dir).unwrap();
        // The size does not change while the test runs; what is used may (other processes).
        assert_eq!(d.size_bytes, Some(blocks * unit));
        let (used, free) = (d.used_bytes.unwrap(), d.free_bytes.unwrap());
        assert!(used <= d.size_bytes.unwrap() && free <= d.size_bytes.unwrap());
        assert!((0.0..=1.0).contains(&d.fill.unwrap()));
    }

    #[test]
    fn a_missing_disk_says_why_and_the_fullest_is_the_maximum() {
        let gone = DiskSpace::of(Path::new("/nonexistent/vdifrec-disk"));
        assert_eq!(gone.fill, None);
        assert!(gone.error.unwrap().contains("No such file"));
        let with = |fill| DiskSpace {
            path: "/d".into(),
            size_bytes: Some(100),
            used_bytes: None,
            free_bytes: None,
            fill,
            error: None,
        };
        assert_eq!(fullest(&[]), None);
        assert_eq!(fullest(&[with(None)]), None);
        assert_eq!(
            fullest(&[
                with(Some(0.25)),
                with(None),
                with(Some(0.75)),
                with(Some(0.5))
            ]),
            Some(0.75)
        );
        assert_eq!(disks_now(&[]), vec![]);
    }
}
