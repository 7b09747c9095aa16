//! Scans a crash left: a recorder started on disks that hold a scan no recorder closed (no
//! summary beside it, see `vdif::scan::ScanSummary::closed`) says so before it records, with
//! what a reader will find in it (its whole frames, its torn bytes), so that the operator
//! knows what the last run left and whether `vdifrec scans --repair` is wanted before the
//! disks are shipped. Closed scans are not read, so a disk of many scans costs a listing.

use crate::vdif::layout::Format;
use crate::vdif::scan::{find_unclosed_scans, part_word, ScanLayout, ScanSummary};
use crate::vdif::stamp::Stamp;
use crate::vdif::torn::{grouped, summary_line};
use serde::Serialize;
use std::collections::HashMap;
use std::path::PathBuf;

/// A scan found on the disks at start that no recorder closed.
#[derive(Clone, Debug, Serialize)]
pub struct UnclosedScan {
    pub name: String,
    pub format: Format,
    /// Disks holding part of it.
    pub disks: Vec<String>,
    /// Whole frames, and their bytes: what every reader reads.
    pub frames: u64,
    pub bytes: u64,
    /// Bytes at the ends of files that are not whole frames (never read), and their pieces.
    pub torn_bytes: u64,
    pub torn_pieces: usize,
    /// The last whole frame: where the scan, as read, ends.
    pub last: Option<Stamp>,
    /// Why the scan cannot be read as it is (None: it can).
    pub error: Option<String>,
    /// The finding in words, as the recorder's notes print it.
    pub note: String,
}

impl UnclosedScan {
    fn of(s: ScanSummary) -> UnclosedScan {
        let frames = if s.frame_size > 0 {
            s.bytes / s.frame_size as u64
        } else {
            0
        };
        let mut found = UnclosedScan {
            name: s.name,
            format: s.format,
            disks: s.disks,
            frames,
            bytes: s.bytes,
            torn_bytes: s.torn_bytes,
            torn_pieces: s.torn.len(),
            last: s.last,
            error: s.error,
            note: String::new(),
        };
        found.note = found.describe(&s.torn);
        found
    }

    fn describe(&self, torn: &[crate::vdif::torn::TornPiece]) -> String {
        let fmt = match self.format {
            Format::File => "file",
            Format::Vbs => "vbs",
            Format::Mk6 => "mk6",
        };
        let place = format!(
            "scan {} ({fmt} on {} disk{})",
            self.name,
            self.disks.len(),
            if self.disks.len() == 1 { "" } else { "s" }
        );
        if let Some(e) = &self.error {
            return format!(
                "{place} was never closed (no summary beside it: a recorder stopped mid-scan, \
                 or another program wrote it) and cannot be read as it is: {e}"
            );
        }
        let mut text = format!(
            "{place} was never closed (no summary beside it: a recorder stopped mid-scan, or \
             another program wrote it): {} whole frames ({} bytes)",
            grouped(self.frames),
            grouped(self.bytes)
        );
        if let Some(last) = &self.last {
            text.push_str(&format!(" up to {}", last.describe()));
        }
        if torn.is_empty() {
            text.push_str("; nothing torn");
        } else {
            text.push_str(&format!(
                "; torn: {}, never read",
                summary_line(torn, part_word(self.format))
            ));
        }
        let disks: String = self.disks.iter().map(|d| format!(" --disk {d}")).collect();
        text.push_str(&format!(
            ". `vdifrec scans --repair {}{disks}` cuts it to whole frames and marks it closed",
            self.name
        ));
        text
    }
}

/// The most unclosed scans read and named one by one at start, newest first: a crash leaves
/// one scan (one per data stream of a split scan), and disks that other programs (jive5ab, a
/// Mark6) filled hold many without a vdifrec summary, which must not hold the start up.
pub const MOST_READ: usize = 16;

/// The scans on `disks` that no recorder closed; a listing that fails is said in the one
/// note it returns instead (the recording goes on: it writes under names not taken).
pub fn find(disks: &[PathBuf]) -> (Vec<UnclosedScan>, Vec<String>) {
    match searched(disks) {
        Ok((found, more)) => {
            let mut notes: Vec<String> = found.iter().map(|u| u.note.clone()).collect();
            if !more.is_empty() {
                notes.push(format!(
                    "{} older scan(s) on the disks have no summary beside them either (not \
                     read; written by another program, or left by earlier crashes): {}{}; \
                     `vdifrec scans --disk ...` lists them",
                    more.len(),
                    more.iter().take(8).cloned().collect::<Vec<_>>().join(", "),
                    if more.len() > 8 { ", ..." } else { "" }
                ));
            }
            (found, notes)
        }
        Err(e) => (
            Vec::new(),
            vec![format!(
                "could not look for scans a crash left on the disks: {e}"
            )],
        ),
    }
}

/// What the search found on a set of disks, kept for the life of the process: a recorder
/// rebuilt on the same disks (`serve` reconfigured by `mode=`, `net_port=`, …) is told what
/// the first found, each scan looked at again (one that has been closed or removed since is
/// left out), rather than walk a season of scans before its first `record=on`.
type Found = (Vec<UnclosedScan>, Vec<String>);
static SEARCHED: std::sync::LazyLock<std::sync::Mutex<HashMap<Vec<PathBuf>, Found>>> =
    std::sync::LazyLock::new(Default::default);

fn searched(disks: &[PathBuf]) -> Result<Found, crate::vdif::scan::ScanError> {
    let mut key: Vec<PathBuf> = disks
        .iter()
        .map(|d| d.canonicalize().unwrap_or_else(|_| d.clone()))
        .collect();
    key.sort();
    key.dedup();
    let cached = SEARCHED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
        .cloned();
    let found = match cached {
        Some((found, more)) => {
            let still = found
                .into_iter()
                .filter_map(|u| {
                    let scan = ScanLayout::locate(&u.name, disks, Some(u.format)).ok()?;
                    let s = scan.summary().ok()?;
                    (!s.closed).then(|| UnclosedScan::of(s))
                })
                .collect();
            (still, more)
        }
        None => {
            let searched = find_unclosed_scans(disks, MOST_READ);
            give_back_memory();
            let (found, more) = searched?;
            (found.into_iter().map(UnclosedScan::of).collect(), more)
        }
    };
    SEARCHED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, found.clone());
    Ok(found)
}

/// Returns to the system what the search held of the disks' listing (tens of megabytes on a
/// season of scans, spread over the threads that read the disks), which the allocator would
/// otherwise keep for the life of the recorder.
fn give_back_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: glibc's malloc_trim only releases free memory; no pointer is passed.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vdif::layout;

    fn frame(seconds: u32, frame_nr: u32, size: usize) -> Vec<u8> {
        let mut f = vec![0u8; size];
        let words = [
            seconds,
            (53 << 24) | frame_nr,
            (3 << 29) | (size as u32 / 8),
            0,
        ];
        for (i, w) in words.iter().enumerate() {
            f[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        f
    }

    #[test]
    fn a_scan_without_summary_is_named_with_its_whole_frames_and_torn_bytes() {
        let disk = std::env::temp_dir().join(format!("vdifrec-unclosed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&disk);
        std::fs::create_dir_all(&disk).unwrap();
        let mut bytes = Vec::new();
        for n in 0..3 {
            bytes.extend(frame(100, n, 1056));
        }
        bytes.extend(&frame(100, 3, 1056)[..500]);
        std::fs::write(layout::file_path(&disk, "crashed"), &bytes).unwrap();
        std::fs::write(layout::file_path(&disk, "closed"), frame(100, 0, 1056)).unwrap();
        let summary = layout::summary_path(&disk, "closed", Format::File);
        std::fs::create_dir_all(summary.parent().unwrap()).unwrap();
        std::fs::write(summary, "{}").unwrap();

        let (found, notes) = find(std::slice::from_ref(&disk));
        assert_eq!(found.len(), 1, "{found:?}");
        let u = &found[0];
        assert_eq!(
            (
                u.name.as_str(),
                u.frames,
                u.bytes,
                u.torn_bytes,
                u.torn_pieces
            ),
            ("crashed", 3, 3 * 1056, 500, 1)
        );
        assert_eq!(notes, vec![u.note.clone()]);
        assert!(
            u.note.starts_with(
                "scan crashed (file on 1 disk) was never closed (no summary beside it"
            ) && u.note.contains(": 3 whole frames (3,168 bytes) up to VDIF epoch 53 second 100 frame 2")
                && u.note.contains("torn: 1 piece, 500 bytes")
                && u.note.ends_with(&format!(
                    "`vdifrec scans --repair crashed --disk {}` cuts it to whole frames and marks it closed",
                    disk.display()
                )),
            "{}",
            u.note
        );
        std::fs::remove_dir_all(&disk).unwrap();
    }

    #[test]
    fn a_recorder_rebuilt_on_the_same_disks_is_told_what_the_first_search_found_checked_again() {
        let disk =
            std::env::temp_dir().join(format!("vdifrec-unclosed-again-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&disk);
        std::fs::create_dir_all(&disk).unwrap();
        for name in ["left1", "left2"] {
            std::fs::write(layout::file_path(&disk, name), frame(100, 0, 1056)).unwrap();
        }
        let (found, _) = find(std::slice::from_ref(&disk));
        assert_eq!(
            found
                .iter()
                .map(|u| u.name.as_str())
                .collect::<Vec<_>>()
                .len(),
            2
        );
        // One is repaired (closed) and one removed before the recorder is built again; a scan
        // written since by another program is not searched for (the disks are not walked again).
        let summary = layout::repair_path(&disk, "left1", Format::File);
        std::fs::create_dir_all(summary.parent().unwrap()).unwrap();
        std::fs::write(summary, "{}").unwrap();
        std::fs::write(layout::file_path(&disk, "later"), frame(100, 0, 1056)).unwrap();
        let (again, _) = find(std::slice::from_ref(&disk));
        assert_eq!(
            again.iter().map(|u| u.name.as_str()).collect::<Vec<_>>(),
            vec!["left2"]
        );
        std::fs::remove_file(layout::file_path(&disk, "left2")).unwrap();
        assert!(find(std::slice::from_ref(&disk)).0.is_empty());
        std::fs::remove_dir_all(&disk).unwrap();
    }

    #[test]
    fn only_the_newest_are_read_and_the_others_named() {
        let disk =
            std::env::temp_dir().join(format!("vdifrec-unclosed-many-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&disk);
        std::fs::create_dir_all(&disk).unwrap();
        let n = MOST_READ + 2;
        for k in 0..n {
            let path = layout::file_path(&disk, &format!("s{k:02}"));
            std::fs::write(&path, frame(100, k as u32, 1056)).unwrap();
            // s00 oldest, s17 newest.
            let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000 + k as u64);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(when)
                .unwrap();
        }
        let (found, notes) = find(std::slice::from_ref(&disk));
        let names: Vec<&str> = found.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names.len(), MOST_READ);
        assert_eq!((names[0], names[MOST_READ - 1]), ("s17", "s02"));
        assert_eq!(notes.len(), MOST_READ + 1);
        assert!(
            notes[MOST_READ].starts_with(
                "2 older scan(s) on the disks have no summary beside them either (not read; \
                 written by another program, or left by earlier crashes): s01, s00;"
            ),
            "{}",
            notes[MOST_READ]
        );
        std::fs::remove_dir_all(&disk).unwrap();
    }
}
